package server

import (
	"net/http"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestActionCache: a task that opts in and runs the action of one that
// succeeded before is answered from the cache at its claim, never reaching
// the agent, with that task's result marked CachedFrom; a task that opts
// out, a new action and the action of a failure run. A fetch whose every
// claimed task is a hit claims again, so a build of hits ends within it.
func TestActionCache(t *testing.T) {
	ts, a := serverWithAgent(t, 2)
	admin := ts.admin

	var su api.Suite
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites", api.SuiteSpec{Name: "build", Cache: true,
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}, Retry: &api.RetryPolicy{MaxAttempts: 1}}, &su)
	off := false
	submit := func(specs ...api.TaskSpec) []string {
		t.Helper()
		var res api.SubmitResult
		ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: specs}, &res)
		return res.IDs
	}
	fetch := func(max int) []api.Task {
		t.Helper()
		var resp api.TasksFetched
		a.call(api.MethodTasksFetch, api.TasksFetch{SuiteID: su.ID, Max: max}, &resp)
		return resp.Tasks
	}
	report := func(id string, exit int, stdout string) {
		t.Helper()
		outcome := api.OutcomeSucceeded
		if exit != 0 {
			outcome = api.OutcomeFailed
		}
		a.call(api.MethodTasksReport, api.TasksReport{Reports: []api.TaskReport{{TaskID: id, Attempt: 1, Outcome: outcome,
			Reason: "exit status 1", Result: api.TaskResult{ExitCode: exit, Stdout: stdout}}}}, nil)
	}
	cc := api.TaskSpec{Argv: []string{"cc", "-c", "a.c"}, Env: map[string]string{"CFLAGS": "-O2"}}
	uncached := api.TaskSpec{Argv: []string{"date"}, Cache: &off}
	failing := api.TaskSpec{Argv: []string{"false"}}

	first := submit(cc, uncached, failing)
	a.join(su.ID)
	if got := fetch(32); len(got) != 3 {
		t.Fatalf("first fetch got %d tasks, want 3: the cache is empty", len(got))
	}
	report(first[0], 0, "compiled\n")
	report(first[1], 0, "Sun\n")
	report(first[2], 1, "")

	ccAgain := cc
	ccAgain.Env = map[string]string{"CFLAGS": "-O2"} // the same action, in a map of its own
	otherFlags := api.TaskSpec{Argv: cc.Argv, Env: map[string]string{"CFLAGS": "-O0"}}
	second := submit(ccAgain, uncached, failing, otherFlags)
	var ran []string
	for _, tk := range fetch(32) {
		ran = append(ran, tk.ID)
	}
	if want := second[1:]; !slices.Equal(ran, want) {
		t.Errorf("second fetch handed out %v, want %v: all but the cached compile", ran, want)
	}
	var hit api.Task
	ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/tasks/"+second[0], nil, &hit)
	if hit.State != api.TaskFinished || hit.Result == nil || hit.Result.CachedFrom != first[0] || hit.Result.Stdout != "compiled\n" {
		t.Errorf("the cached compile = %s %+v; want Finished with %s's result, cached from it", hit.State, hit.Result, first[0])
	}
	for _, id := range ran {
		report(id, 0, "")
	}

	// A whole build of hits, more than one fetch asks for: all answered
	// within that fetch, none handed out.
	var copies []api.TaskSpec
	for range 10 {
		copies = append(copies, cc)
	}
	submit(copies...)
	if got := fetch(4); len(got) != 0 {
		t.Errorf("a fetch of a build of hits handed out %d tasks, want 0", len(got))
	}
	var after api.Suite
	ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/suites/"+su.ID, nil, &after)
	if after.Counts.Ready != 0 || after.Counts.Finished != 16 {
		t.Errorf("suite counts after the build of hits = %+v, want 0 Ready and 16 Finished", after.Counts)
	}

	// Cleared (the suite is in no group: its owner's scope), the compile
	// runs again.
	var cleared api.ActionCacheCleared
	ts.mustCall(t, http.StatusOK, admin, "DELETE", "/v1/action-cache", nil, &cleared)
	if cleared.Deleted != 3 {
		t.Errorf("clearing the cache removed %d entries, want 3 (the compile, its -O0 twin, and false, which succeeded the second time)", cleared.Deleted)
	}
	submit(cc)
	if got := fetch(4); len(got) != 1 {
		t.Errorf("fetch after clearing the cache handed out %d tasks, want the compile", len(got))
	}
}
