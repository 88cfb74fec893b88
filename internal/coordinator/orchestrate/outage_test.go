package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// outageCluster is a Cluster with providers that fail as a test says,
// one suite that wants one machine, and no executors (a launched
// machine's bootstrap fails, which these tests do not look at).
type outageCluster struct {
	providers map[string]*flakyProvider
}

func (c *outageCluster) Provider(name string) (provision.Provider, error) {
	if p, ok := c.providers[name]; ok {
		return p, nil
	}
	return nil, errdefs.NotFound("provider %s", name)
}
func (c *outageCluster) Executor(provision.Deployment) (execute.Executor, error) {
	return nil, errors.New("no executors here")
}
func (c *outageCluster) Render(context.Context, string, string) (map[string]any, error) {
	return map[string]any{}, nil
}
func (c *outageCluster) Demands(context.Context) ([]Demand, error) {
	return []Demand{{SuiteID: "s-1", Suite: "build", Ready: 1}}, nil
}
func (c *outageCluster) NodeState(context.Context, string) (NodeState, error) {
	return NodeState{}, nil
}
func (c *outageCluster) DrainNode(context.Context, string) error          { return nil }
func (c *outageCluster) ForgetNode(context.Context, string, string) error { return nil }
func (c *outageCluster) JoinToken(context.Context, string, []string, time.Duration) (string, error) {
	return "", errors.New("no tokens here")
}

// flakyProvider fails its first fails Provisions with err (all of them
// when fails is negative). While it fails it is down: Find and Destroy
// fail too, as an unreachable endpoint does.
type flakyProvider struct {
	name string
	err  error

	mu        sync.Mutex
	fails     int
	calls     int
	destroyed []string
}

func (p *flakyProvider) Name() string { return p.name }

func (p *flakyProvider) Provision(_ context.Context, spec provision.Spec) (provision.Deployment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.fails != 0 {
		p.fails--
		return provision.Deployment{}, fmt.Errorf("provision %s: %w", spec.Name, p.err)
	}
	return provision.Deployment{Provider: p.name, ResourceID: "r-" + spec.Name, Name: spec.Name, State: provision.StateRunning, Labels: spec.Labels}, nil
}

func (p *flakyProvider) down() bool {
	return p.fails != 0 && !errors.Is(p.err, provision.ErrNoCapacity)
}

func (p *flakyProvider) Destroy(_ context.Context, d provision.Deployment) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down() {
		return fmt.Errorf("destroy %s: %w", d.Name, p.err)
	}
	p.destroyed = append(p.destroyed, d.ResourceID)
	return nil
}

func (p *flakyProvider) Find(context.Context, map[string]string) ([]provision.Deployment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down() {
		return nil, fmt.Errorf("find: %w", p.err)
	}
	return nil, nil
}

func (p *flakyProvider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// errDown is what a provider whose endpoint is down answers.
var errDown = errdefs.Class(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), errdefs.ErrUnavailable)

// outage starts an orchestrator for pool p1 (max 1) whose candidates are
// small on each of providers, cheapest first.
func outage(t *testing.T, providers ...*flakyProvider) (*Orchestrator, store.Store) {
	t.Helper()
	ctx := t.Context()
	st := openStore(t)
	spec := api.PoolSpec{Name: "p1", Max: 1, MaxLaunching: 1}
	cl := &outageCluster{providers: map[string]*flakyProvider{}}
	for i, p := range providers {
		spec.Candidates = append(spec.Candidates, api.PoolCandidate{Template: "small", Provider: p.name, Price: ptr(float64(i + 1))})
		cl.providers[p.name] = p
	}
	body, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDocument(ctx, store.Document{Kind: store.KindPool, Name: spec.Name, Body: body}); err != nil {
		t.Fatal(err)
	}
	o := New(Config{LaunchRetry: time.Millisecond}, st, cl, slog.New(slog.DiscardHandler))
	return o, st
}

// round runs one round and waits for the launches it started.
func round(t *testing.T, o *Orchestrator) {
	t.Helper()
	if err := o.Reconcile(t.Context()); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	o.wg.Wait()
}

// machinesOf lists a pool's machines by provider, oldest first.
func machinesOf(t *testing.T, st store.Store) []store.PoolMachine {
	t.Helper()
	ms, err := st.ListPoolMachines(t.Context(), store.PoolMachineFilter{Pool: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// eventsSay reports whether a pool event of kind says all of want.
func eventsSay(t *testing.T, st store.Store, kind string, want ...string) bool {
	t.Helper()
	evs, err := st.PoolEvents(t.Context(), "p1", store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind != kind {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(e.Message, w)
		}
		if all {
			return true
		}
	}
	return false
}

func dumpEvents(t *testing.T, st store.Store) string {
	evs, _ := st.PoolEvents(t.Context(), "p1", store.Page{})
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s: %s", e.Kind, e.Message)
	}
	return b.String()
}

// TestLaunchRetriesAFailingProviderCall: a provider call that fails a few
// times during a launch is retried inside the launch, and the machine
// is launched (issue 28).
func TestLaunchRetriesAFailingProviderCall(t *testing.T) {
	a := &flakyProvider{name: "a", err: errDown, fails: 2}
	o, st := outage(t, a)
	round(t, o)

	if n := a.Calls(); n != 3 {
		t.Errorf("Provision calls = %d, want 3 (2 failures retried)", n)
	}
	if !eventsSay(t, st, "launched") {
		t.Errorf("no launched event; events:%s", dumpEvents(t, st))
	}
	if !eventsSay(t, st, "retry", "connection refused") {
		t.Errorf("no retry event naming the provider's error; events:%s", dumpEvents(t, st))
	}
	for _, m := range machinesOf(t, st) {
		if strings.HasPrefix(m.StateReason, "provision") {
			t.Errorf("machine %s = %s (%s), want its provision retried", m.ID, m.State, m.StateReason)
		}
	}
}

// TestLaunchFailsOverWhileAProviderIsDown: a provider that keeps failing
// (its endpoint down: nothing can be destroyed either) fails the
// machine, which no longer counts against max; its candidate backs off,
// the events and the pool's waiting line name the error, and the next
// candidate serves in the round that follows at once. When the provider
// answers again, the reason stays the provider's, not "the server
// stopped while launching it".
func TestLaunchFailsOverWhileAProviderIsDown(t *testing.T) {
	a := &flakyProvider{name: "a", err: errDown, fails: -1}
	b := &flakyProvider{name: "b", err: errDown}
	o, st := outage(t, a, b)
	round(t, o)

	ms := machinesOf(t, st)
	if len(ms) != 1 || ms[0].State != api.MachineFailed || !strings.Contains(ms[0].StateReason, "connection refused") {
		t.Fatalf("machines after the first round = %+v, want one on a, failed naming the provider's error; events:%s", ms, dumpEvents(t, st))
	}
	if n := a.Calls(); n < 2 {
		t.Errorf("Provision calls on a = %d, want it retried", n)
	}
	if !eventsSay(t, st, "failed", "connection refused", "backs off") {
		t.Errorf("no failed event naming the error and the back-off; events:%s", dumpEvents(t, st))
	}
	if _, ok := o.backoff[candidateKey{"small", "a"}]; !ok {
		t.Errorf("small on a does not back off")
	}

	round(t, o)
	ms = machinesOf(t, st)
	if len(ms) != 2 || ms[1].Provider != "b" {
		t.Fatalf("machines after the second round = %+v, want a second on b (max 1: the failed one does not count); events:%s", ms, dumpEvents(t, st))
	}
	if b.Calls() != 1 {
		t.Errorf("Provision calls on b = %d, want 1", b.Calls())
	}

	a.mu.Lock()
	a.fails = 0 // the provider is back
	a.mu.Unlock()
	round(t, o)
	if m, err := st.GetPoolMachine(t.Context(), ms[0].ID); err != nil || strings.Contains(m.StateReason, "server stopped") {
		t.Errorf("machine on a once its provider is back = %+v, %v; want the provider's reason kept", m, err)
	}
	if eventsSay(t, st, "failed", "server stopped") {
		t.Errorf("an event says the server stopped, which it did not; events:%s", dumpEvents(t, st))
	}
}

// TestWaitingNamesTheProviderError: a pool whose only provider is down
// says why it waits with the provider's error.
func TestWaitingNamesTheProviderError(t *testing.T) {
	a := &flakyProvider{name: "a", err: errDown, fails: -1}
	o, st := outage(t, a)
	round(t, o)
	round(t, o)
	if w := o.status["p1"].Waiting; !strings.Contains(w, "connection refused") {
		t.Errorf("waiting = %q, want it to name the provider's error; events:%s", w, dumpEvents(t, st))
	}
}

// TestLaunchMovesOnAtOnceWithoutCapacity: a launch the provider refuses
// for want of capacity is not retried: the machine fails, its candidate
// backs off, and the next candidate serves.
func TestLaunchMovesOnAtOnceWithoutCapacity(t *testing.T) {
	noCap := errdefs.Class(errors.New("InsufficientInstanceCapacity: no t3.micro capacity in us-east-1a"), provision.ErrNoCapacity)
	a := &flakyProvider{name: "a", err: noCap, fails: -1}
	b := &flakyProvider{name: "b", err: errDown}
	o, st := outage(t, a, b)
	o.cfg.LaunchRetry = 50 * time.Millisecond
	round(t, o)

	if n := a.Calls(); n != 1 {
		t.Errorf("Provision calls on a = %d, want 1: no capacity is not retried", n)
	}
	ms := machinesOf(t, st)
	if len(ms) != 1 || ms[0].State != api.MachineFailed || !strings.Contains(ms[0].StateReason, "InsufficientInstanceCapacity") {
		t.Fatalf("machines = %+v, want one on a, failed naming the capacity error", ms)
	}
	if !eventsSay(t, st, "failed", "InsufficientInstanceCapacity", "backs off") {
		t.Errorf("no failed event naming the capacity error; events:%s", dumpEvents(t, st))
	}
	round(t, o)
	if ms = machinesOf(t, st); len(ms) != 2 || ms[1].Provider != "b" {
		t.Errorf("machines after the second round = %+v, want a second on b", ms)
	}
}

// TestCutOffLaunchFailsWhileItsProviderIsDown: a launch an earlier run
// left provisioning is failed by the next run with the true reason, and
// stops counting against max, even while its provider does not answer
// (the sweep destroys what it may have made later); the next candidate
// serves.
func TestCutOffLaunchFailsWhileItsProviderIsDown(t *testing.T) {
	a := &flakyProvider{name: "a", err: errDown, fails: -1}
	b := &flakyProvider{name: "b", err: errDown}
	o, st := outage(t, a, b)
	m := store.PoolMachine{ID: "pm-1", Pool: "p1", Template: "small", Provider: "a", State: api.MachineProvisioning, DeploymentID: "d-1"}
	d := store.Deployment{ID: "d-1", Provider: "a", Name: "p1-pm-1", Template: "small", State: provision.StatePending}
	if err := st.CreatePoolMachine(t.Context(), m, d); err != nil {
		t.Fatal(err)
	}
	round(t, o)
	got, err := st.GetPoolMachine(t.Context(), "pm-1")
	if err != nil || got.State != api.MachineFailed || !strings.Contains(got.StateReason, "the server stopped while launching it") {
		t.Fatalf("cut-off machine = %s (%q), %v; want failed, the server stopped; events:%s", got.State, got.StateReason, err, dumpEvents(t, st))
	}
	if _, ok := o.backoff[candidateKey{"small", "a"}]; ok {
		t.Errorf("small on a backs off for the server's stop")
	}
	round(t, o)
	if ms := machinesOf(t, st); len(ms) != 2 {
		t.Errorf("machines after the second round = %+v, want a replacement (max 1: the failed one does not count)", ms)
	}
}
