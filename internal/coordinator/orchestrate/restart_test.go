package orchestrate

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestRestartMidBootstrap: a machine left bootstrapping by a server that
// stopped before its agent was delivered is failed and destroyed on the
// first round of the next run, not after the bootstrap timeout, and its
// candidate does not back off: the crash was the server's, not the
// provider's (issue 27). A machine whose agent was delivered still waits
// for it to register, and one whose agent does not register within the
// bootstrap timeout still counts against its candidate.
func TestRestartMidBootstrap(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name        string
		launched    time.Time
		delivered   time.Time // zero: the bootstrap was cut off
		wantState   string
		wantReason  string
		wantBackoff bool
	}{
		{"cut off mid-delivery", now.Add(-10 * time.Second), time.Time{},
			api.MachineFailed, "the server restarted while bootstrapping it", false},
		{"cut off long ago", now.Add(-time.Hour), time.Time{},
			api.MachineFailed, "the server restarted while bootstrapping it", false},
		{"delivered, its agent on its way", now.Add(-10 * time.Second), now.Add(-5 * time.Second),
			api.MachineBootstrapping, "", false},
		{"delivered, its agent never came", now.Add(-time.Hour), now.Add(-time.Hour),
			api.MachineFailed, "did not register within the bootstrap timeout", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := openStore(t)
			m := store.PoolMachine{ID: "pm-1", Pool: "p1", Template: "small", Provider: "recording", State: api.MachineBootstrapping,
				DeploymentID: "d-1", LaunchedAt: tc.launched, DeliveredAt: tc.delivered}
			d := store.Deployment{ID: "d-1", Provider: "recording", ResourceID: "r-1", Name: "p1-pm-1", State: "running"}
			if err := st.CreatePoolMachine(ctx, m, d); err != nil {
				t.Fatal(err)
			}

			// The next run's first round.
			cl := &recordingCluster{}
			o := New(Config{}, st, cl, slog.New(slog.DiscardHandler))
			if err := o.Reconcile(ctx); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			o.wg.Wait()

			got, err := st.GetPoolMachine(ctx, "pm-1")
			if err != nil || got.State != tc.wantState || !strings.Contains(got.StateReason, tc.wantReason) {
				t.Fatalf("machine after the first round = %s (%q), %v; want %s (%q)", got.State, got.StateReason, err, tc.wantState, tc.wantReason)
			}
			wantDestroyed := tc.wantState == api.MachineFailed
			if destroyed := len(cl.destroyed) == 1 && cl.destroyed[0] == "r-1"; destroyed != wantDestroyed {
				t.Errorf("destroyed %v, want r-1 destroyed = %v", cl.destroyed, wantDestroyed)
			}
			_, backoff := o.backoff[candidateKey{"small", "recording"}]
			if backoff != tc.wantBackoff {
				t.Errorf("small on recording backs off = %v, want %v", backoff, tc.wantBackoff)
			}
		})
	}
}
