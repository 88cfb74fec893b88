package storetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func testDeployments(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got, err := s.ListDeployments(ctx, store.DeploymentFilter{}); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ListDeployments on an empty store = %#v, %v; want empty, not nil", got, err)
	}
	d := store.Deployment{ID: "d1", Provider: "docker", Name: "web-1", Template: "small", State: "pending",
		Extra: map[string]any{"image": "busybox", "cpu": 2.0}, Labels: map[string]string{"nodemgr.deployment": "d1"}}
	if err := s.CreateDeployment(ctx, d); err != nil {
		t.Fatal(err)
	}
	// A live name is taken; a terminated one frees it.
	dup := d
	dup.ID = "d2"
	if err := s.CreateDeployment(ctx, dup); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreateDeployment with a live name = %v, want conflict", err)
	}
	// A taken ID says so, whatever the name.
	again := d
	again.Name = "web-other"
	if err := s.CreateDeployment(ctx, again); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "id d1 is taken") {
		t.Errorf("CreateDeployment with a taken ID = %v, want a conflict saying the id is taken", err)
	}
	got, err := s.UpdateDeployment(ctx, "d1", func(d *store.Deployment) error {
		d.State, d.ResourceID, d.Executors, d.MachineID = "running", "abc123", []string{"exec:docker"}, "5e1f00d"
		return nil
	})
	if err != nil || got.State != "running" || got.ResourceID != "abc123" || got.Extra["image"] != "busybox" || got.MachineID != "5e1f00d" {
		t.Fatalf("UpdateDeployment = %+v, %v", got, err)
	}
	if _, err := s.UpdateDeployment(ctx, "d1", func(*store.Deployment) error { return errdefs.ErrConflict }); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("UpdateDeployment whose fn fails = %v, want that error", err)
	}
	back, err := s.GetDeployment(ctx, "d1")
	if err != nil || back.State != "running" || len(back.Executors) != 1 || back.Labels["nodemgr.deployment"] != "d1" || back.MachineID != "5e1f00d" {
		t.Errorf("GetDeployment = %+v, %v", back, err)
	}
	s.UpdateDeployment(ctx, "d1", func(d *store.Deployment) error { d.State = "terminated"; return nil })
	if err := s.CreateDeployment(ctx, dup); err != nil {
		t.Errorf("CreateDeployment reusing a terminated name = %v, want nil", err)
	}
	// A failed deployment frees its name too: provisioning can be retried.
	s.UpdateDeployment(ctx, "d2", func(d *store.Deployment) error { d.State = "failed"; return nil })
	retry := dup
	retry.ID = "d3"
	if err := s.CreateDeployment(ctx, retry); err != nil {
		t.Errorf("CreateDeployment reusing a failed name = %v, want nil", err)
	}
	running, _ := s.ListDeployments(ctx, store.DeploymentFilter{States: []string{"pending"}})
	if len(running) != 1 || running[0].ID != "d3" {
		t.Errorf("ListDeployments(pending) = %v, want d3", running)
	}
	if err := s.DeleteDeployment(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDeployment(ctx, "d1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetDeployment after delete = %v, want not found", err)
	}
}
