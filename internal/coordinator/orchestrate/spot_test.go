package orchestrate

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// spotCluster is an outageCluster without demand whose one node, n-1,
// has the notices and the work a test gives it.
type spotCluster struct {
	outageCluster
	mu      sync.Mutex
	notices []api.Notice
	busy    bool
}

func (c *spotCluster) Demands(context.Context) ([]Demand, error) { return nil, nil }
func (c *spotCluster) NodeState(context.Context, string) (NodeState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return NodeState{Connected: true, Busy: c.busy, Notices: slices.Clone(c.notices)}, nil
}

func (c *spotCluster) set(busy bool, ns ...api.Notice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy, c.notices = busy, ns
}

// spotPool is pool p1 (min 1, max 1) with one ready machine, pm-1 on
// node n-1, running on the provider spot.
func spotPool(t *testing.T) (*Orchestrator, store.Store, *spotCluster, *flakyProvider) {
	t.Helper()
	ctx := t.Context()
	st := openStore(t)
	spec := api.PoolSpec{Name: "p1", Min: 1, Max: 1, MaxLaunching: 1,
		Candidates: []api.PoolCandidate{{Template: "small", Provider: "spot"}}}
	body, _ := json.Marshal(spec)
	if _, err := st.PutDocument(ctx, store.Document{Kind: store.KindPool, Name: "p1", Body: body}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m := store.PoolMachine{ID: "pm-1", Pool: "p1", Template: "small", Provider: "spot", State: api.MachineReady,
		DeploymentID: "d-1", NodeID: "n-1", LaunchedAt: now, ReadyAt: now, BusyAt: now}
	d := store.Deployment{ID: "d-1", Provider: "spot", ResourceID: "r-1", Name: "p1-pm-1", State: "running"}
	if err := st.CreatePoolMachine(ctx, m, d); err != nil {
		t.Fatal(err)
	}
	p := &flakyProvider{name: "spot"}
	cl := &spotCluster{outageCluster: outageCluster{providers: map[string]*flakyProvider{"spot": p}}}
	o := New(Config{LaunchRetry: time.Millisecond}, st, cl, slog.New(slog.DiscardHandler))
	return o, st, cl, p
}

func machine(t *testing.T, st store.Store, id string) store.PoolMachine {
	t.Helper()
	m, err := st.GetPoolMachine(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestInterruptionLaunchesAReplacement: a pool at max whose machine gets
// a spot interruption notice drains it, stops counting it, and launches
// its replacement while it finishes its work; it is destroyed once idle.
func TestInterruptionLaunchesAReplacement(t *testing.T) {
	o, st, cl, p := spotPool(t)
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	notice := api.Notice{Kind: api.NoticeInterruption, Action: "terminate", Time: at}
	round(t, o)
	if p.Calls() != 0 {
		t.Fatalf("launched %d machines before any notice, want none (the pool is at min and max)", p.Calls())
	}

	cl.set(true, notice)
	round(t, o) // the notice: pm-1 drains
	round(t, o) // the round it woke: the replacement
	if m := machine(t, st, "pm-1"); m.State != api.MachineDraining || m.StateReason != notice.Message() {
		t.Errorf("interrupted machine = %s (%q), want draining (%q)", m.State, m.StateReason, notice.Message())
	}
	if p.Calls() != 1 {
		t.Errorf("provisions after the notice = %d, want 1 (the replacement; max 1 does not count the doomed machine)%s", p.Calls(), dumpEvents(t, st))
	}
	if !eventsSay(t, st, "interrupted", "pm-1", "spot interruption: terminate at "+at.Format(time.RFC3339)) {
		t.Errorf("no interrupted event naming the notice:%s", dumpEvents(t, st))
	}
	// (The replacement's bootstrap fails here, with no executor: it is
	// destroyed, which is no matter to this test.)
	if slices.Contains(p.destroyed, "r-1") {
		t.Errorf("destroyed %v while the interrupted machine still works, want r-1 kept", p.destroyed)
	}

	cl.set(false, notice) // its running tasks are done
	round(t, o)
	if m := machine(t, st, "pm-1"); m.State != api.MachineGone {
		t.Errorf("interrupted machine once idle = %s (%q), want gone", m.State, m.StateReason)
	}
	if !slices.Contains(p.destroyed, "r-1") {
		t.Errorf("destroyed %v, want r-1 among them", p.destroyed)
	}
}

// TestRebalanceIsToldOnce: a rebalance recommendation is a pool event,
// once, and the machine keeps working: nothing is launched for it.
func TestRebalanceIsToldOnce(t *testing.T) {
	o, st, cl, p := spotPool(t)
	cl.set(true, api.Notice{Kind: api.NoticeRebalance, Time: time.Now().UTC().Truncate(time.Second)})
	round(t, o)
	round(t, o)
	if m := machine(t, st, "pm-1"); m.State != api.MachineReady || p.Calls() != 0 {
		t.Errorf("after a rebalance recommendation: machine %s, %d launched; want ready, none", m.State, p.Calls())
	}
	evs, err := st.PoolEvents(t.Context(), "p1", store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == "rebalance" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("rebalance events = %d, want 1:%s", n, dumpEvents(t, st))
	}
}

// noticingProvider is a provider whose machines hear notices.
type noticingProvider struct{ flakyProvider }

func (*noticingProvider) NoticeEndpoint(d provision.Deployment) string {
	if d.Extra["spot"] == true {
		return "http://169.254.169.254"
	}
	return ""
}

// TestAgentConfigIMDS: the agent of a machine whose provider gives
// notices (an EC2 spot instance) watches its metadata service; others
// do not.
func TestAgentConfigIMDS(t *testing.T) {
	cl := &candidateCluster{providers: map[string]provision.Provider{"aws": &noticingProvider{flakyProvider{name: "aws"}}}}
	o := &Orchestrator{cluster: cl}
	for _, spot := range []bool{false, true} {
		d := store.Deployment{ID: "d-1", Name: "m1", Provider: "aws", Extra: map[string]any{"spot": spot}}
		got := string(o.agentConfig(api.PoolSpec{Name: "p"}, d, "nmj_x", false))
		if want := "imds: http://169.254.169.254"; strings.Contains(got, want) != spot {
			t.Errorf("agentConfig(spot %v) =\n%s\nwant %q only for spot", spot, got, want)
		}
	}
}
