package hub

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// newHub makes a hub over a fresh SQLite store (newHubOver).
func newHub(t *testing.T, tune func(*Config)) (*Hub, store.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newHubOver(t, st, tune), st
}

// newHubOver makes a hub over st with the timings of the server's
// defaults, changed by tune if not nil, and hooks that do nothing.
func newHubOver(t *testing.T, st Store, tune func(*Config)) *Hub {
	t.Helper()
	cfg := Config{ReplicaID: "r1", OfflineAfter: 2 * time.Minute, ConfirmTimeout: 10 * time.Second,
		ReconnectGrace: 10 * time.Second, FlushInterval: time.Second, LeaderLease: 10 * time.Second,
		CallTimeout: time.Minute, Sole: true}
	if tune != nil {
		tune(&cfg)
	}
	return New(cfg, st, nil, Hooks{
		Reclaim:          func(context.Context, string, string) {},
		Singletons:       func() []func(context.Context) { return nil },
		WakeOrchestrator: func() {},
		SuiteCancelled:   func(context.Context, string) {},
	}, slog.New(slog.DiscardHandler))
}

// TestHeardElsewhereStaysOnline: a suspect node that this replica holds no
// session for is not declared offline when the store heard from it since
// (through another replica's flush); without such a beat it is.
func TestHeardElsewhereStaysOnline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		beat  bool
		after string
	}{
		{"beat through another replica", true, api.StatusOnline},
		{"no beat", false, api.StatusOffline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, st := newHub(t, nil)
			ctx := t.Context()
			long := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
			n, err := st.CreateNode(ctx, store.Node{ID: "n1", Name: "n1", MachineID: "m1", DataDir: "/d",
				Status: api.StatusOnline, LastHeartbeat: long})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.SetNodeStatus(ctx, n.ID, api.StatusSuspect, "no heartbeat"); err != nil {
				t.Fatal(err)
			}
			if tc.beat {
				// Older than the suspicion, as a batch flushed late is:
				// the store keeps the node suspect but records the beat.
				if err := st.RecordHeartbeats(ctx, []store.Heartbeat{{NodeID: n.ID, At: long.Add(time.Minute), AgentState: api.AgentIdle}}); err != nil {
					t.Fatal(err)
				}
			}
			h.confirm(ctx, n, long, 50*time.Millisecond, "no heartbeat")
			if got, _ := st.GetNode(ctx, n.ID); got.Status != tc.after {
				t.Errorf("status after the check = %s (%s), want %s", got.Status, got.StatusReason, tc.after)
			}
		})
	}
}

// TestConnectionLostDuringHeartbeatCheckGetsReconnectGrace: a node whose
// heartbeats are overdue is being checked when its connection ends. The
// check must give it the reconnect grace, not the shorter confirm
// timeout, and say that its connection was lost.
func TestConnectionLostDuringHeartbeatCheckGetsReconnectGrace(t *testing.T) {
	const confirm, grace = 50 * time.Millisecond, 600 * time.Millisecond
	h, st := newHub(t, func(c *Config) { c.ConfirmTimeout, c.ReconnectGrace = confirm, grace })
	ctx := t.Context()
	long := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	n, err := st.CreateNode(ctx, store.Node{ID: "n1", Name: "n1", MachineID: "m1", DataDir: "/d",
		Status: api.StatusSuspect, LastHeartbeat: long})
	if err != nil {
		t.Fatal(err)
	}
	checkDone := make(chan struct{})
	if !h.live.startCheck(n.ID, func() {
		defer close(checkDone)
		h.confirm(ctx, n, long, confirm, "no heartbeat since then")
	}) {
		t.Fatal("the heartbeat check did not start")
	}
	lostAt := time.Now()
	h.ConnectionLost(ctx, n.ID, long, lostAt)
	<-checkDone

	got, _ := st.GetNode(ctx, n.ID)
	if took := time.Since(lostAt); took < grace {
		t.Errorf("the check ended %s after the connection was lost, before the reconnect grace %s", took, grace)
	}
	if got.Status != api.StatusOffline || !strings.Contains(got.StatusReason, "connection lost") {
		t.Errorf("node is %s (%q), want offline because its connection was lost", got.Status, got.StatusReason)
	}
}
