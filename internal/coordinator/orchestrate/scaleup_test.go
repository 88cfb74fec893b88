package orchestrate

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// attachingCluster is a cluster whose one ready machine's agent connects
// right after the first look at it, whichever look that is: at the
// demand (its node serving the suite) or at the node (connected).
type attachingCluster struct {
	outageCluster
	attached bool
}

func (c *attachingCluster) attach() (was bool) {
	was, c.attached = c.attached, true
	return was
}

func (c *attachingCluster) NodeState(context.Context, string) (NodeState, error) {
	return NodeState{Connected: c.attach()}, nil
}

func (c *attachingCluster) Demands(context.Context) ([]Demand, error) {
	serving := 0
	if c.attach() {
		serving = 1
	}
	return []Demand{{SuiteID: "s-1", Suite: "build", Ready: 1, WorkerCount: 1, Serving: serving}}, nil
}

// TestAMachineConnectingMidPlanIsNotLaunchedAgain: a ready machine whose
// agent connects while the plan reads the cluster counts as serving or as
// on its way, never as neither; a pool made one machine too many when the
// demand was read before the connection (seen in CI: two machines for a
// one-task burst).
func TestAMachineConnectingMidPlanIsNotLaunchedAgain(t *testing.T) {
	a := &flakyProvider{name: "a"}
	cl := &attachingCluster{outageCluster: outageCluster{providers: map[string]*flakyProvider{"a": a}}}
	st := openStore(t)
	spec := api.PoolSpec{Name: "p1", Max: 2, MaxLaunching: 1, Candidates: []api.PoolCandidate{{Template: "small", Provider: "a"}}}
	body, _ := json.Marshal(spec)
	if _, err := st.PutDocument(t.Context(), store.Document{Kind: store.KindPool, Name: spec.Name, Body: body}); err != nil {
		t.Fatal(err)
	}
	o := New(Config{LaunchRetry: time.Millisecond}, st, cl, slog.New(slog.DiscardHandler))
	live := map[string][]store.PoolMachine{"p1": {{ID: "pm-1", Pool: "p1", State: api.MachineReady, NodeID: "n-1"}}}
	if err := o.scaleUp(t.Context(), []api.PoolSpec{spec}, live); err != nil {
		t.Fatal(err)
	}
	o.wg.Wait()
	if n := a.Calls(); n != 0 {
		t.Errorf("%d machines launched for a suite its ready machine serves, want none", n)
	}
}
