package container_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

// writeRecord writes a job's record as the manager does.
func writeRecord(t *testing.T, dir string, c api.Container) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"version": 1, "container": c})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, c.Job.ID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsLoad needs no engine: New reads the records without
// contacting it.
func TestRecordsLoad(t *testing.T) {
	engine, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer engine.Close()
	dir := t.TempDir()
	code := 0
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	done := api.Container{
		Job:    api.ContainerJob{ID: "done1", Name: "batch", Image: "busybox", Technology: "docker", CPUs: 1, MemoryMB: 100},
		Status: api.ContainerCompleted, ContainerID: "abc", ExitCode: &code, CreatedAt: at, FinishedAt: &at,
	}
	running := api.Container{
		Job:    api.ContainerJob{ID: "run1", Name: "web", Image: "busybox", Technology: "docker", CPUs: 0.5, MemoryMB: 64},
		Status: api.ContainerRunning, ContainerID: "def", CreatedAt: at.Add(time.Second),
		Ports: []api.ContainerPort{{Container: 80, Host: 30000, Protocol: "tcp"}},
	}
	writeRecord(t, dir, done)
	writeRecord(t, dir, running)
	os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"version":1,"container":{"job":{"id":"else"},"status":"RUNNING"}}`), 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-x.json-123"), []byte("partial"), 0o600)

	m, err := container.New(container.Config{Engine: engine, StateDir: dir})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if diff := cmp.Diff([]api.Container{done, running}, m.List()); diff != "" {
		t.Errorf("List() mismatch (-want +got):\n%s", diff)
	}
	if cpus, mem := m.Committed(); cpus != 0.5 || mem != 64 {
		t.Errorf("Committed() = %v, %v, want 0.5, 64 (the running job only)", cpus, mem)
	}
	if _, err := m.Get("broken"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(broken) = %v, want not found: a corrupt record is skipped", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-x.json-123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "broken.json")); err != nil {
		t.Errorf("corrupt record removed (%v), want it kept for the user to look at", err)
	}
}
