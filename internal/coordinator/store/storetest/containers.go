package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func testContainers(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got, err := s.ListContainers(ctx, store.ContainerFilter{}); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ListContainers on an empty store = %#v, %v; want empty, not nil", got, err)
	}
	if _, err := s.FindContainer(ctx, "j1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("FindContainer(unknown) = %v, want not found", err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := func(id string) api.ContainerJob { return api.ContainerJob{ID: id, Name: "web", Image: "busybox"} }
	code := 3
	err := s.PutContainers(ctx, "n-a", []api.Container{
		{Job: job("j1"), Status: api.ContainerRunning, ContainerID: "abc", CreatedAt: t0},
		{Job: job("j2"), Status: api.ContainerFailed, ExitCode: &code, Reason: "exit code 3", CreatedAt: t0.Add(time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The job moves: node b runs it, node a reports it undeployed after.
	if err := s.PutContainers(ctx, "n-b", []api.Container{{Job: job("j1"), Status: api.ContainerRunning, CreatedAt: t0.Add(2 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutContainers(ctx, "n-a", []api.Container{{Job: job("j1"), Status: api.ContainerUndeployed, ContainerID: "abc", CreatedAt: t0}}); err != nil {
		t.Fatal(err)
	}
	found, err := s.FindContainer(ctx, "j1")
	if err != nil || len(found) != 2 || found[0].Node != "n-b" || found[0].Status != api.ContainerRunning || found[1].Status != api.ContainerUndeployed {
		t.Errorf("FindContainer(j1) after a move = %+v, %v; want the live report on n-b first", found, err)
	}
	live, err := s.ListContainers(ctx, store.ContainerFilter{Live: true})
	if err != nil || len(live) != 1 || live[0].Node != "n-b" {
		t.Errorf("ListContainers(live) = %+v, %v; want j1 on n-b only", live, err)
	}
	onA, err := s.ListContainers(ctx, store.ContainerFilter{NodeID: "n-a"})
	if err != nil || len(onA) != 2 || onA[0].Job.ID != "j1" || onA[1].ExitCode == nil || *onA[1].ExitCode != 3 {
		t.Errorf("ListContainers(n-a) = %+v, %v; want j1 then j2 with its exit code", onA, err)
	}
	if err := s.PutContainers(ctx, "n-a", []api.Container{{Job: job(""), Status: api.ContainerRunning}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("PutContainers without a job id = %v, want invalid", err)
	}
	if err := s.DeleteContainer(ctx, "n-a", "j2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer(ctx, "n-a", "j2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteContainer twice = %v, want not found", err)
	}
}
