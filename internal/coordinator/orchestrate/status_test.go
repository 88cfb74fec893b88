package orchestrate

import (
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// TestStatusReachesTheOtherServers checks that a server that does not run
// the orchestrator answers for the pools from what the leader's saved, and
// that a round that changes nothing writes nothing.
// openStore opens a SQLite store in the test's directory, closed when
// the test ends.
func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestStatusReachesTheOtherServers(t *testing.T) {
	ctx := t.Context()
	st := openStore(t)
	leader := New(Config{}, st, nil, slog.New(slog.DiscardHandler))
	other := New(Config{}, st, nil, slog.New(slog.DiscardHandler))

	if got := other.Status(ctx, "gpu"); got.Desired != 0 || got.Demand != "" {
		t.Errorf("Status() before any round = %+v, want zero", got)
	}
	leader.running = true
	leader.status["gpu"] = PoolStatus{Desired: 3, Demand: "2 suites", Suites: []string{"render"}, Starting: 2}
	leader.saveStatus(ctx)
	leader.saveStatus(ctx) // unchanged: not written again

	got := other.Status(ctx, "gpu")
	if got.Desired != 3 || got.Demand != "2 suites" || got.Starting != 2 || !slices.Equal(got.Suites, []string{"render"}) {
		t.Errorf("Status() on another server = %+v, want the leader's", got)
	}
	if line, want := other.ForSuite(ctx, "render"), "pool gpu is starting 2 machines"; line != want {
		t.Errorf("ForSuite() on another server = %q, want %q", line, want)
	}
	d, err := st.GetDocument(ctx, statusKind, statusName)
	if err != nil || d.Version != 1 {
		t.Errorf("saved status = version %d, %v, want version 1: an unchanged status is not saved again", d.Version, err)
	}
	// The leader answers from its own round, saved or not.
	leader.status["gpu"] = PoolStatus{Desired: 4}
	if got := leader.Status(ctx, "gpu"); got.Desired != 4 {
		t.Errorf("Status() on the leader = %+v, want its own round's", got)
	}
	// A launch that retries: the suite's reason names the provider's error.
	leader.status["gpu"] = PoolStatus{Suites: []string{"render"}, Starting: 1, Waiting: "provisioning machine pm-1 failed (try 1 of 3), retrying in 2s: connection refused"}
	if line := leader.ForSuite(ctx, "render"); line != "pool gpu is starting 1 machine (provisioning machine pm-1 failed (try 1 of 3), retrying in 2s: connection refused)" {
		t.Errorf("ForSuite() while a launch retries = %q; want it to name the error", line)
	}
}
