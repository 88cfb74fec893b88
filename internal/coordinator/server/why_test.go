package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// whyNode is a node of a scenario: online means its agent is connected.
type whyNode struct {
	id     string
	cores  int
	tags   []string
	groups []string
	online bool
	doing  string // the suite its agent works on; "" idle
}

// whySetup stores nodes (connecting the online ones) and a suite with one
// Ready task.
func whySetup(t *testing.T, s *Server, st store.Store, nodes []whyNode, spec api.SuiteSpec) store.Suite {
	t.Helper()
	now := time.Now().UTC()
	for _, n := range nodes {
		_, err := st.CreateNode(t.Context(), store.Node{ID: n.id, Name: n.id, MachineID: "m-" + n.id, DataDir: "/d",
			Tags: n.tags, Groups: n.groups, Hardware: api.Hardware{Cores: n.cores}, Status: api.StatusOnline, RegisteredAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if n.online {
			sess := hub.NewSession(n.id, nil, nil)
			state := api.AgentIdle
			if n.doing != "" {
				state = api.AgentExecuting
			}
			sess.Beat(now, state, n.doing)
			s.hub.Add(sess)
		}
	}
	if spec.WorkerSchedule.WorkerCount == 0 {
		spec.WorkerSchedule.WorkerCount = 1
	}
	su := store.Suite{ID: "s-" + spec.Name, Spec: spec, State: api.SuiteOpen, Owner: "admin", CreatedAt: now}
	if err := st.CreateSuite(t.Context(), su); err != nil {
		t.Fatal(err)
	}
	if err := st.AddTasks(t.Context(), su.ID, []store.Task{{ID: "k-" + spec.Name, Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	su, err := st.GetSuite(t.Context(), su.ID)
	if err != nil {
		t.Fatal(err)
	}
	return su
}

// TestWaitingReason checks the one-line reason for each way a suite can
// wait, and that the dispatcher agrees: when there is a reason, no online
// node is handed the suite; when there is none, an idle one is.
func TestWaitingReason(t *testing.T) {
	two := func(id string, online bool) whyNode { return whyNode{id: id, cores: 2, online: online} }
	tests := []struct {
		name  string
		nodes []whyNode
		spec  api.SuiteSpec
		leave *api.SuiteLeave // sent by the first node before asking
		want  string          // a substring; "" means no reason
	}{
		{name: "no nodes", spec: api.SuiteSpec{Name: "a"}, want: "no node is registered"},
		{name: "all offline", nodes: []whyNode{two("n1", false), two("n2", false)}, spec: api.SuiteSpec{Name: "b"},
			want: "no node is online (2 registered"},
		{name: "tags", nodes: []whyNode{two("n1", true), {id: "n2", cores: 2, tags: []string{"gpu"}}},
			spec: api.SuiteSpec{Name: "c", Tags: []string{"gpu"}},
			want: "no online node has tags [gpu] (offline ones that would: n2)"},
		{name: "group", nodes: []whyNode{two("n1", true)}, spec: api.SuiteSpec{Name: "d", Group: "ml"},
			want: "no online node is in group ml"},
		{name: "assigned", nodes: []whyNode{two("n1", true), two("n2", false)}, spec: api.SuiteSpec{Name: "e"},
			want: "none of its assigned nodes [n2] is online"},
		{name: "cores", nodes: []whyNode{two("n1", true), {id: "n2", cores: 1, online: true}},
			spec: api.SuiteSpec{Name: "f", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, CPUBinding: &api.CPUBinding{Cores: []int{0, 7}}}},
			want: "no node can run it: cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2"},
		{name: "prepare failed", nodes: []whyNode{two("n1", true)}, spec: api.SuiteSpec{Name: "g"},
			leave: &api.SuiteLeave{Reason: "prepare-failed: prepare hook [sh]: exit status 3",
				Problem: &api.SuiteProblem{Stage: api.StagePrepare, ExitCode: 3, Reason: "exit status 3", OutputTail: "missing license file\n"}},
			want: "prepare failed on all 1 eligible nodes (n1: exit status 3)"},
		{name: "old agent's prepare failure", nodes: []whyNode{two("n1", true)}, spec: api.SuiteSpec{Name: "h"},
			leave: &api.SuiteLeave{Reason: "prepare-failed: prepare hook [sh]: exit status 3"},
			want:  "prepare failed on all 1 eligible nodes (n1: prepare hook [sh]: exit status 3)"},
		{name: "busy", nodes: []whyNode{{id: "n1", cores: 2, online: true, doing: "s-other"}}, spec: api.SuiteSpec{Name: "i"},
			want: "all 1 eligible nodes are busy with other suites (n1)"},
		{name: "runs", nodes: []whyNode{{id: "n1", cores: 2, online: true, doing: "s-j"}}, spec: api.SuiteSpec{Name: "j"}},
		{name: "an idle node takes it", nodes: []whyNode{two("n1", true), two("n2", false)},
			spec: api.SuiteSpec{Name: "k", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, CPUBinding: &api.CPUBinding{Cores: []int{1}}}}},
		{name: "ran fine after failing", nodes: []whyNode{two("n1", true)}, spec: api.SuiteSpec{Name: "l"},
			leave: &api.SuiteLeave{Reason: "complete"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, st, _ := newServer(t, "", Config{})
			su := whySetup(t, s, st, tc.nodes, tc.spec)
			if tc.name == "assigned" {
				var err error
				su, err = st.UpdateSuite(t.Context(), su.ID, func(su *store.Suite) error { su.AssignedNodes = []string{"n2"}; return nil })
				if err != nil {
					t.Fatal(err)
				}
			}
			if tc.leave != nil {
				h := &agentHandler{s: s, sess: s.hub.Get(tc.nodes[0].id)}
				if tc.leave.Reason == "complete" { // a failure first, then a good run
					fail := api.SuiteLeave{SuiteID: su.ID, Reason: "prepare-failed: x", Problem: &api.SuiteProblem{Stage: api.StagePrepare, Reason: "x"}}
					if _, err := h.suiteLeave(t.Context(), mustJSON(t, fail)); err != nil {
						t.Fatal(err)
					}
				}
				tc.leave.SuiteID = su.ID
				if _, err := h.suiteLeave(t.Context(), mustJSON(t, *tc.leave)); err != nil {
					t.Fatalf("suiteLeave(%+v) = %v", *tc.leave, err)
				}
			}
			got, err := s.dispatcher.Why.WaitingReason(t.Context(), su)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("waitingReason = %q, want %q", got, tc.want)
			}
			// The dispatcher agrees. (A busy agent does not ask.)
			if tc.name == "busy" || tc.name == "runs" {
				return
			}
			handed := false
			for _, n := range tc.nodes {
				if !n.online {
					continue
				}
				next, err := s.dispatcher.NextSuite(t.Context(), n.id)
				if err != nil {
					t.Fatal(err)
				}
				handed = handed || (next != nil && next.ID == su.ID)
			}
			if handed != (tc.want == "") {
				t.Errorf("some online node was handed the suite: %v, but the reason is %q", handed, got)
			}
		})
	}
}

// TestSuiteProblemsShown: a prepare failure reported with suite.leave shows
// on GET /v1/suites/{suite} with the node, exit code and output; a later
// good run of the suite on that node clears it.
func TestSuiteProblemsShown(t *testing.T) {
	ts := newTestServer(t)
	id, _ := ts.nodeNamed(t, "lic-node")
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "lic", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/lic/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}, nil)

	h := &agentHandler{s: ts.Server, sess: hub.NewSession(id, nil, nil)}
	leave := api.SuiteLeave{SuiteID: su.ID, Reason: "prepare-failed: prepare hook [sh]: exit status 3",
		Problem: &api.SuiteProblem{NodeID: "forged", Stage: api.StagePrepare, ExitCode: 3, Reason: "exit status 3",
			OutputTail: strings.Repeat("x", 2*api.MaxProblemOutput) + "\nmissing license file\n"}}
	if _, err := h.suiteLeave(t.Context(), mustJSON(t, leave)); err != nil {
		t.Fatal(err)
	}
	var got api.Suite
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/lic", nil, &got)
	if len(got.Problems) != 1 {
		t.Fatalf("GET suite problems = %+v, want one", got.Problems)
	}
	p := got.Problems[0]
	if p.NodeID != id || p.NodeName != "lic-node" || p.ExitCode != 3 || p.Reason != "exit status 3" || p.Stage != api.StagePrepare || p.At.IsZero() {
		t.Errorf("problem = %+v, want node %s (lic-node), exit 3, stage prepare, a time", p, id)
	}
	if !strings.HasSuffix(p.OutputTail, "missing license file\n") || len(p.OutputTail) > api.MaxProblemOutput {
		t.Errorf("output tail is %d bytes ending %q, want at most %d ending in the last line", len(p.OutputTail), p.OutputTail[max(0, len(p.OutputTail)-30):], api.MaxProblemOutput)
	}

	bad := api.SuiteLeave{SuiteID: su.ID, Reason: "prepare-failed: x", Problem: &api.SuiteProblem{Stage: "boot", Reason: "x"}}
	if _, err := h.suiteLeave(t.Context(), mustJSON(t, bad)); err == nil || !strings.Contains(err.Error(), "problem.stage") {
		t.Errorf("suiteLeave(stage boot) = %v, want an error naming problem.stage", err)
	}

	if _, err := h.suiteLeave(t.Context(), mustJSON(t, api.SuiteLeave{SuiteID: su.ID, Reason: "complete"})); err != nil {
		t.Fatal(err)
	}
	got = api.Suite{}
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/lic", nil, &got)
	if len(got.Problems) != 0 {
		t.Errorf("problems after a good run = %+v, want none", got.Problems)
	}
}

// TestCleanupProblemShown: a cleanup hook that failed after the suite ran
// (exit 7) comes with a leave that says the suite completed; it is kept and
// shown as the suite's problem on that node, stage cleanup, without
// keeping the suite off the node as a failed prepare does. A later clean
// leave clears it.
func TestCleanupProblemShown(t *testing.T) {
	ts := newTestServer(t)
	id, _ := ts.nodeNamed(t, "scratch-node")
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "scratch", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)

	h := &agentHandler{s: ts.Server, sess: hub.NewSession(id, nil, nil)}
	leave := api.SuiteLeave{SuiteID: su.ID, Reason: "complete",
		Problem: &api.SuiteProblem{Stage: api.StageCleanup, ExitCode: 7, Reason: "exit status 7", OutputTail: "scratch busy\n"}}
	if _, err := h.suiteLeave(t.Context(), mustJSON(t, leave)); err != nil {
		t.Fatalf("suiteLeave(cleanup exit 7) = %v, want nil", err)
	}
	var got api.Suite
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/scratch", nil, &got)
	want := []api.SuiteProblem{{NodeID: id, NodeName: "scratch-node", Stage: api.StageCleanup, ExitCode: 7, Reason: "exit status 7", OutputTail: "scratch busy\n"}}
	if diff := cmp.Diff(want, got.Problems, cmpopts.IgnoreFields(api.SuiteProblem{}, "At")); diff != "" {
		t.Errorf("GET suite problems mismatch (-want +got):\n%s", diff)
	}
	stored, err := ts.backend.GetSuite(t.Context(), su.ID)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ts.backend.GetNode(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if m := ts.dispatcher.Why.WhyNot(stored, node); m != nil {
		t.Errorf("a failed cleanup keeps the suite off %s (%v), as a failed prepare would", id, m)
	}

	if _, err := h.suiteLeave(t.Context(), mustJSON(t, api.SuiteLeave{SuiteID: su.ID, Reason: "complete"})); err != nil {
		t.Fatal(err)
	}
	got = api.Suite{}
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/scratch", nil, &got)
	if len(got.Problems) != 0 {
		t.Errorf("problems after a clean run = %+v, want none", got.Problems)
	}
}

// TestCreateSuiteWarns: a suite no current node could run is accepted,
// and the answer says why.
func TestCreateSuiteWarns(t *testing.T) {
	ts := newTestServer(t)
	id, _ := ts.nodeNamed(t, "small")
	ts.hub.Add(hub.NewSession(id, nil, nil))
	tests := []struct {
		name string
		spec api.SuiteSpec
		want string
	}{
		{"cores", api.SuiteSpec{Name: "wide", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, CPUBinding: &api.CPUBinding{Cores: []int{0, 7}}}},
			"cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2"},
		{"tags", api.SuiteSpec{Name: "gpu", Tags: []string{"gpu"}, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, "no online node has tags [gpu]"},
		{"fits", api.SuiteSpec{Name: "fits", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var su api.Suite
			ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", tc.spec, &su)
			if (tc.want == "") != (su.WaitingReason == "") || !strings.Contains(su.WaitingReason, tc.want) {
				t.Errorf("create %s: waiting_reason = %q, want %q", tc.spec.Name, su.WaitingReason, tc.want)
			}
		})
	}
}
