package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
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

// A pull-bootstrapped machine's first fetch of its agent binds its
// deployment to the machine id it sends: a fetch from another machine id
// is refused, and so is its registration, and once the machine's agent
// registered, the spent token fetches nothing.
func TestAgentBinaryBindsTheMachine(t *testing.T) {
	ts := newTestServer(t)
	ctx := t.Context()
	d := store.Deployment{ID: "d-2", Provider: "aws", Name: "p2-pm-2", State: "running",
		Labels: map[string]string{orchestrate.LabelPool: "p2", orchestrate.LabelMachine: "pm-2", orchestrate.LabelDeploymentID: "d-2"}}
	m := store.PoolMachine{ID: "pm-2", Pool: "p2", Template: "small", Provider: "aws", State: api.MachineBootstrapping, DeploymentID: "d-2"}
	if err := ts.store.CreatePoolMachine(ctx, m, d); err != nil {
		t.Fatal(err)
	}
	token, err := cluster{ts.Server}.JoinToken(ctx, "d-2", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(machineID string) (int, string) {
		return ts.call(t, token, "GET", orchestrate.AgentBinaryPath+"?arch=x86_64&machine_id="+machineID, nil, nil)
	}
	const mine = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
	fetch(mine) // binds, whether or not this test's server has a binary to give
	if got, _ := ts.store.GetDeployment(ctx, "d-2"); got.MachineID != mine {
		t.Fatalf("after the first fetch the deployment's machine id = %q, want %q", got.MachineID, mine)
	}
	if code, body := fetch("someone-else"); code != http.StatusForbidden {
		t.Errorf("fetch from another machine = %d %s, want 403", code, body)
	}
	if code, _, body := ts.register(t, token, api.RegisterRequest{MachineID: "someone-else", DataDir: orchestrate.AgentDataDir, Name: "x"}); code != http.StatusForbidden {
		t.Errorf("registration from another machine = %d %s, want 403", code, body)
	}
	if code, body := ts.call(t, token, "GET", orchestrate.AgentBinaryPath+"?arch=x86%2F64&machine_id="+mine, nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "arch") {
		t.Errorf("fetch for arch x86/64 = %d %s, want 400 naming arch", code, body)
	}
	if code, _, body := ts.register(t, token, api.RegisterRequest{MachineID: mine, DataDir: orchestrate.AgentDataDir, Name: "p2-pm-2"}); code != http.StatusOK {
		t.Fatalf("the machine's own registration = %d %s", code, body)
	}
	if code, body := fetch(mine); code != http.StatusForbidden || !strings.Contains(body, "used already") {
		t.Errorf("fetch with the spent token = %d %s, want 403 saying it was used", code, body)
	}
}
