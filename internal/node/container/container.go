package container

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// Ports is the node's port allocator as the manager needs it; the agent
// adapts internal/node/portalloc to it.
//
// On adoption (Run, after an agent restart) the manager calls Allocate
// with the host ports a running job's record holds and count 0, so that
// an allocator that forgot them books them again. An allocator that kept
// them (portalloc with a state file) must answer that call with success
// when owner already holds exactly those ports, and must not refuse them
// because the engine's proxy has them bound: they are the job's own.
type Ports interface {
	// Allocate grants owner the given ports and count random ones, all or
	// none: the given ports in order, then the random ones.
	Allocate(owner string, ports []int, count int) ([]int, error)
	// Release gives back all that owner holds; holding nothing is fine.
	Release(owner string)
}

// Defaults for the zero values of Config.
const (
	DefaultUsageInterval     = 10 * time.Second
	DefaultReconcileInterval = 5 * time.Second
	DefaultStopGrace         = 10 * time.Second
)

// Config configures a Manager.
type Config struct {
	// Engine is the Docker engine's client; the caller connects it
	// (dockerengine.Connect) and closes it after Run returns.
	Engine *client.Client
	// StateDir holds one record per job, so that an agent restart finds
	// its jobs again. It is created (0700) if missing.
	StateDir string
	// Ports hands out host ports for ports with host 0. Nil: every port
	// must name its host port, and nothing books it.
	Ports Ports
	// HostIP is the address host ports are bound to; empty means all of
	// the node's addresses.
	HostIP string
	// Node is the node's ID, reported in each Container.
	Node string
	// Scope names this manager's containers when several managers share
	// one engine (agents with their own data dirs on one machine): they
	// carry the label nodemgr.scope=<Scope>, their names end with it, and
	// the manager looks at no other. A DNS-label-ish string; empty is
	// unscoped.
	Scope  string
	Logger *slog.Logger
	// OnChange is called on every status change and usage sample, in
	// order, never with the manager's locks held: the callback may call
	// the manager. It should be quick; it may be called from any goroutine.
	OnChange func(api.Container)
	// UsageInterval is how often running containers' usage is sampled
	// (default 10s).
	UsageInterval time.Duration
	// ReconcileInterval is how often every job is compared with its
	// container, catching what the engine's event stream missed
	// (default 5s).
	ReconcileInterval time.Duration
	// StopGrace is how long Delete lets a container exit on SIGTERM
	// before it is killed (default 10s; rounded up to whole seconds); a
	// job's stop_timeout overrides it.
	StopGrace time.Duration
	// RuntimeDir holds one directory per job (RuntimeDir/<job id>), where
	// its path volumes live. Empty: only named volumes.
	RuntimeDir string
	// DNS gives the resolvers a container gets when it is created (the
	// agent's overlay names server); nil or none: the engine's default.
	DNS func() []netip.Addr
}

// Manager runs container jobs on one node. It is safe for concurrent use.
type Manager struct {
	engine         engine
	dir            string
	ports          Ports
	hostIP         netip.Addr
	node           string
	scope          string
	log            *slog.Logger
	onChange       func(api.Container)
	usageEvery     time.Duration
	reconcileEvery time.Duration
	stopGrace      int // seconds
	runtimeDir     string
	dns            func() []netip.Addr

	running atomic.Bool // Run was called
	// nudge asks Run's reconcile loop to look at a job; set by Run, with
	// mu held.
	nudge chan<- string

	mu         sync.Mutex
	jobs       map[string]*job
	pending    []api.Container // notifications not yet delivered, in order
	delivering bool            // some goroutine is delivering pending
}

// job is one job's state. Its record changes only with op held (and mu
// for the moment of the change), except for the usage sample, which only
// needs mu.
type job struct {
	op  sync.Mutex // serializes engine work on the job: deploy, delete, reconcile
	rec api.Container
	cpu cpuReading // the last one, for the next sample's CPU percentage
}

// New returns a manager for the jobs recorded in cfg.StateDir. It does not
// contact the engine; Run adopts the recorded jobs' containers.
func New(cfg Config) (*Manager, error) {
	if cfg.Engine == nil {
		return nil, errors.New("container manager: no engine client")
	}
	if cfg.StateDir == "" {
		return nil, errdefs.Field("state_dir", "the container manager needs a state directory")
	}
	m := &Manager{
		engine:         cfg.Engine,
		dir:            cfg.StateDir,
		ports:          cfg.Ports,
		node:           cfg.Node,
		scope:          cfg.Scope,
		log:            cfg.Logger,
		onChange:       cfg.OnChange,
		usageEvery:     cmp.Or(cfg.UsageInterval, DefaultUsageInterval),
		reconcileEvery: cmp.Or(cfg.ReconcileInterval, DefaultReconcileInterval),
		stopGrace:      int(math.Ceil(cmp.Or(cfg.StopGrace, DefaultStopGrace).Seconds())),
		jobs:           map[string]*job{},
		runtimeDir:     cfg.RuntimeDir,
		dns:            cfg.DNS,
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if cfg.HostIP != "" {
		ip, err := netip.ParseAddr(cfg.HostIP)
		if err != nil {
			return nil, errdefs.Field("host_ip", "%q is not an IP address", cfg.HostIP)
		}
		m.hostIP = ip
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("container manager: %w", err)
	}
	recs, bad, err := loadRecords(m.dir)
	if err != nil {
		return nil, fmt.Errorf("container manager: %w", err)
	}
	for _, err := range bad {
		m.log.Error("skip container record", "err", err)
	}
	for _, r := range recs {
		m.jobs[r.Job.ID] = &job{rec: r}
	}
	return m, nil
}

// Deploy runs a job: it checks it, makes sure the image is on the node,
// books the host ports, and creates and starts the container. It returns
// once the container started (RUNNING), or already ended (COMPLETED,
// FAILED, DEAD).
//
// A job that fails validation leaves no trace. One that fails later is
// recorded as FAILED, with the reason, and leaves neither a container nor
// a port behind. Deploying an ID that exists is ErrConflict unless that
// job is UNDEPLOYED.
func (m *Manager) Deploy(ctx context.Context, spec api.ContainerJob) (api.Container, error) {
	if err := workload.CheckContainer(spec); err != nil {
		return api.Container{}, fmt.Errorf("deploy container %s: %w", cmp.Or(spec.ID, spec.Name), err)
	}
	spec = normalize(spec)
	if _, err := m.mounts(spec); err != nil {
		return api.Container{}, fmt.Errorf("deploy container %s: %w", spec.ID, err)
	}
	if m.ports == nil {
		for i, p := range spec.Ports {
			if p.Host == 0 {
				return api.Container{}, fmt.Errorf("deploy container %s: %w", spec.ID,
					errdefs.Field(fmt.Sprintf("ports[%d].host", i), "this node has no port allocator: give the host port"))
			}
		}
	}
	j, err := m.reserve(spec)
	if err != nil {
		return api.Container{}, fmt.Errorf("deploy container %s: %w", spec.ID, err)
	}
	c, err := m.deploy(ctx, j)
	j.op.Unlock()
	m.flush()
	if err != nil {
		return c, fmt.Errorf("deploy container %s: %w", spec.ID, err)
	}
	return c, nil
}

// reserve records the job as CREATING and returns it with op held.
func (m *Manager) reserve(spec api.ContainerJob) (*job, error) {
	j := &job{rec: api.Container{Job: spec, Node: m.node, Status: api.ContainerCreating, CreatedAt: now()}}
	m.mu.Lock()
	old, exists := m.jobs[spec.ID]
	if exists && old.rec.Status != api.ContainerUndeployed {
		status := old.rec.Status
		m.mu.Unlock()
		return nil, errdefs.Conflict("job %s exists on this node and is %s: delete it first, or deploy under another id", spec.ID, status)
	}
	j.op.Lock() // before others can see j; no one else holds it yet
	m.jobs[spec.ID] = j
	m.mu.Unlock()

	if err := saveRecord(m.dir, j.rec); err != nil {
		m.mu.Lock()
		if exists {
			m.jobs[spec.ID] = old
		} else {
			delete(m.jobs, spec.ID)
		}
		m.mu.Unlock()
		j.op.Unlock() // whoever waits for j finds it replaced and looks again
		return nil, err
	}
	m.mu.Lock()
	m.queue(j.rec)
	m.mu.Unlock()
	return j, nil
}

// deploy does the engine's part of Deploy; j.op is held.
func (m *Manager) deploy(ctx context.Context, j *job) (api.Container, error) {
	spec := m.snapshot(j).Job
	created := false // a create was tried, so a container may exist
	fail := func(err error) (api.Container, error) {
		// Never leave a half-made container: clean up even if ctx is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if created {
			if rerr := m.removeJobContainers(cctx, spec.ID); rerr != nil {
				err = fmt.Errorf("%w (and removing its container failed: %v; remove it with docker rm -f)", err, rerr)
			}
		}
		m.releasePorts(spec.ID)
		c := m.set(j, func(c *api.Container) {
			c.Status = api.ContainerFailed
			c.Reason = err.Error()
			c.FinishedAt = ptr(now())
		})
		return c, err
	}

	if err := m.ensureImage(ctx, spec.Image, spec.PullPolicy); err != nil {
		return fail(err)
	}
	mounts, _ := m.mounts(spec) // checked by Deploy
	if err := m.makeBindDirs(spec.ID, mounts); err != nil {
		return fail(err)
	}
	if slices.ContainsFunc(spec.Volumes, func(v api.ContainerVolume) bool { return workload.IsVolumePath(v.Source) }) {
		m.set(j, func(c *api.Container) { c.RuntimeDir = m.jobRuntimeDir(spec.ID) })
	}
	ports, err := m.allocatePorts(spec.ID, spec.Ports)
	if err != nil {
		return fail(err)
	}
	m.set(j, func(c *api.Container) { c.Ports = ports })

	created = true
	id, err := m.create(ctx, m.createOptions(spec, ports, mounts))
	if err != nil {
		return fail(err)
	}
	m.set(j, func(c *api.Container) { c.ContainerID = id })
	if err := m.start(ctx, id); err != nil {
		return fail(err)
	}

	insp, oom, err := m.inspectSettled(ctx, id, spec.MemoryMB > 0)
	if err != nil {
		// It started; the reconcile loop will look again.
		m.log.Warn("inspect started container", "job", spec.ID, "err", err)
		return m.set(j, func(c *api.Container) {
			c.Status = api.ContainerRunning
			c.StartedAt = ptr(now())
		}), nil
	}
	o := observe(insp, false, oom)
	if o.status == api.ContainerCreating {
		o.status = api.ContainerRunning // started, not yet seen running
	}
	return m.settle(ctx, j, o, false), nil
}

// Delete stops (SIGTERM, then SIGKILL after StopGrace) and removes the job's
// container, gives back its ports and marks it UNDEPLOYED. The record is
// kept until Forget. Deleting an UNDEPLOYED job does nothing.
func (m *Manager) Delete(ctx context.Context, id string) (api.Container, error) {
	j, err := m.lockJob(id)
	if err != nil {
		return api.Container{}, fmt.Errorf("delete container %s: %w", id, err)
	}
	c, err := m.delete(ctx, j)
	j.op.Unlock()
	m.flush()
	if err != nil {
		return c, fmt.Errorf("delete container %s: %w", id, err)
	}
	return c, nil
}

func (m *Manager) delete(ctx context.Context, j *job) (api.Container, error) {
	c := m.snapshot(j)
	if c.Status == api.ContainerUndeployed {
		return c, nil
	}
	var err error
	if c.ContainerID != "" {
		err = m.stopAndRemove(ctx, c.ContainerID, m.stopTimeout(c.Job))
	} else {
		err = m.removeJobContainers(ctx, c.Job.ID)
	}
	if err != nil {
		return c, fmt.Errorf("%w; the job is left as it was, try again", err)
	}
	m.releasePorts(c.Job.ID)
	return m.set(j, func(c *api.Container) {
		c.Status = api.ContainerUndeployed
		if c.FinishedAt == nil {
			c.FinishedAt = ptr(now())
		}
	}), nil
}

// Forget drops an UNDEPLOYED job's record. Other jobs are ErrConflict:
// delete them first.
func (m *Manager) Forget(id string) error {
	j, err := m.lockJob(id)
	if err != nil {
		return fmt.Errorf("forget container %s: %w", id, err)
	}
	defer j.op.Unlock()
	if st := m.snapshot(j).Status; st != api.ContainerUndeployed {
		return fmt.Errorf("forget container %s: %w", id, errdefs.Conflict("it is %s, not %s: delete it first", st, api.ContainerUndeployed))
	}
	if err := removeRecord(m.dir, id); err != nil {
		return fmt.Errorf("forget container %s: %w", id, err)
	}
	m.mu.Lock()
	delete(m.jobs, id)
	m.mu.Unlock()
	return nil
}

// Get returns a job and its status.
func (m *Manager) Get(id string) (api.Container, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return api.Container{}, errdefs.NotFound("container job %s", id)
	}
	return clone(j.rec), nil
}

// List returns every job, UNDEPLOYED ones included, oldest first.
func (m *Manager) List() []api.Container {
	m.mu.Lock()
	out := make([]api.Container, 0, len(m.jobs))
	for _, j := range m.jobs {
		out = append(out, clone(j.rec))
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b api.Container) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Job.ID, b.Job.ID))
	})
	return out
}

// Committed sums the limits of the jobs that are not in a final state:
// what the node has promised to containers.
func (m *Manager) Committed() (cpus float64, memoryMB int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.jobs {
		if !api.ContainerFinal(j.rec.Status) {
			cpus += j.rec.Job.CPUs
			memoryMB += j.rec.Job.MemoryMB
		}
	}
	return cpus, memoryMB
}

// Logs returns what the job's container wrote to stdout and stderr, the
// last tail lines of it (tail <= 0: all), demultiplexed. A job whose
// container is gone has no logs (ErrNotFound).
func (m *Manager) Logs(ctx context.Context, id string, tail int) ([]byte, error) {
	b, _, err := m.ReadLog(ctx, id, tail, "")
	return b, err
}

// ReadLog returns a piece of a job's output and the cursor where it ends,
// to follow the output with: with after "" its last tail lines (0: all),
// else what came after that cursor, at most 512 KiB.
func (m *Manager) ReadLog(ctx context.Context, id string, tail int, after string) ([]byte, string, error) {
	c, err := m.Get(id)
	if err != nil {
		return nil, "", fmt.Errorf("logs of container %s: %w", id, err)
	}
	if c.ContainerID == "" {
		return nil, "", fmt.Errorf("logs of container %s: %w", id, errdefs.NotFound("it is %s and has no container", c.Status))
	}
	b, cursor, err := m.logs(ctx, c.ContainerID, tail, after)
	if errdefs.IsNotFound(err) {
		return nil, "", fmt.Errorf("logs of container %s: %w", id, errdefs.NotFound("it is %s and its container is gone", c.Status))
	}
	if err != nil {
		return nil, "", fmt.Errorf("logs of container %s: %w", id, err)
	}
	return b, cursor, nil
}

// lockJob returns the job with op held, or ErrNotFound. A job replaced
// while we waited for its lock (a redeploy of an UNDEPLOYED ID) is looked
// up again.
func (m *Manager) lockJob(id string) (*job, error) {
	for {
		m.mu.Lock()
		j, ok := m.jobs[id]
		m.mu.Unlock()
		if !ok {
			return nil, errdefs.NotFound("container job %s", id)
		}
		j.op.Lock()
		m.mu.Lock()
		current := m.jobs[id] == j
		m.mu.Unlock()
		if current {
			return j, nil
		}
		j.op.Unlock()
	}
}

// owner is the job's name with the port allocator.
func owner(id string) string { return "container:" + id }

// allocatePorts books the host ports of a job's ports: those it names and
// one for each that asks for any. It returns the ports with every host
// port filled in.
func (m *Manager) allocatePorts(id string, ports []api.ContainerPort) ([]api.ContainerPort, error) {
	resolved := slices.Clone(ports)
	if m.ports == nil || len(ports) == 0 {
		return resolved, nil
	}
	var specific []int
	count := 0
	for _, p := range ports {
		switch {
		case p.Host == 0:
			count++
		case !slices.Contains(specific, p.Host): // tcp and udp may share one
			specific = append(specific, p.Host)
		}
	}
	got, err := m.ports.Allocate(owner(id), specific, count)
	if err != nil {
		return nil, fmt.Errorf("allocate host ports: %w", err)
	}
	if len(got) != len(specific)+count {
		m.ports.Release(owner(id))
		return nil, fmt.Errorf("allocate host ports: asked for %d, got %d", len(specific)+count, len(got))
	}
	random := got[len(specific):]
	for i := range resolved {
		if resolved[i].Host == 0 {
			resolved[i].Host, random = random[0], random[1:]
		}
	}
	return resolved, nil
}

// rebookPorts books a running job's recorded host ports again after a
// restart (see Ports).
func (m *Manager) rebookPorts(c api.Container) {
	if m.ports == nil || len(c.Ports) == 0 {
		return
	}
	var hosts []int
	for _, p := range c.Ports {
		if !slices.Contains(hosts, p.Host) {
			hosts = append(hosts, p.Host)
		}
	}
	if _, err := m.ports.Allocate(owner(c.Job.ID), hosts, 0); err != nil {
		m.log.Warn("re-book host ports of adopted container; the allocator may hand them out again", "job", c.Job.ID, "ports", hosts, "err", err)
	}
}

func (m *Manager) releasePorts(id string) {
	if m.ports != nil {
		m.ports.Release(owner(id))
	}
}

// snapshot returns a copy of j's record.
func (m *Manager) snapshot(j *job) api.Container {
	m.mu.Lock()
	defer m.mu.Unlock()
	return clone(j.rec)
}

// set changes j's record, writes it to disk and queues the change for
// OnChange; j.op is held. A record that cannot be written is logged: the
// change has happened on the engine all the same.
func (m *Manager) set(j *job, change func(*api.Container)) api.Container {
	next := m.snapshot(j)
	change(&next)
	if api.ContainerFinal(next.Status) {
		next.Usage = nil
	}
	if err := saveRecord(m.dir, next); err != nil {
		m.log.Error("save container record; an agent restart will see an older state", "job", next.Job.ID, "status", next.Status, "err", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !api.ContainerFinal(next.Status) {
		next.Usage = j.rec.Usage // a sample may have arrived meanwhile
	}
	j.rec = next
	m.queue(next)
	return clone(next)
}

// apply records what the engine says of j's container; j.op is held. A
// job that reaches a final state gives back its ports.
func (m *Manager) apply(j *job, o observation) api.Container {
	if api.ContainerFinal(o.status) {
		m.releasePorts(m.snapshot(j).Job.ID)
	}
	return m.set(j, func(c *api.Container) {
		c.Status = o.status
		c.Reason = o.reason
		c.ExitCode = o.exitCode
		if o.startedAt != nil {
			c.StartedAt = o.startedAt
		}
		if api.ContainerFinal(o.status) {
			c.FinishedAt = cmp.Or(o.finishedAt, ptr(now()))
		}
	})
}

// queue adds a change for OnChange; m.mu is held.
func (m *Manager) queue(c api.Container) {
	if m.onChange != nil {
		m.pending = append(m.pending, clone(c))
	}
}

// flush delivers the queued changes, in order, with no lock held. One
// goroutine delivers at a time; the others leave their changes to it, so
// a callback that calls back into the manager does not deadlock.
func (m *Manager) flush() {
	m.mu.Lock()
	if m.delivering {
		m.mu.Unlock()
		return
	}
	m.delivering = true
	for len(m.pending) > 0 {
		batch := m.pending
		m.pending = nil
		m.mu.Unlock()
		m.deliver(batch)
		m.mu.Lock()
	}
	m.delivering = false
	m.mu.Unlock()
}

// deliver calls OnChange for each change. Should the callback panic, the
// next flush takes over the delivery.
func (m *Manager) deliver(batch []api.Container) {
	done := false
	defer func() {
		if !done {
			m.mu.Lock()
			m.delivering = false
			m.mu.Unlock()
		}
	}()
	for _, c := range batch {
		m.onChange(c)
	}
	done = true
}

// clone copies c deeply, so that callers cannot reach the manager's state.
func clone(c api.Container) api.Container {
	c.Job.Command = slices.Clone(c.Job.Command)
	c.Job.Env = maps.Clone(c.Job.Env)
	c.Job.Labels = maps.Clone(c.Job.Labels)
	c.Job.Ports = slices.Clone(c.Job.Ports)
	c.Job.Volumes = slices.Clone(c.Job.Volumes)
	c.Ports = slices.Clone(c.Ports)
	c.ExitCode = clonePtr(c.ExitCode)
	c.StartedAt = clonePtr(c.StartedAt)
	c.FinishedAt = clonePtr(c.FinishedAt)
	c.Usage = clonePtr(c.Usage)
	return c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func ptr[T any](v T) *T { return &v }

func now() time.Time { return time.Now().UTC() }
