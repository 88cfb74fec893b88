package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/proto"
)

// testAgent speaks the agent protocol to a real server over a WebSocket
// with the real Peer: it says hello, then calls what the test asks, and
// records the server's wake and giveback requests. On a giveback it returns
// the last tasks it claimed, as a pool returns its last buffered ones.
type testAgent struct {
	t       *testing.T
	peer    *proto.Peer
	welcome api.Welcome

	mu        sync.Mutex
	held      []string
	wakes     int
	givebacks []api.TasksGiveback
}

func connectTestAgent(t *testing.T, url, cred string, cores int) *testAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		t.Fatal(err)
	}
	a := &testAgent{t: t}
	a.peer = proto.NewPeer(proto.NewWebSocketConn(c, 1<<20), a, proto.Options{})
	done := make(chan struct{})
	go func() { defer close(done); a.peer.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	a.call(api.MethodHello, api.Hello{State: api.AgentIdle, Hardware: api.Hardware{Cores: cores}}, &a.welcome)
	return a
}

func (a *testAgent) call(method string, req, resp any) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.peer.Call(ctx, method, req, resp); err != nil {
		a.t.Fatalf("%s: %v", method, err)
	}
}

// join takes the suite up as an agent does: suite.next, then a heartbeat
// saying it executes it.
func (a *testAgent) join(suiteID string) {
	a.t.Helper()
	var next api.SuiteNext
	a.call(api.MethodSuiteNext, struct{}{}, &next)
	if next.Suite == nil || next.Suite.ID != suiteID {
		a.t.Fatalf("suite.next = %+v, want suite %s", next.Suite, suiteID)
	}
	a.call(api.MethodHeartbeat, api.Heartbeat{State: api.AgentExecuting, SuiteID: suiteID}, nil)
}

// fetch claims up to max tasks and returns how many came.
func (a *testAgent) fetch(suiteID string, max int) int {
	a.t.Helper()
	var resp api.TasksFetched
	a.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: suiteID, Max: max}, &resp)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tk := range resp.Tasks {
		a.held = append(a.held, tk.ID)
	}
	return len(resp.Tasks)
}

func (a *testAgent) HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error) {
	switch method {
	case api.MethodWake:
		a.mu.Lock()
		a.wakes++
		a.mu.Unlock()
		return struct{}{}, nil
	case api.MethodTasksGiveback:
		var req api.TasksGiveback
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		a.mu.Lock()
		a.givebacks = append(a.givebacks, req)
		n := min(req.Count, len(a.held))
		ids := slices.Clone(a.held[len(a.held)-n:])
		a.held = a.held[:len(a.held)-n]
		a.mu.Unlock()
		go a.peer.Call(context.Background(), api.MethodTasksReturn, api.TasksReturn{TaskIDs: ids}, nil)
		return api.TasksGivenBack{Returned: n}, nil
	}
	return nil, proto.UnknownMethod(method)
}

func (a *testAgent) HandleNotify(context.Context, uint64, string, json.RawMessage) error { return nil }

func (a *testAgent) seen() (wakes int, givebacks []api.TasksGiveback) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wakes, slices.Clone(a.givebacks)
}

// fairSetup serves a real server with two agents of one core connected
// and a suite of n tasks for one worker each, and returns them.
func fairSetup(t *testing.T, n int) (suiteID string, a, b *testAgent) {
	t.Helper()
	_, suiteID, a, b = fairSetupWith(t, Config{}, n, fairNodes{workers: 1, coresA: 1, coresB: 1})
	return suiteID, a, b
}

// fairNodes is the suite's worker count and the agents' cores.
type fairNodes struct{ workers, coresA, coresB int }

// serverWithAgent is a test server with one agent of cores connected to
// it, as node "a".
func serverWithAgent(t *testing.T, cores int) (*testServer, *testAgent) {
	t.Helper()
	s, _, admin := newServer(t, "", Config{})
	url := serve(t, s)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	_, cred := ts.nodeNamed(t, "a")
	return ts, connectTestAgent(t, url, cred, cores)
}

func fairSetupWith(t *testing.T, cfg Config, n int, fn fairNodes) (ts *testServer, suiteID string, a, b *testAgent) {
	t.Helper()
	s, _, admin := newServer(t, "", cfg)
	url := serve(t, s)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts = &testServer{Server: s, http: hs, admin: admin}
	_, credA := ts.nodeNamed(t, "a")
	_, credB := ts.nodeNamed(t, "b")
	a, b = connectTestAgent(t, url, credA, fn.coresA), connectTestAgent(t, url, credB, fn.coresB)

	var su api.Suite
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites",
		api.SuiteSpec{Name: "fair", WorkerSchedule: api.WorkerSchedule{WorkerCount: fn.workers}}, &su)
	specs := make([]api.TaskSpec, n)
	for i := range specs {
		specs[i] = api.TaskSpec{Argv: []string{"true"}}
	}
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: specs}, nil)
	return ts, su.ID, a, b
}

// Two nodes on a suite of 40 tasks: the first to fetch 32 gets its half,
// and so does the second. Without the cap the first got 32.
func TestFetchIsCappedAtTheFairShare(t *testing.T) {
	suiteID, a, b := fairSetup(t, 40)
	a.join(suiteID)
	b.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 20 {
		t.Errorf("first fetch of 32 by one of two nodes got %d tasks, want 20", got)
	}
	if got := b.fetch(suiteID, 32); got != 20 {
		t.Errorf("second fetch of 32 got %d tasks, want 20", got)
	}
	if got := a.fetch(suiteID, 12); got != 0 {
		t.Errorf("fetch beyond the share got %d tasks, want 0", got)
	}
}

// With one worker per CPU of the node, a node of three cores gets three
// quarters of the suite beside a node of one.
func TestFairShareIsWeightedByWorkers(t *testing.T) {
	_, suiteID, a, b := fairSetupWith(t, Config{}, 40, fairNodes{workers: 0, coresA: 3, coresB: 1})
	a.join(suiteID)
	b.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 30 {
		t.Errorf("the 3-core node's fetch of 32 got %d tasks, want 30", got)
	}
	if got := b.fetch(suiteID, 32); got != 10 {
		t.Errorf("the 1-core node's fetch of 32 got %d tasks, want 10", got)
	}
}

// A node that came late finds the first one holding most tasks: the
// server asks the holder to give back its excess, wakes the latecomer when
// they are back, and the latecomer claims them.
func TestIdleNodeGetsTasksGivenBack(t *testing.T) {
	suiteID, a, b := fairSetup(t, 40)
	a.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 32 {
		t.Fatalf("fetch of 32 by the only node got %d tasks, want 32", got)
	}
	b.join(suiteID)
	wakesBefore, _ := b.seen()
	if got := b.fetch(suiteID, 32); got != 8 {
		t.Fatalf("the latecomer's fetch got %d tasks, want the 8 left", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, gb := a.seen()
		wakes, _ := b.seen()
		if len(gb) > 0 && wakes > wakesBefore {
			if want := []api.TasksGiveback{{SuiteID: suiteID, Count: 12}}; !slices.Equal(gb, want) {
				t.Errorf("the holder was asked %+v, want %+v", gb, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder asked %+v, latecomer woken %d times: want a giveback of 12 and a wake", gb, wakes-wakesBefore)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.fetch(suiteID, 32); got != 12 {
		t.Errorf("after the giveback the latecomer's fetch got %d tasks, want 12", got)
	}
	if got := a.fetch(suiteID, 32); got != 0 {
		t.Errorf("the holder's fetch after giving back got %d tasks, want 0: it holds its share", got)
	}
}

// A closed suite completes with the report of its last task, not at the
// next tick of the suite loop (an hour here).
func TestSuiteCompletesWithItsLastReport(t *testing.T) {
	ts, suiteID, a, _ := fairSetupWith(t, Config{SuiteTick: time.Hour}, 3, fairNodes{workers: 1, coresA: 1, coresB: 1})
	a.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 3 {
		t.Fatalf("fetch got %d tasks, want 3", got)
	}
	ts.mustCall(t, http.StatusOK, ts.admin, "POST", "/v1/suites/"+suiteID+"/close", nil, nil)
	report := func(ids ...string) {
		t.Helper()
		var reports []api.TaskReport
		for _, id := range ids {
			reports = append(reports, api.TaskReport{TaskID: id, Attempt: 1, Outcome: api.OutcomeSucceeded})
		}
		a.call(api.MethodTasksReport, api.TasksReport{Reports: reports}, nil)
	}
	state := func() string {
		t.Helper()
		var su api.Suite
		ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/"+suiteID, nil, &su)
		return su.State
	}
	report(a.held[:2]...)
	if got := state(); got != api.SuiteClosed {
		t.Errorf("suite %s with a task still running, want %s", got, api.SuiteClosed)
	}
	report(a.held[2])
	if got := state(); got != api.SuiteComplete {
		t.Errorf("suite %s once its last task reported, want %s at once", got, api.SuiteComplete)
	}
}

// A node that comes when the only other one has claimed every task (none
// Ready) is still offered the suite, as the holder would give it its share
// (issue 28: a 0→2 pool's second machine idled while the first ran all 8).
// Nothing is offered while the holder may be running all it holds.
func TestLateNodeIsOfferedAFullyClaimedSuite(t *testing.T) {
	ts, suiteID, a, b := fairSetupWith(t, Config{}, 8, fairNodes{workers: 2, coresA: 1, coresB: 1})
	a.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 8 {
		t.Fatalf("fetch of 32 by the only node got %d tasks, want 8", got)
	}
	b.join(suiteID)
	if got := b.fetch(suiteID, 32); got != 0 {
		t.Fatalf("the latecomer's first fetch got %d tasks, want 0: none is Ready", got)
	}
	waitGivebacks(t, a, []api.TasksGiveback{{SuiteID: suiteID, Count: 4}})
	// The holder returns them on its own time.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var su api.Suite
		ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/"+suiteID, nil, &su)
		if su.Counts.Ready == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the giveback the suite counts %+v, want 4 Ready", su.Counts)
		}
	}
	if got := b.fetch(suiteID, 32); got != 4 {
		t.Errorf("after the giveback the latecomer's fetch got %d tasks, want 4", got)
	}
}

// Nothing is offered while the holder may be running all it holds.
func TestLateNodeIsNotOfferedWhatMayAllRun(t *testing.T) {
	_, suiteID, a, b := fairSetupWith(t, Config{}, 2, fairNodes{workers: 2, coresA: 1, coresB: 1})
	a.join(suiteID)
	if got := a.fetch(suiteID, 32); got != 2 {
		t.Fatalf("fetch of 32 by the only node got %d tasks, want 2", got)
	}
	var next api.SuiteNext
	b.call(api.MethodSuiteNext, struct{}{}, &next)
	if next.Suite != nil {
		t.Errorf("suite.next offered %s, whose 2 tasks the other node's 2 workers may run", next.Suite.ID)
	}
}

// waitGivebacks waits until the agent was asked to give back what want says.
func waitGivebacks(t *testing.T, a *testAgent, want []api.TasksGiveback) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, gb := a.seen()
		if len(gb) >= len(want) {
			if !slices.Equal(gb, want) {
				t.Errorf("the holder was asked %+v, want %+v", gb, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder was asked %+v, want %+v", gb, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An idle agent asks for a suite only every IdlePoll (the welcome says
// it), so whatever gives an idle node work wakes it. A failed task that
// waits before its next attempt is Ready only when the wait is over: the
// idle nodes are woken then, not at their next poll.
func TestIdleNodesAreWokenWhenARetryWaitEnds(t *testing.T) {
	const wait = 300 * time.Millisecond
	_, suiteID, a, b := fairSetupWith(t, Config{RetryBackoff: wait, RetryBackoffMax: wait}, 1, fairNodes{workers: 1, coresA: 1, coresB: 1})
	a.join(suiteID)
	if got := a.fetch(suiteID, 1); got != 1 {
		t.Fatalf("fetch got %d tasks, want 1", got)
	}
	before, _ := b.seen()
	failed := time.Now()
	a.call(api.MethodTasksReport, api.TasksReport{Reports: []api.TaskReport{{TaskID: a.held[0], Attempt: 1,
		Outcome: api.OutcomeFailed, Reason: "exit status 2", Result: api.TaskResult{ExitCode: 2}}}}, nil)
	for {
		if wakes, _ := b.seen(); wakes > before {
			if waited := time.Since(failed); waited < wait {
				t.Errorf("the idle node was woken %s after the failure, before the %s wait ended", waited, wait)
			}
			return
		}
		if time.Since(failed) > 10*time.Second {
			t.Fatalf("the idle node was not woken in 10s; the retry waited %s", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An idle agent's poll (suite.next with poll) may be answered from a
// listing of the suites a few seconds old, so that thousands of polling
// agents cost one read of the suites; an ask after a wake reads them now,
// so no work that woke the agent is missed.
func TestPollsShareAListingAndWokenAsksReadNow(t *testing.T) {
	ts, a := serverWithAgent(t, 1)
	admin := ts.admin
	ask := func(poll bool) *api.Suite {
		t.Helper()
		var next api.SuiteNext
		a.call(api.MethodSuiteNext, api.SuiteNextRequest{Poll: poll}, &next)
		return next.Suite
	}
	if su := ask(false); su != nil {
		t.Fatalf("suite.next with no suite = %s, want none", su.ID)
	}
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites", api.SuiteSpec{Name: "late", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}, nil)
	if got := ask(true); got != nil {
		t.Errorf("a poll just after the last listing = suite %s, want the listing's answer (none)", got.ID)
	}
	if got := ask(false); got == nil || got.ID != su.ID {
		t.Errorf("an ask after a wake = %v, want suite %s, read now", got, su.ID)
	}
}
