package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/auth"
	"github.com/nodemgr/nodemgr/internal/orchestrate"
	"github.com/nodemgr/nodemgr/internal/store"
)

// TestBootstrapTokenRegistersOnlyItsMachine: a pool machine's join token,
// leaked, does not register another machine as the pool's (issue 26,
// item 6). The orchestrator recorded the machine id it read from the
// machine; an agent with another is refused, with an event on the pool
// machine, the answer naming neither id, the token's use not spent and
// the machine linked to no node; the machine's own agent then registers
// and is linked.
func TestBootstrapTokenRegistersOnlyItsMachine(t *testing.T) {
	ts := newTestServer(t)
	ctx := t.Context()
	const want = "6f1c2a9e0b7d4e55a1c3f0e2d4b6a8c0"
	d := store.Deployment{ID: "d-1", Provider: "docker", Name: "p1-pm-1", State: "running", MachineID: want,
		Labels: map[string]string{orchestrate.LabelPool: "p1", orchestrate.LabelMachine: "pm-1", orchestrate.LabelDeploymentID: "d-1"}}
	m := store.PoolMachine{ID: "pm-1", Pool: "p1", Template: "small", Provider: "docker", State: api.MachineBootstrapping, DeploymentID: "d-1"}
	if err := ts.store.CreatePoolMachine(ctx, m, d); err != nil {
		t.Fatal(err)
	}
	token, err := cluster{ts.Server}.JoinToken(ctx, "d-1", []string{"a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	agent := func(machineID string) api.RegisterRequest {
		return api.RegisterRequest{MachineID: machineID, DataDir: orchestrate.AgentDataDir, Name: "p1-pm-1", Groups: []string{"a"}}
	}

	tests := []struct {
		name, machineID string
		want            int
		linked          bool
	}{
		{"an impostor", "0000aaaa-the-thief", http.StatusForbidden, false},
		{"another impostor", "4c4c4544-0042", http.StatusForbidden, false},
		{"the machine's own agent", want, http.StatusOK, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, rr, body := ts.register(t, token, agent(tc.machineID))
			if code != tc.want {
				t.Fatalf("register from machine %s = %d %s, want %d", tc.machineID, code, body, tc.want)
			}
			got, err := ts.store.GetDeployment(ctx, "d-1")
			if err != nil {
				t.Fatal(err)
			}
			if tc.linked {
				if got.NodeID == "" || got.NodeID != rr.NodeID {
					t.Errorf("deployment's node = %q, want %q", got.NodeID, rr.NodeID)
				}
				return
			}
			if got.NodeID != "" {
				t.Errorf("deployment's node = %q after a refused registration, want none", got.NodeID)
			}
			if strings.Contains(body, want) || !strings.Contains(body, "join-token create") {
				t.Errorf("refusal %s: want it to say what to do, and not to name the machine's id", body)
			}
			tk, err := ts.store.TokenByHash(ctx, auth.Hash(token))
			if err != nil || tk.Uses != 0 {
				t.Errorf("bootstrap token after a refused registration: %d uses, %v; want 0", tk.Uses, err)
			}
			if nodes, _ := ts.store.ListNodes(ctx, store.NodeFilter{}); len(nodes) != 0 {
				t.Errorf("%d nodes after a refused registration, want none", len(nodes))
			}
			var evs api.PoolEventList
			ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/pools/p1/events", nil, &evs)
			found := false
			for _, e := range evs.Events {
				found = found || e.Kind == "refused" && e.Machine == "pm-1" && strings.Contains(e.Message, tc.machineID) && strings.Contains(e.Message, "127.0.0.1")
			}
			if !found {
				t.Errorf("pool events = %+v, want a refused event on pm-1 naming machine id %s and where it came from", evs.Events, tc.machineID)
			}
		})
	}
}
