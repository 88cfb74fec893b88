package orchestrate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Pools' status. The orchestrator runs on the leading server only; the
// others answer for the pools (desired size, demand, why a pool waits,
// which suites it starts machines for) from the status the leader saves
// in the store after each round that changed it: one small document, so a
// round that changes nothing writes nothing.

// statusKind and statusName name the document the leader saves.
const (
	statusKind = "pool-status"
	statusName = "pools"
)

// saveStatus saves the last round's status for the other servers, if it
// changed since it was last saved.
func (o *Orchestrator) saveStatus(ctx context.Context) {
	o.mu.Lock()
	body, err := json.Marshal(o.status)
	same := bytes.Equal(body, o.saved)
	o.mu.Unlock()
	if err != nil || same {
		return
	}
	if _, err := o.store.PutDocument(ctx, store.Document{Kind: statusKind, Name: statusName, Body: body}); err != nil {
		if ctx.Err() == nil {
			o.log.Warn("save the pools' status for the other servers", "err", err)
		}
		return
	}
	o.mu.Lock()
	o.saved = body
	o.mu.Unlock()
}

// Statuses is every pool's status from the last round: this server's own
// while it runs the orchestrator, else the leader's as saved.
func (o *Orchestrator) Statuses(ctx context.Context) map[string]PoolStatus {
	o.mu.Lock()
	if o.running {
		defer o.mu.Unlock()
		return maps.Clone(o.status) // a round replaces entries, never edits one
	}
	o.mu.Unlock()
	d, err := o.store.GetDocument(ctx, statusKind, statusName)
	if err != nil {
		if !errdefs.IsNotFound(err) {
			o.log.Warn("read the leader's pools' status", "err", err)
		}
		return nil
	}
	var out map[string]PoolStatus
	if err := json.Unmarshal(d.Body, &out); err != nil {
		o.log.Warn("read the leader's pools' status", "err", err)
		return nil
	}
	return out
}

// Status is a pool's status from the last round.
func (o *Orchestrator) Status(ctx context.Context, pool string) PoolStatus {
	return o.Statuses(ctx)[pool]
}

// ForSuite says in one line which pools are starting machines for a
// suite, or "".
func (o *Orchestrator) ForSuite(ctx context.Context, suite string) string {
	all := o.Statuses(ctx)
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		st := all[name]
		for _, s := range st.Suites {
			if s != suite {
				continue
			}
			switch {
			case st.Starting > 0 && st.Waiting != "":
				// A launch that retries says why (the provider's error).
				parts = append(parts, fmt.Sprintf("pool %s is starting %d machine%s (%s)", name, st.Starting, plural(st.Starting), st.Waiting))
			case st.Starting > 0:
				parts = append(parts, fmt.Sprintf("pool %s is starting %d machine%s", name, st.Starting, plural(st.Starting)))
			case st.Waiting != "":
				parts = append(parts, fmt.Sprintf("pool %s: %s", name, st.Waiting))
			}
		}
	}
	return strings.Join(parts, "; ")
}
