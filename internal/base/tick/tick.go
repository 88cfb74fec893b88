// Package tick runs a chore at a steady pace until its context ends: the
// shape of every background loop (write heartbeats, look for silent
// agents, close idle suites, collect unused files, poll a metadata
// service).
package tick

import (
	"context"
	"time"
)

// Every calls f every d, the first time d from now, until ctx ends. A call
// that takes longer than d delays the next one rather than piling calls
// up.
func Every(ctx context.Context, d time.Duration, f func()) { From(ctx, d, d, f) }

// From calls f first after first (0: at once), then every d, until ctx
// ends. The pace counts from each call's start, so a slow call is not
// followed by a burst.
func From(ctx context.Context, first, d time.Duration, f func()) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(d)
		f()
	}
}
