package container_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

// memPorts is an in-memory port allocator. A specific port its owner
// already holds is granted again, as the agent's adapter must do (see
// container.Ports); random ports are ones nothing listens on.
type memPorts struct {
	mu   sync.Mutex
	held map[int]string
}

func newMemPorts() *memPorts { return &memPorts{held: map[int]string{}} }

func (p *memPorts) Allocate(owner string, ports []int, count int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, port := range ports {
		if o, ok := p.held[port]; ok && o != owner {
			return nil, errdefs.Conflict("ports[%d]: port %d is held by %q", i, port, o)
		}
	}
	got := slices.Clone(ports)
	for len(got) < len(ports)+count {
		port := 20000 + rand.IntN(30000)
		if _, ok := p.held[port]; ok || slices.Contains(got, port) || !free(port) {
			continue
		}
		got = append(got, port)
	}
	for _, port := range got {
		p.held[port] = owner
	}
	return got, nil
}

func (p *memPorts) Release(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, o := range p.held {
		if o == owner {
			delete(p.held, port)
		}
	}
}

// owned returns the ports owner holds, sorted.
func (p *memPorts) owned(owner string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for port, o := range p.held {
		if o == owner {
			out = append(out, port)
		}
	}
	slices.Sort(out)
	return out
}

func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// changes records what OnChange reports.
type changes struct {
	mu  sync.Mutex
	all []api.Container
}

func (c *changes) add(x api.Container) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, x)
}

func (c *changes) list() []api.Container {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// env is one test's engine, image, labels and state dir.
type env struct {
	t      *testing.T
	engine *client.Client
	image  string
	labels map[string]string
	dir    string
}

func setup(t *testing.T) *env {
	t.Helper()
	c := dockertest.Client(t)
	return &env{t: t, engine: c, image: dockertest.EnsureImage(t, c), labels: dockertest.Labels(t, c), dir: t.TempDir()}
}

// manager makes a manager on the env's state dir and runs it until the
// test ends; stop ends its Run early.
func (e *env) manager(ports container.Ports, ch *changes, edit ...func(*container.Config)) (m *container.Manager, stop func()) {
	e.t.Helper()
	cfg := container.Config{
		Engine:        e.engine,
		StateDir:      e.dir,
		HostIP:        "127.0.0.1",
		Node:          "node-1",
		UsageInterval: time.Hour,
		StopGrace:     time.Second,
		// Changes must come from the engine's events: the tests would
		// time out waiting for the reconcile.
		ReconcileInterval: time.Hour,
	}
	if ports != nil {
		cfg.Ports = ports
	}
	if ch != nil {
		cfg.OnChange = ch.add
	}
	for _, f := range edit {
		f(&cfg)
	}
	m, err := container.New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run = %v, want nil when its context ends", err)
				}
			case <-time.After(30 * time.Second):
				e.t.Errorf("Run did not return 30s after its context ended")
			}
		})
	}
	e.t.Cleanup(stop)
	return m, stop
}

// job returns a job on the test image that carries the test's labels.
func (e *env) job(name string, command ...string) api.ContainerJob {
	b := make([]byte, 4)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return api.ContainerJob{
		ID:      fmt.Sprintf("t%x", b),
		Name:    name,
		Image:   e.image,
		Command: command,
		Labels:  e.labels,
	}
}

// jobContainers lists the containers that carry the job's label.
func (e *env) jobContainers(id string) []dockertest.ContainerSummary {
	return dockertest.Containers(e.t, e.engine, map[string]string{workload.LabelJob: id})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits for the job to reach status and returns it.
func waitStatus(t *testing.T, m *container.Manager, id, status string) api.Container {
	t.Helper()
	var c api.Container
	defer func() {
		if t.Failed() {
			t.Logf("job %s last seen: %+v", id, c)
		}
	}()
	waitFor(t, fmt.Sprintf("job %s to be %s", id, status), func() bool {
		var err error
		c, err = m.Get(id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return c.Status == status
	})
	return c
}
