package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestFailedEnsembleKeepsCreatedAt: a deploy that fails (its node is not
// connected) records the ensemble failed with the creation time the store
// gave it, not the zero time of the handler's copy (stored as 1754-08-30).
func TestFailedEnsembleKeepsCreatedAt(t *testing.T) {
	ts := newTestServer(t)
	id, _ := ts.nodeNamed(t, "n1")
	n, err := ts.store.GetNode(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	spec := api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db",
		Resources: api.Resources{CPUs: 0.5, MemoryMB: 64}, Container: &api.ContainerJob{Image: "postgres:16"}}}}
	plan := ensemble.Plan{Ensemble: "shop", Placements: []ensemble.Placement{{Allocation: "db", Kind: api.AllocationContainer,
		Replica: 1, NodeID: id, NodeName: "n1", Resources: spec.Allocations[0].Resources}}}
	e := api.Ensemble{ID: "e-1", Name: "shop", Spec: spec, State: api.EnsembleDeploying, Owner: "admin", Replicas: planReplicas(plan)}
	before := time.Now()
	if err := ts.store.CreateEnsemble(t.Context(), e); err != nil {
		t.Fatal(err)
	}

	got, err := ts.startEnsemble(t.Context(), e, plan, map[string]store.Node{id: n})
	if err == nil {
		t.Fatalf("startEnsemble on a node that is not connected = %+v, nil; want an error", got)
	}
	stored, err := ts.store.GetEnsemble(t.Context(), "e-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != api.EnsembleFailed || stored.Reason == "" {
		t.Errorf("stored ensemble is %s (%q), want %s with a reason", stored.State, stored.Reason, api.EnsembleFailed)
	}
	if d := stored.CreatedAt.Sub(before); d < -time.Second || d > time.Minute {
		t.Errorf("stored created_at = %v, want about %v", stored.CreatedAt, before)
	}
	if !got.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("startEnsemble answered created_at %v, want the stored %v", got.CreatedAt, stored.CreatedAt)
	}
}

// TestOfflineReplicas: while a node is offline, an ensemble's replica
// there and its container show UNKNOWN, not the RUNNING last reported;
// the replica that cannot be placed again elsewhere (no node is
// connected) is logged once, not at every tick.
func TestOfflineReplicas(t *testing.T) {
	ts := newTestServer(t)
	logs := &countingHandler{}
	ts.log = slog.New(logs)
	id, _ := ts.nodeNamed(t, "n1")
	if _, err := ts.store.SetNodeStatus(t.Context(), id, api.StatusOffline, "test"); err != nil {
		t.Fatal(err)
	}
	job := api.ContainerJob{ID: "shop-db-1", Name: "db", Image: "postgres:16"}
	if err := ts.store.PutContainers(t.Context(), id, []api.Container{{Job: job, Node: id, Status: api.ContainerRunning, CreatedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	spec := api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db",
		Resources: api.Resources{CPUs: 0.5, MemoryMB: 64}, Container: &api.ContainerJob{Image: "postgres:16"}}}}
	e := api.Ensemble{ID: "e-1", Name: "shop", Spec: spec, State: api.EnsembleRunning, Owner: "admin",
		Replicas: []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: id, NodeName: "n1", Container: job.ID, Status: api.ContainerRunning}}}
	if err := ts.store.CreateEnsemble(t.Context(), e); err != nil {
		t.Fatal(err)
	}

	var got api.Ensemble
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/ensembles/shop", nil, &got)
	if len(got.Replicas) != 1 || got.Replicas[0].Status != api.ContainerUnknown || got.State != api.EnsembleDegraded {
		t.Errorf("GET ensemble = %s, replicas %+v; want degraded with the replica %s", got.State, got.Replicas, api.ContainerUnknown)
	}
	var list api.ContainerList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/containers", nil, &list)
	if len(list.Containers) != 1 || list.Containers[0].Status != api.ContainerUnknown || !strings.Contains(list.Containers[0].Reason, "last reported RUNNING") {
		t.Errorf("GET containers = %+v, want one %s saying it was last reported RUNNING", list.Containers, api.ContainerUnknown)
	}
	var c api.Container
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/containers/"+job.ID, nil, &c)
	if c.Status != api.ContainerUnknown {
		t.Errorf("GET container = %s, want %s", c.Status, api.ContainerUnknown)
	}

	for range 5 { // five ticks of ensembleLoop
		ts.restoreEnsemble(t.Context(), e)
	}
	if n := logs.count(slog.LevelWarn, "place a lost node's replica again"); n != 1 {
		t.Errorf("5 failed tries to place the replica again logged %d warnings, want 1", n)
	}
}

// countingHandler counts log records by level and message.
type countingHandler struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]int{}
	}
	h.seen[r.Level.String()+" "+r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[level.String()+" "+msg]
}

// TestFailuresLog: a failure repeated every tick is logged when it starts,
// when its reason changes (at most every 10 s), once a minute while it
// stays, and again from scratch after it was ok.
func TestFailuresLog(t *testing.T) {
	var f failures
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	steps := []struct {
		sec       int
		reason    string
		ok        bool // the try worked
		wantLog   bool
		wantQuiet int
	}{
		{sec: 0, reason: "no fit", wantLog: true},
		{sec: 1, reason: "no fit"},
		{sec: 2, reason: "no fit"},
		{sec: 5, reason: "n2 refused"}, // changed, but within 10 s
		{sec: 12, reason: "n2 refused", wantLog: true, wantQuiet: 3},
		{sec: 13, reason: "no fit"}, // changed, within 10 s
		{sec: 40, reason: "n2 refused"},
		{sec: 72, reason: "n2 refused", wantLog: true, wantQuiet: 2},
		{sec: 73, ok: true},
		{sec: 74, reason: "no fit", wantLog: true},
	}
	for _, st := range steps {
		if st.ok {
			if !f.ok("k") {
				t.Errorf("at %ds: ok() = false, want true (it was failing)", st.sec)
			}
			continue
		}
		log, quiet := f.fail("k", st.reason, at(st.sec))
		if log != st.wantLog || quiet != st.wantQuiet {
			t.Errorf("at %ds: fail(%q) = %v, %d; want %v, %d", st.sec, st.reason, log, quiet, st.wantLog, st.wantQuiet)
		}
	}
	f.forget(at(75))
	if f.ok("k") {
		t.Error("ok() after forget = true, want the failure forgotten")
	}
}
