package orchestrate

import (
	"context"
	"encoding/json"
	"errors"

	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Labels every pool machine's provider resource carries, so that nodemgr
// finds it again whatever happened to its store row.
const (
	LabelOwner        = "nodemgr.owner"         // the coordinator's owner ID
	LabelPool         = "nodemgr.pool"          // the pool's name
	LabelMachine      = "nodemgr.machine"       // the pool machine's ID
	LabelDeploymentID = "nodemgr.deployment-id" // the deployment's ID
)

// Store is what the orchestrator keeps: its machines and decisions, the
// deployments they are, the pools' specs (documents), and the nodes their
// agents registered as.
type Store interface {
	store.Pools
	GetDeployment(ctx context.Context, id string) (store.Deployment, error)
	UpdateDeployment(ctx context.Context, id string, fn func(*store.Deployment) error) (store.Deployment, error)
	PutDocument(ctx context.Context, d store.Document) (store.Document, error)
	GetDocument(ctx context.Context, kind, name string) (store.Document, error)
	ListDocuments(ctx context.Context, kind string, p store.Page) ([]store.Document, error)
	GetNode(ctx context.Context, id string) (store.Node, error)
}

// Cluster is what the orchestrator needs from the server.
type Cluster interface {
	Provider(name string) (provision.Provider, error)
	// Executor picks the executor a deployment's capabilities allow.
	Executor(d provision.Deployment) (execute.Executor, error)
	// Render renders a template for a provider (template fields,
	// overrides, mappings): the Extra the provider gets.
	Render(ctx context.Context, template, provider string) (map[string]any, error)
	// Demands lists the suites with Ready tasks and the ensembles that
	// wait for machines.
	Demands(ctx context.Context) ([]Demand, error)
	// NodeState says whether a node's agent is connected, whether it has
	// work (a suite, a service or a container) and when it last had a
	// suite; an unknown node is errdefs.ErrNotFound.
	NodeState(ctx context.Context, nodeID string) (NodeState, error)
	// DrainNode asks a node's agent for a graceful shutdown.
	DrainNode(ctx context.Context, nodeID string) error
	// ForgetNode returns a node's running tasks and removes the node.
	ForgetNode(ctx context.Context, nodeID, reason string) error
	// JoinToken makes a single-use join token bound to a deployment,
	// putting its node into groups, valid for ttl.
	JoinToken(ctx context.Context, deploymentID string, groups []string, ttl time.Duration) (string, error)
}

// NodeState is what the server knows of a node's agent now.
type NodeState struct {
	Connected bool
	Busy      bool      // a suite, a service or a container
	LastWork  time.Time // when it last had a suite, even one shorter than a round
	// Notices are what its machine's provider announced (a spot
	// interruption, a rebalance recommendation), as its agent heard them.
	Notices []api.Notice
}

// Interruption is the node's interruption notice, if it has one.
func (ns NodeState) Interruption() *api.Notice { return ns.notice(api.NoticeInterruption) }

// Rebalance is the node's rebalance recommendation, if it has one.
func (ns NodeState) Rebalance() *api.Notice { return ns.notice(api.NoticeRebalance) }

func (ns NodeState) notice(kind string) *api.Notice {
	for _, n := range ns.Notices {
		if n.Kind == kind {
			return &n
		}
	}
	return nil
}

// Finder is a provider that lists the resources it made by their labels;
// the orchestrator uses it to destroy what no stored machine accounts for.
type Finder interface {
	Find(ctx context.Context, labels map[string]string) ([]provision.Deployment, error)
}

// Config configures the orchestrator. Zero values take the defaults.
type Config struct {
	// Owner is this coordinator's ID: resources labelled with another
	// owner are never touched.
	Owner string
	// Bootstrap says how agents are delivered onto machines.
	Bootstrap BootstrapConfig
	// Tick is the longest time between two rounds; events wake it sooner.
	// Default 1s.
	Tick time.Duration
	// DrainTimeout is how long a draining machine's agent has to say
	// goodbye before the machine is destroyed anyway; default 2m.
	DrainTimeout time.Duration
	// BackoffMin and BackoffMax bound a failing candidate's pause, which
	// doubles with each failure in a row; defaults 10s and 5m.
	BackoffMin, BackoffMax time.Duration
	// LaunchTries is how many times a launch calls the provider's
	// Provision before it fails the machine; default 3. A refusal for want
	// of capacity (provision.ErrNoCapacity), an invalid spec or a refused
	// credential is not retried: the next candidate serves instead.
	LaunchTries int
	// LaunchRetry is the pause before a launch's second try, doubling
	// after; default 2s. No try starts later than LaunchRetryFor after the
	// first.
	LaunchRetry time.Duration
	// SweepInterval is how often providers are asked for resources that
	// no machine accounts for; default 30s.
	SweepInterval time.Duration
	// Keep is how long ended machines and events stay listed; default 24h.
	Keep time.Duration
}

func (c *Config) setDefaults() {
	if c.Tick == 0 {
		c.Tick = time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 2 * time.Minute
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 10 * time.Second
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(5*time.Minute, c.BackoffMin)
	}
	if c.LaunchTries <= 0 {
		c.LaunchTries = 3
	}
	if c.LaunchRetry <= 0 {
		c.LaunchRetry = 2 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 30 * time.Second
	}
	if c.Keep == 0 {
		c.Keep = 24 * time.Hour
	}
}

// Orchestrator keeps the pools sized to demand.
type Orchestrator struct {
	cfg     Config
	store   Store
	cluster Cluster
	log     *slog.Logger
	wake    chan struct{}

	mu       sync.Mutex
	runCtx   context.Context   // Run's; launches end with it
	inflight map[string]bool   // machines a goroutine works on now
	ours     map[string]bool   // machines this run launched: a restart did not cut them off
	trouble  map[string]string // per machine, the provider error its launch retries after
	backoff  map[candidateKey]*backoffState
	status   map[string]PoolStatus // per pool, from the last round
	running  bool                  // in Run: this server leads, status is its own
	saved    []byte                // status as last saved for the other servers
	said     map[string]string     // per pool and kind, the last event message (no repeats)
	lastSwep time.Time
	wg       sync.WaitGroup
}

type candidateKey struct{ template, provider string }

type backoffState struct {
	failures int
	until    time.Time
	reason   string
}

// PoolStatus is what the last round found for a pool.
type PoolStatus struct {
	Desired int
	Demand  string
	Waiting string
	// Suites are the suites the pool is starting machines for.
	Suites []string
	// Starting counts its machines on their way.
	Starting int
}

// New makes an orchestrator; Run starts it.
func New(cfg Config, st Store, cluster Cluster, log *slog.Logger) *Orchestrator {
	cfg.setDefaults()
	return &Orchestrator{cfg: cfg, store: st, cluster: cluster, log: log, wake: make(chan struct{}, 1),
		inflight: map[string]bool{}, ours: map[string]bool{}, trouble: map[string]string{}, backoff: map[candidateKey]*backoffState{}, status: map[string]PoolStatus{},
		said: map[string]string{}}
}

// SetServerURL sets the URL agents are told to reach the server on, once
// the server listens; it takes effect for the next bootstrap.
func (o *Orchestrator) SetServerURL(u string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cfg.Bootstrap.ServerURL = u
}

// goPrepare makes the agents' artifacts in the background while this
// server leads, so that the first machine it launches does not wait for
// them. A failure is said again by the launch that needs them.
func (o *Orchestrator) goPrepare(ctx context.Context) {
	o.mu.Lock()
	cfg := o.cfg.Bootstrap
	o.mu.Unlock()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if ctx.Err() == nil {
			if err := cfg.Prepare(); err != nil {
				o.log.Debug("prepare the agents to deliver", "err", err)
			}
		}
	}()
}

// ForgetHost drops what the executor of a destroyed machine learnt of it
// (its SSH host key in known_hosts), so that a machine the provider later
// gives the same address is not refused as a changed host.
func ForgetHost(c interface {
	Executor(provision.Deployment) (execute.Executor, error)
}, d store.Deployment, log *slog.Logger) {
	ex, err := c.Executor(d.Machine())
	if err != nil {
		return
	}
	if f, ok := ex.(execute.HostForgetter); ok {
		if err := f.ForgetHost(d.Machine()); err != nil {
			log.Warn("forget a destroyed machine's host key", "deployment", d.ID, "err", err)
		}
	}
}

// AgentArtifact is the agent for a machine of arch (uname -m's name), as
// a pull-bootstrapped machine fetches it.
func (o *Orchestrator) AgentArtifact(arch string) (Artifact, error) {
	o.mu.Lock()
	cfg := o.cfg.Bootstrap
	o.mu.Unlock()
	return cfg.Artifact(arch)
}

// SetOwner sets the coordinator's owner ID, the label on every machine its
// pools make; before Run.
func (o *Orchestrator) SetOwner(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cfg.Owner = id
}

// Wake asks for a round soon: demand or a node changed.
func (o *Orchestrator) Wake() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends, then waits for the launches under way
// to stop (they see ctx end too).
func (o *Orchestrator) Run(ctx context.Context) error {
	o.mu.Lock()
	o.runCtx, o.running = ctx, true
	clear(o.ours) // launches of an earlier run were cut off when it ended
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.running = false
		o.mu.Unlock()
	}()
	defer o.wg.Wait()
	o.goPrepare(ctx)
	t := time.NewTicker(o.cfg.Tick)
	defer t.Stop()
	for {
		if err := o.Reconcile(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("orchestrator round failed; retrying", "err", err)
		}
		o.saveStatus(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-o.wake:
		}
	}
}

// LoadPools reads every pool's spec.
func LoadPools(ctx context.Context, st Store) ([]api.PoolSpec, error) {
	docs, err := st.ListDocuments(ctx, store.KindPool, store.Page{})
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	out := make([]api.PoolSpec, 0, len(docs))
	for _, d := range docs {
		spec, err := DecodeSpec(d.Body)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", d.Name, err)
		}
		out = append(out, spec)
	}
	return out, nil
}

// DecodeSpec reads a stored pool spec.
func DecodeSpec(b []byte) (api.PoolSpec, error) {
	var spec api.PoolSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("decode pool spec: %w", err)
	}
	return spec, nil
}

// Reconcile runs one round: advance every machine a step, then start what
// demand asks for.
func (o *Orchestrator) Reconcile(ctx context.Context) error {
	specs, err := LoadPools(ctx, o.store)
	if err != nil {
		return err
	}
	machines, err := o.store.ListPoolMachines(ctx, store.PoolMachineFilter{Live: true})
	if err != nil {
		return err
	}
	bySpec := map[string]api.PoolSpec{}
	for _, s := range specs {
		bySpec[s.Name] = s
	}
	live := map[string][]store.PoolMachine{}
	for _, m := range machines {
		live[m.Pool] = append(live[m.Pool], m)
	}
	for pool, ms := range live {
		spec, ok := bySpec[pool]
		o.stepMachines(ctx, spec, ok, ms)
	}
	if len(specs) > 0 {
		if err := o.scaleUp(ctx, specs, live); err != nil {
			return err
		}
	}
	o.sweep(ctx, specs)
	return nil
}

// stepMachines advances a pool's machines that no goroutine works on.
// exists is false for a pool that was removed: its machines all go.
func (o *Orchestrator) stepMachines(ctx context.Context, spec api.PoolSpec, exists bool, ms []store.PoolMachine) {
	now := time.Now()
	ready := 0
	for _, m := range ms {
		if m.State == api.MachineReady {
			ready++
		}
	}
	for _, m := range ms {
		if o.busyWith(m.ID) {
			continue
		}
		switch m.State {
		case api.MachineRequested, api.MachineProvisioning:
			// Nothing works on it: the server stopped while launching it,
			// or this run's launch ended without moving it on (the store
			// failed it), which is no fault of the candidate's either.
			why := "the server stopped while launching it"
			o.mu.Lock()
			if o.ours[m.ID] {
				why = "its launch ended unrecorded"
				if m.StateReason != "" {
					why += ": " + m.StateReason
				}
			}
			o.mu.Unlock()
			o.goStep(m, func(ctx context.Context, m store.PoolMachine) { o.failLaunch(ctx, m, why, false) })
		case api.MachineBootstrapping:
			o.stepBootstrapping(ctx, spec, m, now)
		case api.MachineReady:
			if o.stepReady(ctx, spec, exists, m, now, ready) {
				ready--
			}
		case api.MachineDraining:
			o.stepDraining(ctx, m, now)
		case api.MachineTerminating:
			o.goStep(m, func(ctx context.Context, m store.PoolMachine) { o.terminate(ctx, m, m.StateReason) })
		}
	}
}

// stepBootstrapping makes a machine ready once its agent registered, or
// replaces it when the agent did not within the bootstrap timeout.
func (o *Orchestrator) stepBootstrapping(ctx context.Context, spec api.PoolSpec, m store.PoolMachine, now time.Time) {
	d, err := o.store.GetDeployment(ctx, m.DeploymentID)
	if err != nil {
		return
	}
	if d.NodeID != "" {
		if why := o.impostor(ctx, d); why != "" {
			o.goStep(m, func(ctx context.Context, m store.PoolMachine) {
				if err := o.cluster.ForgetNode(ctx, d.NodeID, why); err != nil && !errdefs.IsNotFound(err) {
					o.log.Warn("remove a node that registered as a pool machine from another", "node", d.NodeID, "err", err)
				}
				o.fail(ctx, m, why, false)
			})
			return
		}
		readyAt := now
		m, err = o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
			cur.State, cur.StateReason, cur.NodeID, cur.ReadyAt, cur.BusyAt = api.MachineReady, "", d.NodeID, readyAt, readyAt
			return nil
		})
		if err != nil {
			return
		}
		o.succeeded(m)
		o.event(ctx, m.Pool, m.ID, "ready", fmt.Sprintf("machine %s is ready: node %s registered %s after the request (%s on %s)",
			m.ID, d.NodeID, readyAt.Sub(m.CreatedAt).Round(time.Millisecond), m.Template, m.Provider))
		return
	}
	if m.DeliveredAt.IsZero() {
		// No goroutine works on it (stepMachines passes those by) and its
		// agent was never delivered: the server stopped mid-bootstrap, and
		// no agent will come. Bootstrapping it again is not safe (a second
		// start.sh would start a second agent beside one the cut-off run
		// may have started, with another join token), so it is replaced
		// now rather than after the bootstrap timeout, and its candidate
		// does not back off: the failure is the server's, not the
		// provider's or the template's.
		o.goStep(m, func(ctx context.Context, m store.PoolMachine) {
			o.fail(ctx, m, "the server restarted while bootstrapping it", false)
		})
		return
	}
	timeout := time.Duration(spec.BootstrapTimeout)
	if timeout == 0 {
		timeout = DefaultBootstrapTimeout
	}
	if m.LaunchedAt.IsZero() || now.Sub(m.LaunchedAt) < timeout {
		return
	}
	o.goStep(m, func(ctx context.Context, m store.PoolMachine) {
		why := fmt.Sprintf("its agent did not register within the bootstrap timeout (%s)", timeout)
		if tail := o.agentLog(ctx, d); tail != "" {
			why += "; its log ends: " + tail
		}
		o.fail(ctx, m, why, true)
	})
}

// impostor says why the node linked to a machine is not the machine's
// own: it registered from a machine id other than the one read from the
// machine before its join token was made (the server refuses those; this
// holds for nodes linked otherwise). "" when it is the machine's, or the
// machine was not bound.
func (o *Orchestrator) impostor(ctx context.Context, d store.Deployment) string {
	if d.MachineID == "" {
		return ""
	}
	n, err := o.store.GetNode(ctx, d.NodeID)
	if err != nil || n.MachineID == d.MachineID {
		return ""
	}
	return fmt.Sprintf("node %s registered with its bootstrap token from machine id %q, not the machine's (%s): not adopted, and removed; the token may have leaked",
		n.ID, n.MachineID, d.MachineID)
}

// stepReady keeps a ready machine's idle clock and drains it once it has
// been idle for the pool's idle timeout. It reports whether it drained.
func (o *Orchestrator) stepReady(ctx context.Context, spec api.PoolSpec, exists bool, m store.PoolMachine, now time.Time, ready int) bool {
	d, err := o.store.GetDeployment(ctx, m.DeploymentID)
	if err == nil && (d.State == provision.StateTerminated || d.State == api.DeploymentFailed) {
		o.goStep(m, func(ctx context.Context, m store.PoolMachine) {
			o.terminate(ctx, m, "its machine was "+d.State+": "+d.StateReason)
		})
		return true
	}
	ns, err := o.cluster.NodeState(ctx, m.NodeID)
	if errdefs.IsNotFound(err) {
		o.goStep(m, func(ctx context.Context, m store.PoolMachine) { o.terminate(ctx, m, "its node was removed") })
		return true
	}
	if err != nil {
		return false
	}
	if n := ns.Interruption(); n != nil {
		return o.interrupted(ctx, m, *n)
	}
	if n := ns.Rebalance(); n != nil {
		o.rebalance(ctx, m, *n)
	}
	busyAt := m.BusyAt
	if ns.Busy {
		busyAt = now
	} else if ns.LastWork.After(busyAt) {
		busyAt = ns.LastWork
	}
	// Write the clock only now and then: a busy machine would otherwise
	// cost a write every round.
	if busyAt.Sub(m.BusyAt) > time.Second {
		m.BusyAt = busyAt
		o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error { cur.BusyAt = busyAt; return nil })
	}
	if ns.Busy {
		return false
	}
	connected := ns.Connected
	var why string
	switch {
	case !exists:
		why = "its pool was removed"
	case ready <= spec.Min:
		return false
	case now.Sub(m.ReadyAt) < time.Duration(spec.MinAge):
		return false
	case now.Sub(m.BusyAt) < time.Duration(spec.IdleTimeout):
		return false
	default:
		why = fmt.Sprintf("idle for %s (idle_timeout %s)", now.Sub(m.BusyAt).Round(time.Second), time.Duration(spec.IdleTimeout))
	}
	m, err = o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.StateReason = api.MachineDraining, why
		return nil
	})
	if err != nil {
		return false
	}
	o.event(ctx, m.Pool, m.ID, "scale-down", fmt.Sprintf("draining machine %s (node %s): %s", m.ID, m.NodeID, why))
	if connected {
		if err := o.cluster.DrainNode(ctx, m.NodeID); err != nil {
			o.log.Warn("drain pool node", "machine", m.ID, "node", m.NodeID, "err", err)
		}
	}
	return true
}

// stepDraining destroys a draining machine once its agent said goodbye,
// or the drain timeout passed.
func (o *Orchestrator) stepDraining(ctx context.Context, m store.PoolMachine, now time.Time) {
	ns, err := o.cluster.NodeState(ctx, m.NodeID)
	if err != nil && !errdefs.IsNotFound(err) {
		return
	}
	connected := ns.Connected
	if n := ns.Interruption(); n != nil && connected && ns.Busy && now.Before(n.Time) {
		return // its running tasks go on until the provider takes it
	}
	if ns.Interruption() == nil && connected && now.Sub(m.UpdatedAt) < o.cfg.DrainTimeout {
		return
	}
	why := m.StateReason
	switch n := ns.Interruption(); {
	case n != nil && connected && ns.Busy:
		why += "; its time came"
	case n != nil && connected:
		why += "; it finished its work"
	case connected:
		why += fmt.Sprintf("; its agent did not stop within %s", o.cfg.DrainTimeout)
	}
	m, err = o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.StateReason = api.MachineTerminating, why
		return nil
	})
	if err != nil {
		return
	}
	o.goStep(m, func(ctx context.Context, m store.PoolMachine) { o.terminate(ctx, m, why) })
}

// terminate destroys a machine, forgets its node, and marks it gone.
func (o *Orchestrator) terminate(ctx context.Context, m store.PoolMachine, why string) {
	if err := o.destroy(ctx, m.DeploymentID, "terminated by pool "+m.Pool+": "+why); err != nil {
		o.event(ctx, m.Pool, m.ID, "error", fmt.Sprintf("destroying machine %s failed (retrying): %s", m.ID, errdefs.Message(err)))
		return
	}
	if m.NodeID != "" {
		if err := o.cluster.ForgetNode(ctx, m.NodeID, "its machine was destroyed"); err != nil && !errdefs.IsNotFound(err) {
			o.log.Warn("forget a pool machine's node", "machine", m.ID, "node", m.NodeID, "err", err)
			return
		}
	}
	if _, err := o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.StateReason = api.MachineGone, why
		return nil
	}); err != nil {
		return
	}
	o.mu.Lock()
	delete(o.said, "rebalance/"+m.ID)
	o.mu.Unlock()
	o.event(ctx, m.Pool, m.ID, "gone", fmt.Sprintf("machine %s is gone: %s", m.ID, why))
}

// fail destroys what a failed launch made and marks the machine failed;
// counted failures make its candidate back off.
func (o *Orchestrator) fail(ctx context.Context, m store.PoolMachine, why string, counted bool) {
	if err := o.destroy(ctx, m.DeploymentID, "pool "+m.Pool+": "+why); err != nil {
		o.event(ctx, m.Pool, m.ID, "error", fmt.Sprintf("destroying failed machine %s failed (retrying): %s", m.ID, errdefs.Message(err)))
		return
	}
	o.markFailed(ctx, m, why, counted)
}

// markFailed marks a machine failed, once what it made is destroyed or
// left to the sweep.
func (o *Orchestrator) markFailed(ctx context.Context, m store.PoolMachine, why string, counted bool) {
	if m.NodeID != "" {
		o.cluster.ForgetNode(ctx, m.NodeID, "its machine failed")
	}
	if _, err := o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.StateReason = api.MachineFailed, why
		return nil
	}); err != nil {
		return
	}
	msg := fmt.Sprintf("machine %s (%s on %s) failed: %s", m.ID, m.Template, m.Provider, why)
	if counted {
		until := o.failed(m, why)
		msg += fmt.Sprintf("; %s on %s backs off until %s", m.Template, m.Provider, until.Format(time.TimeOnly))
	}
	o.event(ctx, m.Pool, m.ID, "failed", msg)
	o.Wake() // a replacement, maybe from the next candidate
}

// destroy removes a deployment's machine (found by its resource ID, or by
// its labels when the launch was cut off before the ID was stored) and
// records it terminated. A deployment already gone is fine.
func (o *Orchestrator) destroy(ctx context.Context, deploymentID, why string) error {
	d, err := o.store.GetDeployment(ctx, deploymentID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.State == provision.StateTerminated {
		return nil
	}
	pr, err := o.cluster.Provider(d.Provider)
	if err != nil {
		return err
	}
	targets := []provision.Deployment{d.Machine()}
	if d.ResourceID == "" {
		targets = nil
		if f, ok := pr.(Finder); ok {
			found, err := f.Find(ctx, map[string]string{LabelDeploymentID: d.ID})
			if err != nil {
				return err
			}
			targets = found
		}
	}
	for _, t := range targets {
		if err := pr.Destroy(ctx, t); err != nil {
			return fmt.Errorf("destroy %s: %w", d.Name, err)
		}
	}
	ForgetHost(o.cluster, d, o.log)
	state := provision.StateTerminated
	if d.State == api.DeploymentFailed {
		state = api.DeploymentFailed
	}
	_, err = o.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = state, why
		return nil
	})
	return err
}

// goWork runs fn for a machine on its own goroutine, unless one already
// works on it.
func (o *Orchestrator) goWork(id string, fn func(ctx context.Context)) bool {
	o.mu.Lock()
	if o.inflight[id] {
		o.mu.Unlock()
		return false
	}
	o.inflight[id] = true
	parent := o.runCtx
	o.mu.Unlock()
	if parent == nil {
		parent = context.Background()
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer func() {
			o.mu.Lock()
			delete(o.inflight, id)
			o.mu.Unlock()
		}()
		// A server that stops cuts launches off: the provider cleans up
		// what it was making, and the next start fails the machine and
		// destroys whatever its labels find.
		ctx, cancel := context.WithTimeout(parent, 15*time.Minute)
		defer cancel()
		fn(ctx)
	}()
	return true
}

// goStep runs a step for a machine on its own goroutine, as goWork does,
// but only if the machine is still as the step read it: a launch that
// ended after this round listed the machines has moved it on, and the
// next round decides afresh.
func (o *Orchestrator) goStep(read store.PoolMachine, fn func(ctx context.Context, m store.PoolMachine)) {
	o.goWork(read.ID, func(ctx context.Context) {
		m, err := o.store.GetPoolMachine(ctx, read.ID)
		if err != nil || m.State != read.State || !m.UpdatedAt.Equal(read.UpdatedAt) {
			return
		}
		fn(ctx, m)
	})
}

func (o *Orchestrator) busyWith(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inflight[id]
}

// failed counts a failure of a machine's candidate and returns when it may
// be tried again.
func (o *Orchestrator) failed(m store.PoolMachine, why string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := candidateKey{m.Template, m.Provider}
	b := o.backoff[k]
	if b == nil {
		b = &backoffState{}
		o.backoff[k] = b
	}
	b.failures++
	wait := o.cfg.BackoffMin
	for i := 1; i < b.failures && wait < o.cfg.BackoffMax; i++ {
		wait *= 2
	}
	b.until, b.reason = time.Now().Add(min(wait, o.cfg.BackoffMax)), why
	return b.until
}

// succeeded clears a candidate's backoff: a machine of it became ready.
func (o *Orchestrator) succeeded(m store.PoolMachine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.backoff, candidateKey{m.Template, m.Provider})
}

// Record records an event of a pool that is no machine's: the pool was
// applied or removed.
func (o *Orchestrator) Record(ctx context.Context, pool, kind, msg string) {
	o.event(ctx, pool, "", kind, msg)
}

// event records a pool decision and logs it. A "waiting" event that says
// what the last one of its pool said is not repeated.
func (o *Orchestrator) event(ctx context.Context, pool, machine, kind, msg string) {
	if kind == "waiting" {
		o.mu.Lock()
		same := o.said[pool] == msg
		o.said[pool] = msg
		o.mu.Unlock()
		if same {
			return
		}
	}
	o.log.Info("pool "+kind, "pool", pool, "machine", machine, "msg", msg)
	if _, err := o.store.AddPoolEvent(ctx, api.PoolEvent{Pool: pool, Machine: machine, Kind: kind, Message: msg}); err != nil {
		o.log.Warn("record pool event", "pool", pool, "err", err)
	}
}

// sweep destroys provider resources of this owner that no live
// deployment accounts for: what a crash between a provider's answer and
// the store's write would otherwise leak. It runs every SweepInterval.
func (o *Orchestrator) sweep(ctx context.Context, specs []api.PoolSpec) {
	o.mu.Lock()
	due := time.Since(o.lastSwep) >= o.cfg.SweepInterval
	if due {
		o.lastSwep = time.Now()
	}
	o.mu.Unlock()
	if !due {
		return
	}
	// Ended machines and events are kept for Keep, then forgotten.
	cutoff := time.Now().Add(-o.cfg.Keep)
	for _, s := range specs {
		err := errors.Join(o.store.DeletePoolMachines(ctx, s.Name, cutoff), o.store.DeletePoolEvents(ctx, s.Name, cutoff))
		if err != nil {
			o.log.Warn("forget a pool's old machines and events", "pool", s.Name, "err", err)
		}
	}
	if o.cfg.Owner == "" {
		return
	}
	providers := map[string]bool{}
	for _, s := range specs {
		for _, c := range Candidates(s) {
			providers[c.Provider] = true
		}
	}
	machines, err := o.store.ListPoolMachines(ctx, store.PoolMachineFilter{Live: true})
	if err != nil {
		return
	}
	for _, m := range machines {
		providers[m.Provider] = true
	}
	for name := range providers {
		pr, err := o.cluster.Provider(name)
		if err != nil {
			continue
		}
		f, ok := pr.(Finder)
		if !ok {
			continue
		}
		found, err := f.Find(ctx, map[string]string{LabelOwner: o.cfg.Owner})
		if err != nil {
			o.log.Warn("sweep: list a provider's machines", "provider", name, "err", err)
			continue
		}
		for _, r := range found {
			o.sweepOne(ctx, pr, r)
		}
	}
}

func (o *Orchestrator) sweepOne(ctx context.Context, pr provision.Provider, r provision.Deployment) {
	id := r.Labels[LabelDeploymentID]
	d, err := o.store.GetDeployment(ctx, id)
	if err == nil && d.State != provision.StateTerminated && d.State != api.DeploymentFailed {
		return // accounted for
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return
	}
	if o.busyWith(r.Labels[LabelMachine]) {
		return // its launch is still recording it
	}
	pool := r.Labels[LabelPool]
	if err := pr.Destroy(ctx, r); err != nil {
		o.log.Warn("sweep: destroy a leaked machine", "provider", pr.Name(), "resource", r.ResourceID, "err", err)
		return
	}
	o.event(ctx, pool, r.Labels[LabelMachine], "swept",
		fmt.Sprintf("destroyed %s resource %.12s that no live machine accounts for (deployment %s)", pr.Name(), r.ResourceID, id))
}

// newID makes a machine ID.
func newID() string { return auth.NewID("pm-") }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// interrupted drains a ready machine whose provider is taking it back (a
// spot interruption notice): it stops counting against max and min at
// once, so that the round this wakes launches its replacement while it
// finishes what it runs. Its agent drains by itself; it is destroyed
// once idle, or when the notice's time has come (stepDraining).
func (o *Orchestrator) interrupted(ctx context.Context, m store.PoolMachine, n api.Notice) bool {
	why := n.Message()
	m, err := o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.StateReason = api.MachineDraining, why
		return nil
	})
	if err != nil {
		return false
	}
	o.event(ctx, m.Pool, m.ID, "interrupted", fmt.Sprintf("machine %s (node %s) is being taken back by its provider (%s): draining, and a replacement is launched if the pool still needs one",
		m.ID, m.NodeID, why))
	o.Wake()
	return true
}

// rebalance records, once per machine, that its provider recommends
// moving off it: it is at raised risk of interruption. The machine
// keeps working; nothing is launched before an interruption notice.
func (o *Orchestrator) rebalance(ctx context.Context, m store.PoolMachine, n api.Notice) {
	key := "rebalance/" + m.ID
	o.mu.Lock()
	said := o.said[key] != ""
	o.said[key] = n.Message()
	o.mu.Unlock()
	if !said {
		o.event(ctx, m.Pool, m.ID, "rebalance", fmt.Sprintf("machine %s (node %s): %s; it may be interrupted soon", m.ID, m.NodeID, n.Message()))
	}
}
