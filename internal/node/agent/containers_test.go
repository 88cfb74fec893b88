package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/node/container"
	"github.com/nodemgr/nodemgr/internal/node/portalloc"
)

// containerBooks is an agent's workloads with the real container manager
// (the machine's engine), port allocator and onboarded books.
func containerBooks(t *testing.T, defaults container.Defaults) (*workloads, *client.Client) {
	t.Helper()
	engine := dockertest.Client(t)
	dockertest.EnsureImage(t, engine)
	dir := t.TempDir()
	w := &workloads{log: slog.New(slog.DiscardHandler), changed: make(chan struct{}, 1),
		reports: map[string]api.Container{}, reported: make(chan struct{}, 1), containerDefaults: defaults}
	var err error
	w.ports, err = portalloc.New(portalloc.Config{Min: 40200, Max: 40300, StatePath: filepath.Join(dir, "ports.json")})
	if err != nil {
		t.Fatal(err)
	}
	w.containers, err = container.New(container.Config{Engine: engine, StateDir: filepath.Join(dir, "containers"),
		Ports: containerPorts{w.ports}, Node: "n1", OnChange: w.containerChanged, StopGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := testBooks(t, dir)
	if _, err := l.Onboard(50, 1); err != nil {
		t.Fatal(err)
	}
	w.capacity = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.containers.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, engine
}

func testJob(t *testing.T, engine *client.Client, name string) api.ContainerJob {
	return api.ContainerJob{ID: name + "-" + container.NewJobID(), Name: name, Image: dockertest.Image,
		Command: []string{"sleep", "300"}, Labels: dockertest.Labels(t, engine)}
}

// A job without cpus or memory_mb runs with the node's defaults as real
// engine limits, and the books hold exactly those limits; a node with no
// default refuses such a job with a field error and books nothing.
func TestContainerBooksCoverWhatRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, engine := containerBooks(t, container.Defaults{CPUs: 1, MemoryMB: 512})

	tests := []struct {
		name       string
		cpus       float64
		memoryMB   int64
		wantCPUs   float64
		wantMemory int64
	}{
		{"no limits: the defaults", 0, 0, 1, 512},
		{"own cpus, default memory", 0.25, 0, 0.25, 512},
		{"own limits", 0.5, 64, 0.5, 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := testJob(t, engine, "books")
			job.CPUs, job.MemoryMB = tc.cpus, tc.memoryMB
			c, err := w.deployContainer(ctx, job)
			if err != nil {
				t.Fatalf("deployContainer: %v", err)
			}
			defer w.containers.Delete(ctx, c.Job.ID)
			al, err := w.capacity.Get(allocationID(api.AllocationContainer, c.Job.ID))
			if err != nil {
				t.Fatalf("the job is not in the books: %v", err)
			}
			insp, err := engine.ContainerInspect(ctx, c.ContainerID, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hc := insp.Container.HostConfig
			if al.CPUs != tc.wantCPUs || al.MemoryMB != tc.wantMemory {
				t.Errorf("booked %v cpus, %v MiB; want %v, %v", al.CPUs, al.MemoryMB, tc.wantCPUs, tc.wantMemory)
			}
			if hc.NanoCPUs != int64(tc.wantCPUs*1e9) || hc.Memory != tc.wantMemory<<20 {
				t.Errorf("engine enforces %d nano-cpus, %d bytes; want %v cores, %d MiB as booked", hc.NanoCPUs, hc.Memory, tc.wantCPUs, tc.wantMemory)
			}
			if c.Job.CPUs != tc.wantCPUs || c.Job.MemoryMB != tc.wantMemory {
				t.Errorf("the job says %v cpus, %v MiB; want what runs, %v, %v", c.Job.CPUs, c.Job.MemoryMB, tc.wantCPUs, tc.wantMemory)
			}
		})
	}

	w.containerDefaults = container.Defaults{}
	job := testJob(t, engine, "nodefault")
	job.MemoryMB = 64
	_, err := w.deployContainer(ctx, job)
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "cpus" {
		t.Errorf("deployContainer without cpus and no default = %v, want a field error on cpus", err)
	}
	if _, err := w.capacity.Get(allocationID(api.AllocationContainer, job.ID)); err == nil {
		t.Errorf("a refused job is in the books")
	}
	if _, err := w.containers.Get(job.ID); err == nil {
		t.Errorf("a refused job was recorded")
	}
}

func TestContainerDefaultsConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want container.Defaults
		bad  string
	}{
		{"unset: built-in", "data_dir: /tmp/x\n", container.Defaults{CPUs: container.DefaultCPUs, MemoryMB: container.DefaultMemoryMB}, ""},
		{"given", "container_defaults: {cpus: 1, memory_mb: 512}\n", container.Defaults{CPUs: 1, MemoryMB: 512}, ""},
		{"no defaults", "container_defaults: {}\n", container.Defaults{}, ""},
		{"too little memory", "container_defaults: {cpus: 1, memory_mb: 2}\n", container.Defaults{}, "container_defaults.memory_mb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfigFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.bad != "" {
				if err := c.validateWorkloads(); err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Errorf("validate = %v, want an error naming %s", err, tc.bad)
				}
				return
			}
			if got := c.containerDefaults(); got != tc.want {
				t.Errorf("containerDefaults() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
