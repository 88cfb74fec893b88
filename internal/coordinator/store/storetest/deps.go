package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// after is a named task that waits for others.
func after(id, name string, deps ...string) store.Task {
	return store.Task{ID: id, After: deps, Spec: api.TaskSpec{Argv: []string{"run", id}, Name: name, After: deps}}
}

func wantState(t *testing.T, s store.Store, id, want string) store.Task {
	t.Helper()
	got := mustGetTask(t, s, id)
	if got.State != want {
		t.Errorf("task %s is %s, want %s (reason %q)", id, got.State, want, got.Reason)
	}
	return got
}

// testDependencies: a task waits, Pending, until every task it runs after
// finished; claims never hand out a Pending task; the counts follow.
func testDependencies(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("su"))
	mustCreateNode(t, s, newNode("n1"))
	mustAddTasks(t, s, "su", after("a", "compile-a"), after("b", "compile-b"), after("link", "link", "a", "b"))
	if got := mustGetTask(t, s, "link"); got.State != api.TaskPending || len(got.After) != 2 {
		t.Fatalf("link = %s after %v, want Pending after [a b]", got.State, got.After)
	}
	claimed := mustClaim(t, s, "su", "n1", 10)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d tasks, want 2 (a and b; link waits)", len(claimed))
	}
	if su := mustGetSuite(t, s, "su"); su.Counts != (api.TaskCounts{Pending: 1, Running: 2}) {
		t.Errorf("counts = %+v, want 1 pending, 2 running", su.Counts)
	}
	done := mustFinish(t, s, "n1", 1, abortAfter(3), succeeded(task(claimed, "a")))
	if len(done.Released) != 0 {
		t.Errorf("Released = %v after a alone, want none (link still waits for b)", done.Released)
	}
	wantState(t, s, "link", api.TaskPending)
	done = mustFinish(t, s, "n1", 1, abortAfter(3), succeeded(task(claimed, "b")))
	if len(done.Released) != 1 || done.Released[0] != "su" {
		t.Errorf("Released = %v, want [su]", done.Released)
	}
	wantState(t, s, "link", api.TaskReady)
	if got := mustClaim(t, s, "su", "n1", 10); len(got) != 1 || got[0].ID != "link" {
		t.Errorf("claim after both finished = %v, want link", got)
	}
	if su := mustGetSuite(t, s, "su"); su.Counts != (api.TaskCounts{Running: 1, Finished: 2}) {
		t.Errorf("counts = %+v, want 1 running, 2 finished", su.Counts)
	}
}

// testDependencyFailure: a task that fails for good cancels the tasks
// that wait for it, and theirs, saying why; the suite can complete.
func testDependencyFailure(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("su"))
	mustCreateNode(t, s, newNode("n1"))
	mustAddTasks(t, s, "su", after("a", "compile-a"), after("link", "link", "a"), after("test", "", "link"))
	claimed := mustClaim(t, s, "su", "n1", 10)
	mustFinish(t, s, "n1", 1, abortAfter(1), failed(task(claimed, "a"), "syntax error"))
	wantState(t, s, "a", api.TaskFailed)
	if got := wantState(t, s, "link", api.TaskCancelled); !strings.Contains(got.Reason, "compile-a") || !strings.Contains(got.Reason, "failed") {
		t.Errorf("link's reason = %q, want it to name compile-a and say it failed", got.Reason)
	}
	if got := wantState(t, s, "test", api.TaskCancelled); !strings.Contains(got.Reason, "link") {
		t.Errorf("test's reason = %q, want it to name link", got.Reason)
	}
	if su := mustGetSuite(t, s, "su"); su.Counts != (api.TaskCounts{Failed: 1, Cancelled: 2}) {
		t.Errorf("counts = %+v, want 1 failed, 2 cancelled", su.Counts)
	}
	// A task added after its dependency failed is cancelled at once.
	mustAddTasks(t, s, "su", after("late", "", "a"))
	wantState(t, s, "late", api.TaskCancelled)
	// One added after its dependency finished is Ready at once.
	mustAddTasks(t, s, "su", after("ok", "ok"))
	c := mustClaim(t, s, "su", "n1", 1)
	mustFinish(t, s, "n1", 1, abortAfter(1), succeeded(c[0]))
	mustAddTasks(t, s, "su", after("next", "", "ok"))
	wantState(t, s, "next", api.TaskReady)
}

// testDependencyCancel: cancelling a task cancels its dependents, and
// cancelling the suite cancels its Pending tasks.
func testDependencyCancel(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("su"))
	mustAddTasks(t, s, "su", after("a", ""), after("b", "", "a"))
	if _, err := s.CancelTask(t.Context(), "a"); err != nil {
		t.Fatalf("CancelTask(a) = %v", err)
	}
	if got := wantState(t, s, "b", api.TaskCancelled); !strings.Contains(got.Reason, "was cancelled") {
		t.Errorf("b's reason = %q, want it to say a was cancelled", got.Reason)
	}
	mustCreateSuite(t, s, newSuite("su2"))
	mustAddTasks(t, s, "su2", after("c", ""), after("d", "", "c"))
	if _, err := s.CancelTask(t.Context(), "d"); err != nil {
		t.Errorf("CancelTask(d), a Pending task = %v, want nil", err)
	}
	mustCreateSuite(t, s, newSuite("su3"))
	mustAddTasks(t, s, "su3", after("e", ""), after("f", "", "e"))
	if _, err := s.UpdateSuite(t.Context(), "su3", func(su *store.Suite) error { su.State = api.SuiteCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "f", api.TaskCancelled)
	if su := mustGetSuite(t, s, "su3"); su.Counts != (api.TaskCounts{Cancelled: 2}) {
		t.Errorf("counts = %+v, want 2 cancelled", su.Counts)
	}
}

// testTaskNames: a name is unique in its suite (all or none), other suites
// may reuse it, and ListTasks finds tasks by name and labels.
func testTaskNames(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("su"))
	mustCreateSuite(t, s, newSuite("other"))
	lbl := after("x", "lapi")
	lbl.Spec.Labels = map[string]string{"file": "lapi.c", "kind": "cc"}
	mustAddTasks(t, s, "su", lbl, after("y", "lcode"))
	err := s.AddTasks(t.Context(), "su", []store.Task{after("z", "new"), after("w", "lapi")})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("AddTasks with a taken name = %v, want a conflict", err)
	}
	if _, err := s.GetTask(t.Context(), "z"); !errdefs.IsNotFound(err) {
		t.Errorf("GetTask(z) after a refused batch = %v, want not found (all or none)", err)
	}
	mustAddTasks(t, s, "other", after("v", "lapi"))
	got, err := s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "su", Name: "lapi"})
	if err != nil || len(got) != 1 || got[0].ID != "x" {
		t.Errorf("ListTasks(name lapi) = %v, %v, want [x]", got, err)
	}
	got, err = s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "su", Labels: map[string]string{"kind": "cc"}})
	if err != nil || len(got) != 1 || got[0].ID != "x" {
		t.Errorf("ListTasks(label kind=cc) = %v, %v, want [x]", got, err)
	}
	got, err = s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "su", Labels: map[string]string{"kind": "ld"}})
	if err != nil || len(got) != 0 {
		t.Errorf("ListTasks(label kind=ld) = %v, %v, want none", got, err)
	}
}

// testRetryPoliciesReachTheStore: the retry function sees the suite's
// policy and the task's.
func testRetryPoliciesReachTheStore(t *testing.T, s store.Store) {
	su := newSuite("su")
	su.Spec.Retry = &api.RetryPolicy{MaxAttempts: 5}
	mustCreateSuite(t, s, su)
	mustCreateNode(t, s, newNode("n1"))
	tk := after("a", "")
	tk.Spec.Retry = &api.RetryPolicy{FinalExitCodes: []int{1}}
	mustAddTasks(t, s, "su", tk)
	var sawSuite, sawTask *api.RetryPolicy
	policy := func(suite, task *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) {
		sawSuite, sawTask = suite, task
		return true, 0
	}
	c := mustClaim(t, s, "su", "n1", 1)
	mustFinish(t, s, "n1", 1, policy, failed(c[0], "boom"))
	if sawSuite == nil || sawSuite.MaxAttempts != 5 || sawTask == nil || len(sawTask.FinalExitCodes) != 1 {
		t.Errorf("retry saw suite %+v, task %+v; want max_attempts 5 and final_exit_codes [1]", sawSuite, sawTask)
	}
}
