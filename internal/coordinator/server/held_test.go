package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestHeldTasksCountApart: tasks a node claimed and holds unstarted
// (prefetched) are counted apart from those that run, in GET suite and in
// the list, from what the agent says with its fetches and reports (issue
// 31 item 7: the dashboard showed 62 running with 6 worker processes).
func TestHeldTasksCountApart(t *testing.T) {
	ts, a := serverWithAgent(t, 2)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites",
		api.SuiteSpec{Name: "held", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}}, &su)
	specs := make([]api.TaskSpec, 20)
	for i := range specs {
		specs[i] = api.TaskSpec{Argv: []string{"true"}}
	}
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: specs}, nil)
	a.join(su.ID)

	held := func(n int) *int { return &n }
	var got api.TasksFetched
	a.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: 10, Held: held(0)}, &got)
	if len(got.Tasks) != 10 {
		t.Fatalf("fetched %d tasks, want 10", len(got.Tasks))
	}
	// Two workers run one each; 8 wait in the buffer. The count goes with
	// the next call: a report of one of them.
	a.call(api.MethodTasksReport, api.TasksReport{SuiteID: su.ID, Held: held(7), Reports: []api.TaskReport{{
		TaskID: got.Tasks[0].ID, Attempt: 1, Outcome: api.OutcomeSucceeded}}}, nil)

	wantCounts := func(what string, running, heldN int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var one api.Suite
			ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/"+su.ID, nil, &one)
			var list api.SuiteList
			ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites", nil, &list)
			var listed api.TaskCounts
			for _, s := range list.Suites {
				if s.ID == su.ID {
					listed = s.Counts
				}
			}
			if one.Counts.Running == running && one.Counts.Held == heldN && listed.Held == heldN {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: GET says running %d held %d, the list held %d; want running %d, held %d",
					what, one.Counts.Running, one.Counts.Held, listed.Held, running, heldN)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wantCounts("after the report", 9, 7)

	// A fetch says it too, and a count of none clears it.
	a.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: 0, Held: held(0)}, &got)
	wantCounts("once none is held", 9, 0)

	// An idle node holds nothing of the suite, whatever it said before.
	a.call(api.MethodTasksReport, api.TasksReport{SuiteID: su.ID, Held: held(5)}, nil)
	wantCounts("held again", 9, 5)
	a.call(api.MethodHeartbeat, api.Heartbeat{State: api.AgentIdle}, nil)
	wantCounts("the node gone idle", 9, 0)
}
