package hub

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// newHub makes a hub over a fresh SQLite store (newHubOver).
func newHub(t *testing.T) (*Hub, store.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newHubOver(t, st, nil), st
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
			h, st := newHub(t)
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
