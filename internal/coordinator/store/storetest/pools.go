package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func testPoolMachines(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := store.PoolMachine{ID: "pm1", Pool: "build", Template: "small", Provider: "docker", State: api.MachineRequested,
		DeploymentID: "d1", CPUs: 1, MemoryMB: 96}
	d := store.Deployment{ID: "d1", Provider: "docker", Name: "build-pm1", Template: "small", State: "pending"}
	if err := s.CreatePoolMachine(ctx, m, d); err != nil {
		t.Fatal(err)
	}
	// The intent and the deployment are stored together, or neither.
	if _, err := s.GetDeployment(ctx, "d1"); err != nil {
		t.Errorf("GetDeployment after CreatePoolMachine = %v, want it stored", err)
	}
	clash := store.PoolMachine{ID: "pm2", Pool: "build", State: api.MachineRequested, DeploymentID: "d2"}
	if err := s.CreatePoolMachine(ctx, clash, store.Deployment{ID: "d2", Provider: "docker", Name: "build-pm1", State: "pending"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreatePoolMachine with a taken deployment name = %v, want conflict", err)
	}
	if _, err := s.GetPoolMachine(ctx, "pm2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetPoolMachine of a machine whose deployment clashed = %v, want not found (all or nothing)", err)
	}
	ready := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	delivered := ready.Add(-time.Minute)
	got, err := s.UpdatePoolMachine(ctx, "pm1", func(m *store.PoolMachine) error {
		m.State, m.NodeID, m.ReadyAt, m.DeliveredAt = api.MachineReady, "n1", ready, delivered
		return nil
	})
	if err != nil || got.State != api.MachineReady || !got.ReadyAt.Equal(ready) || !got.LaunchedAt.IsZero() {
		t.Fatalf("UpdatePoolMachine = %+v, %v", got, err)
	}
	back, err := s.GetPoolMachine(ctx, "pm1")
	if err != nil || back.NodeID != "n1" || !back.ReadyAt.Equal(ready) || !back.DeliveredAt.Equal(delivered) || back.CPUs != 1 || back.MemoryMB != 96 || !back.BusyAt.IsZero() {
		t.Errorf("GetPoolMachine = %+v, %v", back, err)
	}
	if _, err := s.UpdatePoolMachine(ctx, "nosuch", func(*store.PoolMachine) error { return nil }); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("UpdatePoolMachine(nosuch) = %v, want not found", err)
	}
	other := store.PoolMachine{ID: "pm3", Pool: "other", State: api.MachineRequested, DeploymentID: "d3"}
	if err := s.CreatePoolMachine(ctx, other, store.Deployment{ID: "d3", Provider: "docker", Name: "other-pm3", State: "pending"}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListPoolMachines(ctx, store.PoolMachineFilter{Pool: "build"})
	if err != nil || len(list) != 1 || list[0].ID != "pm1" {
		t.Errorf("ListPoolMachines(build) = %+v, %v; want pm1", list, err)
	}
	s.UpdatePoolMachine(ctx, "pm1", func(m *store.PoolMachine) error { m.State = api.MachineGone; return nil })
	if live, _ := s.ListPoolMachines(ctx, store.PoolMachineFilter{Pool: "build", Live: true}); len(live) != 0 {
		t.Errorf("ListPoolMachines(live) = %+v, want none: pm1 is gone", live)
	}
	if err := s.DeletePoolMachines(ctx, "build", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.ListPoolMachines(ctx, store.PoolMachineFilter{}); len(all) != 1 || all[0].ID != "pm3" {
		t.Errorf("after DeletePoolMachines(build): %+v, want only pm3 (live, of another pool)", all)
	}
	// Paging by keyset.
	first, _ := s.ListPoolMachines(ctx, store.PoolMachineFilter{Page: store.Page{Limit: 1}})
	if len(first) != 1 {
		t.Fatalf("first page = %+v", first)
	}
	if rest, _ := s.ListPoolMachines(ctx, store.PoolMachineFilter{Page: store.Page{After: first[0].Cursor()}}); len(rest) != 0 {
		t.Errorf("page after the last = %+v, want none", rest)
	}
}

func testPoolEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.AddPoolEvent(ctx, api.PoolEvent{Pool: "p"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("AddPoolEvent without a kind = %v, want invalid", err)
	}
	var ids []int64
	for _, msg := range []string{"one", "two", "three"} {
		e, err := s.AddPoolEvent(ctx, api.PoolEvent{Pool: "p", Kind: "scale-up", Message: msg})
		if err != nil || e.ID == 0 || e.At.IsZero() {
			t.Fatalf("AddPoolEvent = %+v, %v", e, err)
		}
		ids = append(ids, e.ID)
	}
	s.AddPoolEvent(ctx, api.PoolEvent{Pool: "q", Kind: "failed", Message: "elsewhere"})
	page, err := s.PoolEvents(ctx, "p", store.Page{Limit: 2})
	if err != nil || len(page) != 2 || page[0].Message != "one" || page[1].Message != "two" {
		t.Fatalf("PoolEvents first page = %+v, %v", page, err)
	}
	rest, _ := s.PoolEvents(ctx, "p", store.Page{After: store.PoolEventCursor(page[1])})
	if len(rest) != 1 || rest[0].ID != ids[2] {
		t.Errorf("PoolEvents after %d = %+v, want the third", page[1].ID, rest)
	}
	// A cutoff keeps what came at or after it.
	if err := s.DeletePoolEvents(ctx, "p", page[1].At); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.PoolEvents(ctx, "p", store.Page{}); len(left) != 2 || left[0].ID != ids[1] {
		t.Errorf("PoolEvents after deleting those before the second = %+v, want the last two", left)
	}
	if err := s.DeletePoolEvents(ctx, "p", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.PoolEvents(ctx, "p", store.Page{}); len(left) != 0 {
		t.Errorf("PoolEvents after delete = %+v", left)
	}
	if q, _ := s.PoolEvents(ctx, "q", store.Page{}); len(q) != 1 {
		t.Errorf("another pool's events = %+v, want kept", q)
	}
}

func testBoundJoinToken(t *testing.T, s store.Store) {
	ctx := t.Context()
	tk := store.Token{ID: "jt", Kind: api.TokenJoin, Hash: []byte("h-bound"), DeploymentID: "d9", MaxUses: 1}
	if err := s.CreateToken(ctx, tk); err != nil {
		t.Fatal(err)
	}
	back, err := s.TokenByHash(ctx, []byte("h-bound"))
	if err != nil || back.DeploymentID != "d9" {
		t.Errorf("TokenByHash = %+v, %v; want bound to d9", back, err)
	}
	used, err := s.UseJoinToken(ctx, "jt", time.Now())
	if err != nil || used.DeploymentID != "d9" {
		t.Errorf("UseJoinToken = %+v, %v; want bound to d9", used, err)
	}
	if err := s.CreateDeployment(ctx, store.Deployment{ID: "d9", Provider: "docker", Name: "m9", State: "running", MachineID: "mid-9"}); err != nil {
		t.Fatal(err)
	}
	if err := s.LinkDeploymentNode(ctx, "d9", "n9"); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.GetDeployment(ctx, "d9"); d.NodeID != "n9" || d.MachineID != "mid-9" {
		t.Errorf("deployment after LinkDeploymentNode = %+v, want node n9, machine id mid-9", d)
	}
	if got, _ := s.ListDeployments(ctx, store.DeploymentFilter{NodeID: "n9"}); len(got) != 1 || got[0].ID != "d9" {
		t.Errorf("ListDeployments(node n9) = %+v, want d9", got)
	}
	if err := s.LinkDeploymentNode(ctx, "nosuch", "n9"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("LinkDeploymentNode(nosuch) = %v, want not found", err)
	}
}
