package server

import (
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/ensemble"
	"github.com/nodemgr/nodemgr/internal/store"
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
