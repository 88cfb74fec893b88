package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/node/artifact"
	"github.com/nodemgr/nodemgr/internal/node/capacity"
	"github.com/nodemgr/nodemgr/internal/node/container"
	"github.com/nodemgr/nodemgr/internal/node/portalloc"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"github.com/nodemgr/nodemgr/internal/node/service"
)

// workloads are what the agent runs besides suites: nodee's artifacts and
// supervised services, with the node's port allocator. They live in the
// agent's data dir and prefix, so a restarted agent finds them again.
type workloads struct {
	log        *slog.Logger
	artifacts  *artifact.Store
	ports      *portalloc.Allocator
	services   *service.Supervisor
	containers *container.Manager
	// containerDefaults are the limits of a container job that names none.
	containerDefaults container.Defaults

	capMu    sync.Mutex
	capacity *capacity.Ledger // nil until the hardware is known (initCapacity)
	bookMu   sync.Mutex       // one syncServiceBooks at a time

	// reports holds container changes not yet sent to the server, by job
	// id; reported wakes the session to send them (capacity 1).
	repMu    sync.Mutex
	reports  map[string]api.Container
	reported chan struct{}

	// changed wakes the presence publisher; capacity 1.
	changed chan struct{}

	mu        sync.Mutex
	presence  api.Presence
	installed []string // artifact ids, read again only when one is installed or removed
}

// newWorkloads sets up the agent's workloads. scope names this agent's
// containers on an engine other agents may share; users says who services
// run as.
func newWorkloads(cfg Config, scope string, users *runas.Policy, dns func() []netip.Addr, log *slog.Logger) (*workloads, error) {
	w := &workloads{log: log, changed: make(chan struct{}, 1),
		reports: map[string]api.Container{}, reported: make(chan struct{}, 1),
		containerDefaults: cfg.containerDefaults()}
	lo, hi, err := cfg.portRange()
	if err != nil {
		return nil, err
	}
	w.ports, err = portalloc.New(portalloc.Config{Min: lo, Max: hi, StatePath: filepath.Join(cfg.DataDir, "ports.json")})
	if err != nil {
		return nil, fmt.Errorf("port allocator: %w", err)
	}
	w.artifacts, err = artifact.New(cfg.Prefix, cfg.Depots, artifact.Options{
		Logger: log.With("subsystem", "artifact"),
		UsedBy: func(id artifact.ID) []string { return w.services.UsedBy(id.String()) },
	})
	if err != nil {
		return nil, err
	}
	w.services, err = service.New(service.Config{
		Prefix:    cfg.Prefix,
		StateDir:  filepath.Join(cfg.DataDir, "services"),
		Artifacts: artifactTrees{w.artifacts},
		Ports:     servicePorts{w.ports},
		Logger:    log.With("subsystem", "service"),
		OnChange:  w.servicesChanged,
		Users:     users,
	})
	if err != nil {
		return nil, err
	}
	engine, err := dockerengine.Connect(cfg.DockerHost)
	if err != nil {
		return nil, fmt.Errorf("docker engine for containers: %w", err)
	}
	w.containers, err = container.New(container.Config{
		Engine:        engine,
		StateDir:      filepath.Join(cfg.DataDir, "containers"),
		Ports:         containerPorts{w.ports},
		HostIP:        cfg.ContainerHostIP,
		UsageInterval: cfg.ContainerUsageInterval,
		// A job's path volumes live in <prefix>/containers/<job id>.
		RuntimeDir: filepath.Join(cfg.Prefix, "containers"),
		Scope:      scope,
		Logger:     log.With("subsystem", "container"),
		OnChange:   w.containerChanged,
		DNS:        dns,
	})
	if err != nil {
		return nil, err
	}
	w.presence.LocalAPI = api.LocalAPI{Socket: cfg.LocalAPISocket, TCP: cfg.LocalAPIListen}
	w.artifactsChanged()
	return w, nil
}

// run supervises services and containers until ctx ends; both keep
// running after, for the next agent to adopt.
func (w *workloads) run(ctx context.Context) error {
	var wg sync.WaitGroup
	var cerr error
	wg.Go(func() { cerr = w.containers.Run(ctx) })
	err := w.services.Run(ctx)
	wg.Wait()
	return errors.Join(err, cerr)
}

// containerDefaults are the configured container defaults, or the
// built-in ones.
func (c Config) containerDefaults() container.Defaults {
	if c.ContainerDefaults != nil {
		return *c.ContainerDefaults
	}
	return container.Defaults{CPUs: container.DefaultCPUs, MemoryMB: container.DefaultMemoryMB}
}

// containerChanged queues a container's change for the server.
func (w *workloads) containerChanged(c api.Container) {
	if api.ContainerFinal(c.Status) {
		w.unbook(api.AllocationContainer, c.Job.ID)
	}
	w.repMu.Lock()
	w.reports[c.Job.ID] = c
	w.repMu.Unlock()
	select {
	case w.reported <- struct{}{}:
	default:
	}
	if api.ContainerFinal(c.Status) || c.Status == api.ContainerRunning {
		w.poke()
	}
}

// takeReports returns the queued container changes; all of them when
// everything is true (after a reconnect the server gets the full list).
func (w *workloads) takeReports(everything bool) []api.Container {
	w.repMu.Lock()
	defer w.repMu.Unlock()
	if everything {
		clear(w.reports)
		return w.containers.List()
	}
	out := make([]api.Container, 0, len(w.reports))
	for _, c := range w.reports {
		out = append(out, c)
	}
	clear(w.reports)
	return out
}

// requeue puts reports the server did not take back in the queue, unless
// a newer one came meanwhile.
func (w *workloads) requeue(cs []api.Container) {
	w.repMu.Lock()
	defer w.repMu.Unlock()
	for _, c := range cs {
		if _, newer := w.reports[c.Job.ID]; !newer {
			w.reports[c.Job.ID] = c
		}
	}
}

func (w *workloads) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// artifactsChanged reads the installed artifacts again (they change only
// through this agent) and republishes the presence.
func (w *workloads) artifactsChanged() {
	ids := []string{}
	inst, err := w.artifacts.List()
	if err != nil {
		w.log.Warn("list installed artifacts", "err", err)
	}
	for _, a := range inst {
		ids = append(ids, a.ID.String())
	}
	w.mu.Lock()
	w.installed = ids
	w.mu.Unlock()
	w.poke()
}

// currentPresence rebuilds the presence record from the live state.
func (w *workloads) currentPresence() api.Presence {
	p := api.Presence{Services: w.services.Summaries()}
	if p.Services == nil {
		p.Services = []api.ServiceSummary{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p.Artifacts = w.installed
	p.LocalAPI = w.presence.LocalAPI
	if !samePresence(p, w.presence) || w.presence.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now().UTC()
		w.presence = p
	}
	return w.presence
}

func samePresence(a, b api.Presence) bool {
	return slices.Equal(a.Services, b.Services) && slices.Equal(a.Artifacts, b.Artifacts) && a.LocalAPI == b.LocalAPI
}

// artifactInfo is an install as the API shows it, with its users.
func (w *workloads) artifactInfo(inst artifact.Installed) api.Artifact {
	return api.Artifact{
		ID: inst.ID.String(), Path: inst.Path, Source: inst.Source, Checksum: inst.Checksum,
		Size: inst.Size, Files: inst.Files, InstalledAt: inst.InstalledAt,
		UsedBy: w.services.UsedBy(inst.ID.String()),
	}
}

// containerPorts books container host ports in the node's allocator.
type containerPorts struct{ a *portalloc.Allocator }

// Allocate grants the specific ports and count random ones. Ports owner
// already holds count as granted: a restarted agent re-books the ports of
// the containers it adopts, which the allocator's state file kept.
func (p containerPorts) Allocate(owner string, ports []int, count int) ([]int, error) {
	var want []int
	for _, port := range ports {
		if o, ok := p.a.Owner(port); !ok || o != owner {
			want = append(want, port)
		}
	}
	if len(want) == 0 && count == 0 {
		return ports, nil
	}
	got, err := p.a.Allocate(owner, portalloc.Request{Ports: want, Count: count})
	if err != nil {
		return nil, err
	}
	return append(slices.Clone(ports), got[len(want):]...), nil
}

func (p containerPorts) Release(owner string) { p.a.ReleaseOwner(owner) }

// artifactTrees lets services find installed artifacts.
type artifactTrees struct{ s *artifact.Store }

func (t artifactTrees) Tree(id string) (string, error) {
	pid, err := artifact.ParseID(id)
	if err != nil {
		return "", err
	}
	inst, err := t.s.Get(pid)
	if err != nil {
		return "", err
	}
	return inst.Path, nil
}

// servicePorts gives each service its one port from the node's allocator.
type servicePorts struct{ a *portalloc.Allocator }

func (p servicePorts) Allocate(owner string, port int) (int, error) {
	req := portalloc.Request{Count: 1}
	if port > 0 {
		req = portalloc.Request{Ports: []int{port}}
	}
	got, err := p.a.Allocate(owner, req)
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

func (p servicePorts) Release(owner string) { p.a.ReleaseOwner(owner) }

// commitmentPorts takes the ports commitments name from the node's
// allocator (capacity.PortLocker), so that no service or container can
// bind them meanwhile.
type commitmentPorts struct{ a *portalloc.Allocator }

func (p commitmentPorts) Lock(owner string, ports []int) error {
	var want []int
	for _, port := range ports {
		if o, ok := p.a.Owner(port); !ok || o != owner {
			want = append(want, port)
		}
	}
	if len(want) == 0 {
		return nil
	}
	_, err := p.a.Allocate(owner, portalloc.Request{Ports: want})
	return err
}

func (p commitmentPorts) Unlock(owner string, quarantine bool) {
	if quarantine {
		p.a.ReleaseOwner(owner)
	} else {
		p.a.HandOver(owner)
	}
}

func (p servicePorts) Holds(owner string, port int) bool {
	o, ok := p.a.Owner(port)
	return ok && o == owner
}

// agentScope identifies this agent (machine and data dir, as the server
// keys nodes) in a short form fit for container names and labels.
func agentScope(machineID, dataDir string) string {
	sum := sha256.Sum256([]byte(machineID + "\x00" + dataDir))
	return hex.EncodeToString(sum[:5])
}
