package storetest

import (
	"errors"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// testEnsembles: an ensemble reads back as stored, by ID or name; a live
// name is unique, a shut-down one gives it up; updates apply in place.
func testEnsembles(t *testing.T, s store.Store) {
	ctx := t.Context()
	e := api.Ensemble{ID: "e1", Name: "shop", State: api.EnsembleDeploying, Owner: "alice",
		Spec:     api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db", Count: 1}}},
		Replicas: []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: "n1", NodeName: "one"}}}
	if err := s.CreateEnsemble(ctx, e); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"e1", "shop"} {
		got, err := s.GetEnsemble(ctx, ref)
		if err != nil || got.ID != "e1" || got.Spec.Allocations[0].Name != "db" || len(got.Replicas) != 1 || got.CreatedAt.IsZero() {
			t.Errorf("GetEnsemble(%q) = %+v, %v", ref, got, err)
		}
	}
	dup := e
	dup.ID = "e2"
	if err := s.CreateEnsemble(ctx, dup); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a second live ensemble named shop: %v, want a conflict", err)
	}
	got, err := s.UpdateEnsemble(ctx, "e1", func(e *api.Ensemble) error {
		e.State = api.EnsembleShutDown
		e.Lost = []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: "n0", Container: "old"}}
		return nil
	})
	if err != nil || got.State != api.EnsembleShutDown {
		t.Fatalf("UpdateEnsemble = %+v, %v", got, err)
	}
	if back, err := s.GetEnsemble(ctx, "e1"); err != nil || len(back.Lost) != 1 || back.Lost[0].Container != "old" {
		t.Errorf("lost replicas read back as %+v, %v", back.Lost, err)
	}
	if err := s.CreateEnsemble(ctx, dup); err != nil {
		t.Errorf("the name after the first was shut down: %v, want it free", err)
	}
	if got, _ := s.GetEnsemble(ctx, "shop"); got.ID != "e2" {
		t.Errorf("GetEnsemble(shop) = %s, want the newest, e2", got.ID)
	}
	live, err := s.ListEnsembles(ctx, false)
	if err != nil || len(live) != 1 || live[0].ID != "e2" {
		t.Errorf("ListEnsembles(live) = %v, %v; want [e2]", live, err)
	}
	if all, err := s.ListEnsembles(ctx, true); err != nil || len(all) != 2 {
		t.Errorf("ListEnsembles(all) = %d, %v; want 2", len(all), err)
	}
	if _, err := s.GetEnsemble(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetEnsemble(nope) = %v, want not found", err)
	}
}
