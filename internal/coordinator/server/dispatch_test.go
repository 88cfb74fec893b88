package server

import (
	"net/http"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
)

// TestSuiteLeaveReturnsRunningTasks: a node that leaves a suite while the
// store still has tasks of that suite Running on it (a report it lost) gets
// them returned to the queue, attempts counted; its tasks of other suites,
// and other nodes' tasks of the suite, stay Running.
func TestSuiteLeaveReturnsRunningTasks(t *testing.T) {
	ts := newTestServer(t)
	n1, _ := ts.nodeNamed(t, "n1")
	n2, _ := ts.nodeNamed(t, "n2")
	suite := func(name string, tasks int) string {
		var su api.Suite
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
		specs := make([]api.TaskSpec, tasks)
		for i := range specs {
			specs[i] = api.TaskSpec{Argv: []string{"true"}}
		}
		ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: specs}, nil)
		return su.ID
	}
	left, other := suite("left", 3), suite("other", 1)
	claim := func(suiteID, nodeID string, n int) []string {
		got, err := ts.store.ClaimTasks(t.Context(), suiteID, nodeID, n)
		if err != nil || len(got) != n {
			t.Fatalf("ClaimTasks(%s, %s, %d) = %d tasks, %v; want %d", suiteID, nodeID, n, len(got), err, n)
		}
		ids := make([]string, n)
		for i, tk := range got {
			ids[i] = tk.ID
		}
		return ids
	}
	lost := claim(left, n1, 2)
	elsewhere := claim(left, n2, 1)
	otherSuite := claim(other, n1, 1)

	h := &agentHandler{s: ts.Server, sess: hub.NewSession(n1, nil, nil)}
	if _, err := h.suiteLeave(t.Context(), mustJSON(t, api.SuiteLeave{SuiteID: left, Reason: "complete"})); err != nil {
		t.Fatalf("suiteLeave = %v, want nil", err)
	}
	want := map[string]string{lost[0]: api.TaskReady, lost[1]: api.TaskReady, elsewhere[0]: api.TaskRunning, otherSuite[0]: api.TaskRunning}
	for id, state := range want {
		tk, err := ts.store.GetTask(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != state || tk.Attempt != 1 {
			t.Errorf("task %s after n1 left suite left = %s at attempt %d, want %s at 1", id, tk.State, tk.Attempt, state)
		}
	}
}
