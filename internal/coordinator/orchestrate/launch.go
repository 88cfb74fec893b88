package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// candidateInfo is a pool candidate as the scheduler sees it, with the
// Extra its provider gets.
type candidateInfo struct {
	schedule.Candidate
	extra map[string]any
}

// candidates renders a pool's candidates and fills in what the
// orchestrator observed: backoff, machines alive, boot times.
func (o *Orchestrator) candidates(ctx context.Context, spec api.PoolSpec, live []store.PoolMachine) []candidateInfo {
	boots := o.bootTimes(ctx, spec.Name)
	var out []candidateInfo
	for _, c := range Candidates(spec) {
		ci := candidateInfo{Candidate: schedule.Candidate{Pool: spec.Name, Template: c.Template, Provider: c.Provider,
			Price: c.Price, Tags: spec.Tags}}
		if pr, err := o.cluster.Provider(c.Provider); err != nil {
			ci.Unavailable = "provider " + c.Provider + ": " + errdefs.Message(err)
		} else if extra, err := o.cluster.Render(ctx, c.Template, c.Provider); err != nil {
			ci.Unavailable = "template " + c.Template + ": " + errdefs.Message(err)
		} else {
			ci.extra = extra
			ci.CPUs, ci.MemoryMB = size(extra)
			ci.Arch = machineArch(pr, extra)
			ci.Local = isLocal(pr)
		}
		if spec.Paused {
			ci.Unavailable = "pool " + spec.Name + " is paused"
		}
		k := candidateKey{c.Template, c.Provider}
		o.mu.Lock()
		if b := o.backoff[k]; b != nil {
			ci.BackoffUntil, ci.BackoffReason = b.until, b.reason
		}
		o.mu.Unlock()
		for _, m := range live {
			if m.Template == c.Template && m.Provider == c.Provider {
				ci.Machines++
			}
		}
		ci.BootP50 = p50(boots[k])
		out = append(out, ci)
	}
	return out
}

// machineArch is the arch a candidate's machines get, as its provider
// tells from the rendered template; the machines of a provider whose
// record says OnHost (docker, local) are the server's own. "" when unknown
// (the scheduler then takes any).
func machineArch(pr provision.Provider, extra map[string]any) string {
	if a, ok := pr.(provision.Archer); ok {
		return a.MachineArch(extra)
	}
	if onHost(pr) {
		return runtime.GOARCH
	}
	a, _ := extra["arch"].(string)
	return a
}

// isLocal reports whether a provider's machines run on the server's own
// host: as it says (a libvirt daemon on a URI without a remote host), or
// as its record says (docker, local).
func isLocal(pr provision.Provider) bool {
	if l, ok := pr.(provision.Locality); ok {
		return l.Local()
	}
	return onHost(pr)
}

// onHost reports whether pr's registration record says its machines run
// on the server's own host; a provider without a record does not.
func onHost(pr provision.Provider) bool {
	d, err := provision.Lookup("provider", pr.Name())
	return err == nil && d.OnHost
}

// size reads a rendered template's CPUs and memory (0 when it does not
// say).
func size(extra map[string]any) (float64, int64) {
	num := func(key string) float64 {
		switch v := extra[key].(type) {
		case float64:
			return v
		case int:
			return float64(v)
		case int64:
			return float64(v)
		}
		return 0
	}
	return num("cpu"), int64(num("memoryMB"))
}

// bootTimes are the request-to-ready times of a pool's recent machines,
// per candidate: the fastest policy's measure.
func (o *Orchestrator) bootTimes(ctx context.Context, pool string) map[candidateKey][]time.Duration {
	ms, err := o.store.ListPoolMachines(ctx, store.PoolMachineFilter{Pool: pool})
	if err != nil {
		return nil
	}
	out := map[candidateKey][]time.Duration{}
	for _, m := range ms {
		if !m.ReadyAt.IsZero() {
			k := candidateKey{m.Template, m.Provider}
			out[k] = append(out[k], m.ReadyAt.Sub(m.CreatedAt))
		}
	}
	return out
}

// BootP50s are every candidate's measured request-to-ready medians.
func (o *Orchestrator) BootP50s(ctx context.Context, pool string) map[[2]string]time.Duration {
	out := map[[2]string]time.Duration{}
	for k, ds := range o.bootTimes(ctx, pool) {
		out[[2]string{k.template, k.provider}] = p50(ds)
	}
	return out
}

// p50 is the median of the last 20 durations; 0 for none.
func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds[max(0, len(ds)-20):])
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// quota is a pool's limits and what its counted machines use of them.
func quota(spec api.PoolSpec, live []store.PoolMachine) schedule.Quota {
	q := schedule.Quota{MaxMachines: spec.Max, MaxCPUs: spec.MaxCPUs, MaxMemoryMB: spec.MaxMemoryMB}
	for _, m := range (poolView{spec: spec, live: live}).counted() {
		q.Machines++
		q.CPUs += m.CPUs
		q.MemoryMB += m.MemoryMB
	}
	return q
}

// scaleUp plans every pool against the demand and starts the machines the
// plan asks for, up to each pool's max_launching.
//
// Which ready machines' agents are connected is read before the demand: a
// machine whose agent connects in between then counts both as on its way
// and as serving (one tick asks for too little), never as neither (one
// machine too many, for good).
func (o *Orchestrator) scaleUp(ctx context.Context, specs []api.PoolSpec, live map[string][]store.PoolMachine) error {
	views := make([]poolView, 0, len(specs))
	cands := map[string][]candidateInfo{}
	for _, spec := range specs {
		v := poolView{spec: spec, live: live[spec.Name], connected: map[string]bool{}}
		for _, m := range v.live {
			if m.State == api.MachineReady {
				if ns, err := o.cluster.NodeState(ctx, m.NodeID); err == nil && ns.Connected {
					v.connected[m.NodeID] = true
				}
			}
		}
		cands[spec.Name] = o.candidates(ctx, spec, v.live)
		v.cpus, v.memoryMB = nextSize(spec, cands[spec.Name])
		views = append(views, v)
	}
	demands, err := o.cluster.Demands(ctx)
	if err != nil {
		return fmt.Errorf("read demand: %w", err)
	}
	plans := planPools(views, demands)
	for _, v := range views {
		o.scalePool(ctx, v, plans[v.spec.Name], cands[v.spec.Name])
	}
	return nil
}

// nextSize is the size of the machine a pool would make next: its best
// candidate's, or when none is feasible now the first's, so that demand
// still shows; 0 when unknown.
func nextSize(spec api.PoolSpec, cands []candidateInfo) (float64, int64) {
	if best, ok, _ := schedule.Choose(schedule.Request{Policy: spec.Policy}, schedulable(cands), nil, time.Now()); ok {
		return best.CPUs, best.MemoryMB
	}
	if len(cands) > 0 {
		return cands[0].CPUs, cands[0].MemoryMB
	}
	return 0, 0
}

// PoolsFor lists by name the pools that would start machines for d: their
// agents carry its tags and groups and their next machine holds it.
func (o *Orchestrator) PoolsFor(ctx context.Context, d Demand) ([]string, error) {
	specs, err := LoadPools(ctx, o.store)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, spec := range specs {
		v := poolView{spec: spec}
		v.cpus, v.memoryMB = nextSize(spec, o.candidates(ctx, spec, nil))
		if serves(v, d) {
			out = append(out, spec.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// scalePool starts what the plan asks of one pool and records its status.
func (o *Orchestrator) scalePool(ctx context.Context, v poolView, pl *plan, cands []candidateInfo) {
	spec := v.spec
	onway := v.launching()
	start := min(pl.add, max(0, spec.MaxLaunching-onway))
	var waiting []string
	if spec.Paused {
		waiting = append(waiting, "paused: launches no machine (nodemgr pool resume "+spec.Name+")")
	}
	if pl.add > start {
		waiting = append(waiting, fmt.Sprintf("%d more machine%s wanted after the %d launching (max_launching %d)", pl.add-start, plural(pl.add-start), onway, spec.MaxLaunching))
	}
	if pl.limited != "" {
		waiting = append(waiting, fmt.Sprintf("%d machine%s wanted but the pool is %s", pl.wanted-pl.add, plural(pl.wanted-pl.add), pl.limited))
	}
	o.mu.Lock()
	for _, m := range v.live {
		if msg := o.trouble[m.ID]; msg != "" {
			waiting = append(waiting, msg)
		}
	}
	o.mu.Unlock()
	live := slices.Clone(v.live)
	started := 0
	for range start {
		q := map[string]schedule.Quota{spec.Name: quota(spec, live)}
		req := schedule.Request{Policy: spec.Policy}
		verdicts, err := schedule.Explain(req, schedulable(cands), q, time.Now())
		if err != nil {
			waiting = append(waiting, errdefs.Message(err))
			break
		}
		if len(verdicts) == 0 || !verdicts[0].Feasible {
			waiting = append(waiting, "no candidate can make a machine now: "+infeasible(verdicts))
			break
		}
		choice := verdicts[0]
		ci := cands[slices.IndexFunc(cands, func(c candidateInfo) bool {
			return c.Template == choice.Template && c.Provider == choice.Provider
		})]
		m, err := o.launch(ctx, spec, ci, pl.demandLine(), choice.Why)
		if err != nil {
			waiting = append(waiting, errdefs.Message(err))
			break
		}
		live = append(live, m)
		for i := range cands {
			if cands[i].Template == ci.Template && cands[i].Provider == ci.Provider {
				cands[i].Machines++
			}
		}
		started++
	}
	counted := len(v.counted()) + started
	st := PoolStatus{Desired: min(counted+pl.add-started, spec.Max), Demand: pl.demandLine(), Starting: onway + started}
	for s := range pl.serving {
		st.Suites = append(st.Suites, s)
	}
	sort.Strings(st.Suites)
	st.Waiting = strings.Join(waiting, "; ")
	if st.Waiting != "" {
		o.event(ctx, spec.Name, "", "waiting", st.Waiting)
	} else {
		o.mu.Lock()
		delete(o.said, spec.Name)
		o.mu.Unlock()
	}
	o.mu.Lock()
	o.status[spec.Name] = st
	o.mu.Unlock()
}

func schedulable(cands []candidateInfo) []schedule.Candidate {
	out := make([]schedule.Candidate, len(cands))
	for i, c := range cands {
		out[i] = c.Candidate
	}
	return out
}

// infeasible says why each candidate cannot be used.
func infeasible(vs []schedule.Verdict) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf("%s on %s: %s", v.Template, v.Provider, strings.Join(v.Reasons, ", ")))
	}
	if len(parts) == 0 {
		return "the pool has no candidates"
	}
	return strings.Join(parts, "; ")
}

// launch stores a new machine and its deployment (the intent), then
// provisions and bootstraps it on its own goroutine.
func (o *Orchestrator) launch(ctx context.Context, spec api.PoolSpec, ci candidateInfo, demand, why string) (store.PoolMachine, error) {
	id := newID()
	depID := auth.NewID("d-")
	name := spec.Name + "-" + strings.TrimPrefix(id, "pm-")
	labels := map[string]string{LabelOwner: o.cfg.Owner, LabelPool: spec.Name, LabelMachine: id, LabelDeploymentID: depID,
		"nodemgr.template": ci.Template}
	m := store.PoolMachine{ID: id, Pool: spec.Name, Template: ci.Template, Provider: ci.Provider, State: api.MachineRequested,
		DeploymentID: depID, CPUs: ci.CPUs, MemoryMB: ci.MemoryMB}
	d := store.Deployment{ID: depID, Provider: ci.Provider, Name: name, Template: ci.Template, State: provision.StatePending,
		StateReason: "being made for pool " + spec.Name, Extra: ci.extra, Labels: labels}
	if err := o.store.CreatePoolMachine(ctx, m, d); err != nil {
		return m, fmt.Errorf("store the intent to make a machine: %w", err)
	}
	o.event(ctx, spec.Name, id, "scale-up", fmt.Sprintf("requesting machine %s: %s on %s (%s) for %s", id, ci.Template, ci.Provider, why, demand))
	o.mu.Lock()
	o.ours[id] = true
	o.mu.Unlock()
	o.goWork(id, func(ctx context.Context) { o.provisionAndBootstrap(ctx, spec, m, d) })
	return m, nil
}

// provisionAndBootstrap makes the machine and starts its agent; the
// rounds that follow wait for the agent to register.
func (o *Orchestrator) provisionAndBootstrap(ctx context.Context, spec api.PoolSpec, m store.PoolMachine, d store.Deployment) {
	m, err := o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State = api.MachineProvisioning
		return nil
	})
	if err != nil {
		return
	}
	pr, err := o.cluster.Provider(d.Provider)
	if err != nil {
		o.failLaunch(ctx, m, "provider: "+errdefs.Message(err), true)
		return
	}
	pull, err := o.pullFor(ctx, pr, spec, d)
	if err != nil {
		o.failLaunch(ctx, m, "bootstrap: "+errdefs.Message(err), true)
		return
	}
	start := time.Now()
	made, err := o.provision(ctx, pr, m, d, pull)
	if err != nil && stopping(ctx) {
		return // the next run replaces it, uncharged ("the server stopped while launching it")
	}
	if err != nil {
		o.failLaunch(ctx, m, "provision: "+errdefs.Message(err), true)
		return
	}
	d, err = o.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		cur.State, cur.StateReason = made.State, ""
		cur.ResourceID, cur.Address, cur.Executors = made.ResourceID, made.Address, made.Executors
		if pull != nil {
			cur.Extra = maps.Clone(cur.Extra)
			if cur.Extra == nil {
				cur.Extra = map[string]any{}
			}
			cur.Extra[provision.ExtraSSHHostKey] = pull.hostKey.public
		}
		return nil
	})
	if err != nil {
		// Unrecorded, the machine would leak: take it back now.
		pr.Destroy(context.WithoutCancel(ctx), made)
		o.failLaunch(ctx, m, "record the machine: "+errdefs.Message(err), true)
		return
	}
	m, err = o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.State, cur.LaunchedAt = api.MachineBootstrapping, time.Now()
		if pull != nil {
			// Its agent came with the launch: from now on it has the
			// bootstrap timeout to fetch it and register.
			cur.DeliveredAt = cur.LaunchedAt
		}
		return nil
	})
	if err != nil {
		return
	}
	if pull != nil {
		o.event(ctx, m.Pool, m.ID, "launched", fmt.Sprintf("machine %s launched in %s (%s %.12s); it fetches its agent itself (cloud-init), waiting for it to register",
			m.ID, time.Since(start).Round(time.Millisecond), d.Provider, d.ResourceID))
		o.Wake()
		return
	}
	o.event(ctx, m.Pool, m.ID, "launched", fmt.Sprintf("machine %s launched in %s (%s %.12s); bootstrapping its agent",
		m.ID, time.Since(start).Round(time.Millisecond), d.Provider, d.ResourceID))
	copied, started, err := o.bootstrap(ctx, spec, d)
	if err != nil {
		if stopping(ctx) {
			return // the next run replaces it, uncharged (stepBootstrapping)
		}
		o.fail(ctx, m, "bootstrap: "+errdefs.Message(err), true)
		return
	}
	// From now on its agent has the bootstrap timeout to register, and a
	// server that restarts waits for it rather than replace the machine.
	if _, err := o.store.UpdatePoolMachine(ctx, m.ID, func(cur *store.PoolMachine) error {
		cur.DeliveredAt = time.Now()
		return nil
	}); err != nil {
		if !stopping(ctx) {
			o.fail(ctx, m, "record the agent's delivery: "+errdefs.Message(err), false)
		}
		return
	}
	o.event(ctx, m.Pool, m.ID, "bootstrapped", fmt.Sprintf("agent delivered to machine %s (copy %s, start %s); waiting for it to register",
		m.ID, copied.Round(time.Millisecond), started.Round(time.Millisecond)))
	o.Wake()
}

// launchRetryFor bounds a launch's retries: no try starts later than
// this after the first.
const launchRetryFor = 2 * time.Minute

// provision calls the provider's Provision, retrying a failure with
// back-off (LaunchTries, LaunchRetry): an endpoint that blinks should not
// fail the machine. A failure that another try would only repeat is
// returned at once: no capacity now (the next candidate serves instead),
// an invalid spec, a refused credential. While it waits, the pool's
// status says why.
func (o *Orchestrator) provision(ctx context.Context, pr provision.Provider, m store.PoolMachine, d store.Deployment, pull *pullBootstrap) (provision.Deployment, error) {
	spec := provision.Spec{Name: d.Name, Template: d.Template, Extra: d.Extra, Labels: d.Labels}
	if pull != nil {
		ud, err := pull.userData()
		if err != nil {
			return provision.Deployment{}, err
		}
		spec.UserData = ud
	}
	defer func() {
		o.mu.Lock()
		delete(o.trouble, m.ID)
		o.mu.Unlock()
	}()
	first := time.Now()
	wait := o.cfg.LaunchRetry
	for try := 1; ; try++ {
		made, err := pr.Provision(ctx, spec)
		if err == nil || ctx.Err() != nil || !retryable(err) || try >= o.cfg.LaunchTries || time.Since(first)+wait > launchRetryFor {
			return made, err
		}
		msg := fmt.Sprintf("provisioning machine %s (%s on %s) failed (try %d of %d), retrying in %s: %s",
			m.ID, m.Template, m.Provider, try, o.cfg.LaunchTries, wait, errdefs.Message(err))
		o.mu.Lock()
		o.trouble[m.ID] = msg
		o.mu.Unlock()
		o.event(ctx, m.Pool, m.ID, "retry", msg)
		o.Wake() // a round now, so that the pool's status says why at once
		select {
		case <-ctx.Done():
			return made, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// retryable reports whether a failed Provision may succeed if tried
// again soon.
func retryable(err error) bool {
	for _, final := range []error{provision.ErrNoCapacity, errdefs.ErrInvalid, errdefs.ErrPermission, errdefs.ErrUnauthenticated, errdefs.ErrNotFound} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// stopping reports whether a launch's context ended because the server
// stops or no longer leads (not the launch's own time limit): what failed
// then is the server's doing, and is left for the next run to clean up
// without charging the candidate.
func stopping(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// failLaunch marks a launch failed: the deployment first (the provider
// cleaned up what it made), then the machine, and its candidate backs
// off if counted. The machine fails even when the provider cannot be asked to
// destroy what it may have made (it is down: that is often why the
// launch failed), so that it stops counting against max and the next
// candidate serves: what it may have made carries the owner's labels and
// a failed deployment, which the sweep destroys once the provider answers.
func (o *Orchestrator) failLaunch(ctx context.Context, m store.PoolMachine, why string, counted bool) {
	d, err := o.store.UpdateDeployment(ctx, m.DeploymentID, func(cur *store.Deployment) error {
		if cur.ResourceID == "" {
			cur.State, cur.StateReason = api.DeploymentFailed, why
		}
		return nil
	})
	if err != nil || d.ResourceID != "" {
		o.fail(ctx, m, why, counted)
		return
	}
	if err := o.destroy(ctx, m.DeploymentID, "pool "+m.Pool+": "+why); err != nil {
		o.event(ctx, m.Pool, m.ID, "error", fmt.Sprintf("cleaning up after machine %s failed: %s; the sweep destroys what it may have made once %s answers",
			m.ID, errdefs.Message(err), m.Provider))
	}
	o.markFailed(ctx, m, why, counted)
}

// Explain ranks every candidate of every pool for a request: the answer
// of `nodemgr schedule explain`.
func (o *Orchestrator) Explain(ctx context.Context, req schedule.Request) ([]schedule.Verdict, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	specs, err := LoadPools(ctx, o.store)
	if err != nil {
		return nil, err
	}
	machines, err := o.store.ListPoolMachines(ctx, store.PoolMachineFilter{Live: true})
	if err != nil {
		return nil, err
	}
	var all []schedule.Candidate
	quotas := map[string]schedule.Quota{}
	for _, spec := range specs {
		var live []store.PoolMachine
		for _, m := range machines {
			if m.Pool == spec.Name {
				live = append(live, m)
			}
		}
		all = append(all, schedulable(o.candidates(ctx, spec, live))...)
		quotas[spec.Name] = quota(spec, live)
	}
	return schedule.Explain(req, all, quotas, time.Now())
}
