package orchestrate

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// recordingCluster is a Cluster that destroys and forgets by writing it
// down; it has no machines, nodes or demand.
type recordingCluster struct {
	mu        sync.Mutex
	destroyed []string // provider resource IDs
	forgotten []string // node IDs
}

func (c *recordingCluster) Provider(string) (provision.Provider, error) {
	return recordingProvider{c}, nil
}
func (c *recordingCluster) Executor(provision.Deployment) (execute.Executor, error) {
	return nil, errors.New("no executors here")
}
func (c *recordingCluster) Render(context.Context, string, string) (map[string]any, error) {
	return nil, errors.New("no templates here")
}
func (c *recordingCluster) Demands(context.Context) ([]Demand, error) { return nil, nil }
func (c *recordingCluster) NodeState(context.Context, string) (NodeState, error) {
	return NodeState{}, nil
}
func (c *recordingCluster) DrainNode(context.Context, string) error { return nil }
func (c *recordingCluster) ForgetNode(_ context.Context, nodeID, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten = append(c.forgotten, nodeID)
	return nil
}
func (c *recordingCluster) JoinToken(context.Context, string, []string, time.Duration) (string, error) {
	return "", errors.New("no tokens here")
}

type recordingProvider struct{ c *recordingCluster }

func (recordingProvider) Name() string { return "recording" }
func (recordingProvider) Provision(context.Context, provision.Spec) (provision.Deployment, error) {
	return provision.Deployment{}, errors.New("makes nothing")
}
func (p recordingProvider) Destroy(_ context.Context, d provision.Deployment) error {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	p.c.destroyed = append(p.c.destroyed, d.ResourceID)
	return nil
}

// TestPoolAdoptsOnlyItsMachine: a bootstrapping machine whose deployment
// got linked to a node from another machine id (a leaked bootstrap token
// used elsewhere, linked before the server checked) is not made ready:
// it fails, its machine is destroyed and the node is removed, with the
// reason in an event. The machine's own node makes it ready.
func TestPoolAdoptsOnlyItsMachine(t *testing.T) {
	tests := []struct {
		name, nodeMachineID string
		wantState           string
	}{
		{"the machine's own agent", "5d0c11ce", api.MachineReady},
		{"an impostor", "the-thiefs-laptop", api.MachineFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := openStore(t)
			now := time.Now()
			m := store.PoolMachine{ID: "pm-1", Pool: "p1", Template: "small", Provider: "recording", State: api.MachineBootstrapping,
				DeploymentID: "d-1", LaunchedAt: now}
			d := store.Deployment{ID: "d-1", Provider: "recording", ResourceID: "r-1", Name: "p1-pm-1", State: "running", MachineID: "5d0c11ce"}
			if err := st.CreatePoolMachine(ctx, m, d); err != nil {
				t.Fatal(err)
			}
			if _, err := st.CreateNode(ctx, store.Node{ID: "n-1", Name: "p1-pm-1", MachineID: tc.nodeMachineID, DataDir: AgentDataDir}); err != nil {
				t.Fatal(err)
			}
			if err := st.LinkDeploymentNode(ctx, "d-1", "n-1"); err != nil {
				t.Fatal(err)
			}
			cl := &recordingCluster{}
			o := New(Config{}, st, cl, slog.New(slog.DiscardHandler))
			m, err := st.GetPoolMachine(ctx, "pm-1")
			if err != nil {
				t.Fatal(err)
			}
			o.stepBootstrapping(ctx, api.PoolSpec{Name: "p1"}, m, now)
			o.wg.Wait()

			got, err := st.GetPoolMachine(ctx, "pm-1")
			if err != nil || got.State != tc.wantState {
				t.Fatalf("machine = %s (%s), %v; want %s", got.State, got.StateReason, err, tc.wantState)
			}
			if tc.wantState == api.MachineReady {
				if got.NodeID != "n-1" || len(cl.forgotten) != 0 || len(cl.destroyed) != 0 {
					t.Errorf("ready machine's node = %q, forgotten %v, destroyed %v; want n-1, nothing removed", got.NodeID, cl.forgotten, cl.destroyed)
				}
				return
			}
			if got.NodeID != "" || len(cl.forgotten) != 1 || cl.forgotten[0] != "n-1" || len(cl.destroyed) != 1 {
				t.Errorf("failed machine's node = %q, forgotten %v, destroyed %v; want none, [n-1], the machine", got.NodeID, cl.forgotten, cl.destroyed)
			}
			evs, err := st.PoolEvents(ctx, "p1", store.Page{})
			if err != nil || len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Message, "not adopted") || !strings.Contains(evs[len(evs)-1].Message, tc.nodeMachineID) {
				t.Errorf("pool events = %+v, %v; want the last to say the node was not adopted, naming its machine id", evs, err)
			}
		})
	}
}
