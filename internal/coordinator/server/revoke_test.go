package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// hello says hello as the node with cred and returns the welcome; the
// connection closes at the end of the test.
func (ts *testServer) hello(t *testing.T, cred string, h api.Hello) api.Welcome {
	t.Helper()
	_, w := helloAt(t, ts.http.URL, cred, h)
	return w
}

// TestWelcomeRevokesTasksGivenAway: an agent that comes back holding
// tasks taken from it gets back those not started elsewhere, and its
// welcome names the one another node runs now, so that it never starts
// it again; it also says after how long a silent node loses its tasks.
func TestWelcomeRevokesTasksGivenAway(t *testing.T) {
	ts := newTestServer(t)
	st := ts.store
	ctx := t.Context()
	away, cred := ts.nodeNamed(t, "away")
	other, _ := ts.nodeNamed(t, "other")
	su := store.Suite{ID: "s-r", Spec: api.SuiteSpec{Name: "r", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
		State: api.SuiteOpen, Owner: "admin", CreatedAt: time.Now()}
	if err := st.CreateSuite(ctx, su); err != nil {
		t.Fatal(err)
	}
	if err := st.AddTasks(ctx, su.ID, []store.Task{{ID: "k-1", Spec: api.TaskSpec{Argv: []string{"true"}}},
		{ID: "k-2", Spec: api.TaskSpec{Argv: []string{"true"}}}, {ID: "k-3", Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.ClaimTasks(ctx, su.ID, away, 3); err != nil || len(got) != 3 {
		t.Fatalf("claim by away: %d, %v", len(got), err)
	}
	if _, err := st.ReclaimNode(ctx, away); err != nil { // declared offline
		t.Fatal(err)
	}
	given, err := st.ClaimTasks(ctx, su.ID, other, 1)
	if err != nil || len(given) != 1 {
		t.Fatalf("claim by other: %d, %v", len(given), err)
	}

	w := ts.hello(t, cred, api.Hello{Name: "away", State: api.AgentExecuting, SuiteID: su.ID,
		Hardware: api.Hardware{Cores: 1}, Holding: []string{"k-1", "k-2", "k-3"}, Keepalive: api.Duration(2 * time.Second)})
	if !slices.Equal(w.Revoked, []string{given[0].ID}) {
		t.Errorf("welcome revoked %v, want only %s, which %s runs now", w.Revoked, given[0].ID, other)
	}
	if time.Duration(w.ReclaimAfter) != ts.cfg.ReconnectGrace {
		t.Errorf("welcome reclaim_after = %s, want the reconnect grace %s", time.Duration(w.ReclaimAfter), ts.cfg.ReconnectGrace)
	}
	for _, id := range []string{"k-1", "k-2", "k-3"} {
		tk, err := st.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := away
		if id == given[0].ID {
			want = other
		}
		if tk.State != api.TaskRunning || tk.NodeID != want {
			t.Errorf("%s: %s on %s, want Running on %s", id, tk.State, tk.NodeID, want)
		}
	}
}

// A keepalive the server would not honour is refused by name.
func TestHelloRefusesABadKeepalive(t *testing.T) {
	ts := newTestServer(t)
	_, cred := ts.nodeNamed(t, "k")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	body, _ := json.Marshal(api.Hello{Name: "k", State: api.AgentIdle, Hardware: api.Hardware{Cores: 1}, Keepalive: api.Duration(time.Millisecond)})
	f, _ := json.Marshal(api.Frame{V: 1, Type: api.FrameRequest, ID: 1, Method: api.MethodHello, Body: body})
	c.Write(ctx, websocket.MessageText, f)
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r api.Frame
	json.Unmarshal(b, &r)
	if r.Error == nil || !strings.Contains(r.Error.Message, "keepalive") {
		t.Errorf("hello with a 1ms keepalive: %s, want an error naming keepalive", b)
	}
}
