package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// newTasks are n tasks with IDs prefix-t0, prefix-t1, ...
func newTasks(prefix string, n int) []store.Task {
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = store.Task{
			ID:   fmt.Sprintf("%s-t%d", prefix, i),
			Spec: api.TaskSpec{Argv: []string{"echo", fmt.Sprint(i)}},
		}
	}
	return tasks
}

// prioritized is a task with a priority.
func prioritized(id string, priority int) store.Task {
	return store.Task{ID: id, Spec: api.TaskSpec{Argv: []string{"run", id}, Priority: priority}}
}

func mustAddTasks(t *testing.T, s store.Store, suiteID string, tasks ...store.Task) {
	t.Helper()
	if err := s.AddTasks(t.Context(), suiteID, tasks); err != nil {
		t.Fatalf("AddTasks(%q, %d tasks) = %v, want nil", suiteID, len(tasks), err)
	}
}

func mustGetTask(t *testing.T, s store.Store, id string) store.Task {
	t.Helper()
	got, err := s.GetTask(t.Context(), id)
	if err != nil {
		t.Fatalf("GetTask(%q) = %v, want nil", id, err)
	}
	return got
}

// RegisterNodes makes sure the nodes exist, for tests that claim: only a
// registered node may claim tasks (of suites with no group, tags or
// assignment, here).
func RegisterNodes(t testing.TB, s store.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.GetNode(t.Context(), id); errdefs.IsNotFound(err) {
			mustCreateNode(t, s, newNode(id))
		}
	}
}

// mustClaim claims for the node, registering it first if it is not.
func mustClaim(t *testing.T, s store.Store, suiteID, nodeID string, max int) []store.Task {
	t.Helper()
	RegisterNodes(t, s, nodeID)
	got, err := s.ClaimTasks(t.Context(), suiteID, nodeID, max)
	if err != nil {
		t.Fatalf("ClaimTasks(%q, %q, %d) = %v, want nil", suiteID, nodeID, max, err)
	}
	if got == nil {
		t.Errorf("ClaimTasks(%q, %q, %d) = nil, want a non-nil slice", suiteID, nodeID, max)
	}
	return got
}

// mustFinish reports attempts from a node and checks how many counted.
func mustFinish(t *testing.T, s store.Store, nodeID string, wantApplied int, retry store.RetryPolicy, reports ...store.Attempt) store.Finished {
	t.Helper()
	done, err := s.FinishAttempts(t.Context(), nodeID, reports, retry)
	if n := done.Applied; err != nil || n != wantApplied {
		t.Fatalf("FinishAttempts(%q, %d reports) = %d, %v, want %d, nil", nodeID, len(reports), n, err, wantApplied)
	}
	return done
}

// mustReclaim takes a lost node's Running tasks back and checks how many.
func mustReclaim(t *testing.T, s store.Store, nodeID string, want int) {
	t.Helper()
	if n, err := s.ReclaimNode(t.Context(), nodeID); err != nil || n != want {
		t.Fatalf("ReclaimNode(%q) = %d, %v, want %d, nil", nodeID, n, err, want)
	}
}

func succeeded(tk store.Task) store.Attempt {
	return store.Attempt{TaskID: tk.ID, Attempt: tk.Attempt, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Stdout: "ok\n", DurationMS: 10, FinishedAt: t0}}
}

func failed(tk store.Task, reason string) store.Attempt {
	return store.Attempt{TaskID: tk.ID, Attempt: tk.Attempt, Outcome: api.OutcomeFailed,
		Result:  api.TaskResult{ExitCode: 1, Stderr: reason, DurationMS: 10, FinishedAt: t0},
		Failure: &api.TaskFailure{ExitCode: 1, Reason: reason, Stderr: reason, At: t0}}
}

func stopped(tk store.Task) store.Attempt {
	return store.Attempt{TaskID: tk.ID, Attempt: tk.Attempt, Outcome: api.OutcomeStopped,
		Result: api.TaskResult{ExitCode: -1, Signal: "SIGTERM", FinishedAt: t0}}
}

// abortAfter gives a task up once it has failed n times.
func abortAfter(n int) store.RetryPolicy {
	return func(_, _ *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
		return len(failures) >= n, 0
	}
}

// task finds the task with id among tasks.
func task(tasks []store.Task, id string) store.Task {
	for _, tk := range tasks {
		if tk.ID == id {
			return tk
		}
	}
	panic("no task " + id)
}

func taskIDs(tasks []store.Task) []string {
	return idsOf(tasks, func(tk store.Task) string { return tk.ID })
}

func testAddTasks(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	in := []store.Task{
		{ID: "a", Spec: api.TaskSpec{
			Argv: []string{"./fuzz", "--seed", "1"}, Env: map[string]string{"K": "v"},
			Workdir: "work", Timeout: api.Duration(time.Minute), Priority: 3,
		}},
		// What is not the caller's to say is ignored: a new task is Ready,
		// unclaimed, without results or failures.
		{ID: "b", Spec: api.TaskSpec{Argv: []string{"true"}}, State: api.TaskFinished, Attempt: 4, NodeID: "n1",
			Result: &api.TaskResult{ExitCode: 3}, Failures: []api.TaskFailure{{Reason: "x"}}, CreatedAt: t0},
		{ID: "c"},
	}
	mustAddTasks(t, s, "s1", in...)

	for _, tk := range in {
		got := mustGetTask(t, s, tk.ID)
		want := store.Task{ID: tk.ID, SuiteID: "s1", Spec: tk.Spec, State: api.TaskReady, Failures: []api.TaskFailure{}}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Task{}, "Seq", "CreatedAt", "UpdatedAt"), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("GetTask(%q) mismatch (-want +got):\n%s", tk.ID, diff)
		}
		if got.Failures == nil {
			t.Errorf("GetTask(%q).Failures = nil, want empty, not nil", tk.ID)
		}
		if wantCreated := tk.CreatedAt; !wantCreated.IsZero() && !got.CreatedAt.Equal(wantCreated) ||
			wantCreated.IsZero() && !recent(got.CreatedAt) || !recent(got.UpdatedAt) {
			t.Errorf("GetTask(%q) created at %v, updated at %v; want %v (or now if zero), now", tk.ID, got.CreatedAt, got.UpdatedAt, tk.CreatedAt)
		}
	}
	su := mustGetSuite(t, s, "s1")
	if su.Counts != (api.TaskCounts{Ready: 3}) || !recent(su.LastTaskAt) {
		t.Errorf("GetSuite(%q) after AddTasks: counts %+v, last task at %v; want 3 Ready, about now", "s1", su.Counts, su.LastTaskAt)
	}

	// An empty batch adds nothing and is no error.
	if err := s.AddTasks(t.Context(), "s1", nil); err != nil {
		t.Errorf("AddTasks(%q, nil) = %v, want nil", "s1", err)
	}
	if _, err := s.GetTask(t.Context(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetTask(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
}

func testAddTasksErrors(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("open"))
	mustCreateSuite(t, s, newSuite("other"))
	mustAddTasks(t, s, "open", prioritized("taken", 0))
	mustAddTasks(t, s, "other", prioritized("elsewhere", 0))
	for _, state := range []string{api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled} {
		mustCreateSuite(t, s, newSuite(state))
		setSuiteState(t, s, state, state)
	}
	lastTaskAt := mustGetSuite(t, s, "open").LastTaskAt

	tests := []struct {
		name  string
		suite string
		tasks []store.Task
		want  error
	}{
		{"no suite", "ghost", newTasks("new", 1), errdefs.ErrNotFound},
		{"closed suite", api.SuiteClosed, newTasks("new", 1), errdefs.ErrConflict},
		{"complete suite", api.SuiteComplete, newTasks("new", 1), errdefs.ErrConflict},
		{"cancelled suite", api.SuiteCancelled, newTasks("new", 1), errdefs.ErrConflict},
		{"empty id", "open", []store.Task{prioritized("new-t0", 0), {}}, errdefs.ErrInvalid},
		{"id taken", "open", []store.Task{prioritized("new-t0", 0), prioritized("taken", 0)}, errdefs.ErrConflict},
		{"id taken in another suite", "open", []store.Task{prioritized("new-t0", 0), prioritized("elsewhere", 0)}, errdefs.ErrConflict},
		{"id twice in the batch", "open", []store.Task{prioritized("new-t0", 0), prioritized("new-t0", 0)}, errdefs.ErrConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.AddTasks(t.Context(), tc.suite, tc.tasks); !wantErr(err, tc.want) {
				t.Errorf("AddTasks(%q, %q) = %v, want %v", tc.suite, taskIDs(tc.tasks), err, tc.want)
			}
			// All or none: the batch's first task is not there.
			if _, err := s.GetTask(t.Context(), "new-t0"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("GetTask(%q) after a refused AddTasks = %v, want %v", "new-t0", err, errdefs.ErrNotFound)
			}
		})
	}
	su := mustGetSuite(t, s, "open")
	if su.Counts != (api.TaskCounts{Ready: 1}) || !su.LastTaskAt.Equal(lastTaskAt) {
		t.Errorf("GetSuite(%q) after refused adds: counts %+v, last task at %v; want 1 Ready, %v", "open", su.Counts, su.LastTaskAt, lastTaskAt)
	}
}

func testListTasks(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustCreateSuite(t, s, newSuite("s2"))
	mustCreateSuite(t, s, newSuite("empty"))
	// Insertion order interleaves the suites; IDs sort in another order.
	mustAddTasks(t, s, "s1", prioritized("z", 0), prioritized("y", 5))
	mustAddTasks(t, s, "s2", prioritized("m", 0))
	mustAddTasks(t, s, "s1", prioritized("x", 0), prioritized("w", 9), prioritized("v", 0))
	mustAddTasks(t, s, "s2", prioritized("l", 0))
	mustClaim(t, s, "s1", "n1", 2)                                      // w, y
	mustFinish(t, s, "n1", 1, nil, failed(mustGetTask(t, s, "w"), "x")) // w Ready again, with a failure
	mustClaim(t, s, "s2", "n2", 1)                                      // m

	if got, err := s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "empty"}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListTasks(suite %q) = %#v, %v, want empty, not nil", "empty", got, err)
	}
	after := func(id string) string { return mustGetTask(t, s, id).Cursor() }
	tests := []struct {
		name   string
		filter store.TaskFilter
		want   []string
	}{
		{"all", store.TaskFilter{}, []string{"z", "y", "m", "x", "w", "v", "l"}},
		{"suite", store.TaskFilter{SuiteID: "s1"}, []string{"z", "y", "x", "w", "v"}},
		{"state", store.TaskFilter{States: []string{api.TaskRunning}}, []string{"y", "m"}},
		{"states", store.TaskFilter{SuiteID: "s1", States: []string{api.TaskRunning, api.TaskReady}}, []string{"z", "y", "x", "w", "v"}},
		{"node", store.TaskFilter{NodeID: "n1"}, []string{"y", "w"}},
		{"node and state", store.TaskFilter{NodeID: "n1", States: []string{api.TaskRunning}}, []string{"y"}},
		{"after", store.TaskFilter{SuiteID: "s1", Page: store.Page{After: after("y")}}, []string{"x", "w", "v"}},
		{"after across suites", store.TaskFilter{Page: store.Page{After: after("x")}}, []string{"w", "v", "l"}},
		{"limit", store.TaskFilter{SuiteID: "s1", Page: store.Page{Limit: 2}}, []string{"z", "y"}},
		{"after and limit", store.TaskFilter{SuiteID: "s1", Page: store.Page{After: after("y"), Limit: 2}}, []string{"x", "w"}},
		{"after the last", store.TaskFilter{SuiteID: "s1", Page: store.Page{After: after("v")}}, []string{}},
		{"no such state", store.TaskFilter{States: []string{"Lost"}}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListTasks(t.Context(), tc.filter)
			checkListed(t, fmt.Sprintf("ListTasks(%+v)", tc.filter), got, err, taskIDs, tc.want)
		})
	}

	// Paging with cursors walks the whole list once.
	var paged []string
	f := store.TaskFilter{Page: store.Page{Limit: 3}}
	for {
		page, err := s.ListTasks(t.Context(), f)
		if err != nil {
			t.Fatalf("ListTasks(%+v) = %v", f, err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, taskIDs(page)...)
		f.After = page[len(page)-1].Cursor()
	}
	if diff := cmp.Diff([]string{"z", "y", "m", "x", "w", "v", "l"}, paged); diff != "" {
		t.Errorf("ListTasks() paged by 3 mismatch (-want +got):\n%s", diff)
	}

	// Listed tasks are whole, failures included.
	all, err := s.ListTasks(t.Context(), store.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range all {
		if diff := cmp.Diff(mustGetTask(t, s, got.ID), got); diff != "" {
			t.Errorf("ListTasks() task %s differs from GetTask (-get +list):\n%s", got.ID, diff)
		}
	}
	if w := task(all, "w"); len(w.Failures) != 1 {
		t.Errorf("ListTasks() task w has %d failures, want 1", len(w.Failures))
	}

	if _, err := s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "ghost"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ListTasks(suite ghost) = %v, want %v", err, errdefs.ErrNotFound)
	}
}

func testClaimTasksOrder(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustCreateSuite(t, s, newSuite("s2"))
	mustAddTasks(t, s, "s2", prioritized("other", 100))
	mustAddTasks(t, s, "s1", prioritized("a", 0), prioritized("b", 5), prioritized("c", 0))
	mustAddTasks(t, s, "s1", prioritized("d", 5), prioritized("e", -1), prioritized("f", 9))

	steps := []struct {
		node string
		max  int
		add  []store.Task // added before the claim
		want []string
	}{
		// Highest priority first, then the order they were added in.
		{"n1", 2, nil, []string{"f", "b"}},
		// A later task sorts after older ones of its priority.
		{"n2", 3, []store.Task{prioritized("g", 5)}, []string{"d", "g", "a"}},
		{"n1", 10, nil, []string{"c", "e"}},
		{"n1", 10, nil, []string{}},
	}
	for i, st := range steps {
		if st.add != nil {
			mustAddTasks(t, s, "s1", st.add...)
		}
		got := mustClaim(t, s, "s1", st.node, st.max)
		if diff := cmp.Diff(st.want, taskIDs(got)); diff != "" {
			t.Errorf("step %d: ClaimTasks(%q, %q, %d) IDs mismatch (-want +got):\n%s", i, "s1", st.node, st.max, diff)
		}
		for _, tk := range got {
			if tk.State != api.TaskRunning || tk.Attempt != 1 || tk.NodeID != st.node || tk.SuiteID != "s1" {
				t.Errorf("ClaimTasks() task %s: state %q, attempt %d, node %q, suite %q; want %q, 1, %q, %q",
					tk.ID, tk.State, tk.Attempt, tk.NodeID, tk.SuiteID, api.TaskRunning, st.node, "s1")
			}
			if diff := cmp.Diff(mustGetTask(t, s, tk.ID), tk); diff != "" {
				t.Errorf("ClaimTasks() task %s differs from GetTask (-get +claim):\n%s", tk.ID, diff)
			}
		}
	}
	// Another suite's tasks are its own.
	if got := mustGetTask(t, s, "other"); got.State != api.TaskReady {
		t.Errorf("GetTask(%q).State = %q, want %q", "other", got.State, api.TaskReady)
	}
	for _, max := range []int{0, -1} {
		if got, err := s.ClaimTasks(t.Context(), "s2", "n1", max); err != nil || len(got) != 0 {
			t.Errorf("ClaimTasks(%q, max %d) = %d tasks, %v, want none, nil", "s2", max, len(got), err)
		}
	}
	if _, err := s.ClaimTasks(t.Context(), "ghost", "n1", 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ClaimTasks(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}

	// A task that failed before comes back with its attempts and failures.
	mustFinish(t, s, "n1", 1, nil, failed(mustGetTask(t, s, "f"), "exit status 2"))
	got := mustClaim(t, s, "s1", "n3", 1)
	if len(got) != 1 || got[0].ID != "f" || got[0].Attempt != 2 || len(got[0].Failures) != 1 || got[0].Failures[0].NodeID != "n1" {
		t.Errorf("ClaimTasks() after a failure = %+v, want f at attempt 2 with n1's failure", got)
	}
}

// testClaimTasksAuthorized checks that a claim is authorized in the
// store: only a registered node that the suite's placement admits (its
// group and tags, or its explicit assignment, and not stopped there) gets
// tasks, whatever the caller checked before; a refused claim changes
// nothing.
func testClaimTasksAuthorized(t *testing.T, s store.Store) {
	node := func(id string, groups, tags []string) {
		n := newNode(id)
		n.Groups, n.Tags = groups, tags
		mustCreateNode(t, s, n)
	}
	node("in", []string{"a"}, []string{"gpu", "big"})
	node("other-group", []string{"b"}, []string{"gpu"})
	node("no-group", nil, []string{"gpu"})
	node("no-tags", []string{"a"}, nil)
	node("assigned", []string{"b"}, nil)

	grouped := newSuite("grouped")
	grouped.Spec.Group, grouped.Spec.Tags = "a", []string{"gpu"}
	assigned := newSuite("assigned")
	assigned.Spec.Group, assigned.AssignedNodes = "a", []string{"assigned"}
	stopped := newSuite("stopped")
	stopped.StoppedNodes = []string{"in"}
	for _, su := range []store.Suite{grouped, assigned, stopped} {
		mustCreateSuite(t, s, su)
		mustAddTasks(t, s, su.ID, newTasks(su.ID, 2)...)
	}

	for _, tc := range []struct {
		suite, node string
		max         int
		want        error // nil: it claims
	}{
		{"grouped", "in", 1, nil},
		{"grouped", "other-group", 1, errdefs.ErrPermission},
		{"grouped", "other-group", 0, errdefs.ErrPermission},
		{"grouped", "no-group", 1, errdefs.ErrPermission},
		{"grouped", "no-tags", 1, errdefs.ErrPermission},
		{"grouped", "unregistered", 1, errdefs.ErrPermission},
		{"assigned", "in", 1, errdefs.ErrPermission},
		{"assigned", "assigned", 1, nil}, // an assignment overrides group and tags
		{"stopped", "in", 1, errdefs.ErrPermission},
		{"stopped", "no-tags", 1, nil},
		{"ghost", "in", 1, errdefs.ErrNotFound},
	} {
		t.Run(tc.suite+"/"+tc.node, func(t *testing.T) {
			var before api.TaskCounts
			if tc.suite != "ghost" {
				before = mustGetSuite(t, s, tc.suite).Counts
			}
			got, err := s.ClaimTasks(t.Context(), tc.suite, tc.node, tc.max)
			switch {
			case tc.want == nil && (err != nil || len(got) != tc.max):
				t.Fatalf("ClaimTasks(%q, %q, %d) = %d tasks, %v; want %d, nil", tc.suite, tc.node, tc.max, len(got), err, tc.max)
			case tc.want != nil && (!errors.Is(err, tc.want) || len(got) != 0):
				t.Fatalf("ClaimTasks(%q, %q, %d) = %d tasks, %v; want none, %v", tc.suite, tc.node, tc.max, len(got), err, tc.want)
			case tc.want != nil && tc.suite != "ghost":
				if after := mustGetSuite(t, s, tc.suite).Counts; after != before {
					t.Errorf("counts of %q after a refused claim = %+v, want %+v", tc.suite, after, before)
				}
			}
		})
	}
	// Taking the node out of the group takes the suite away at once.
	n := mustGetNode(t, s, "in")
	if _, err := s.UpdateNode(t.Context(), n.ID, func(n *store.Node) error { n.Groups = []string{"b"}; return nil }); err != nil {
		t.Fatalf("UpdateNode(%q) = %v", n.ID, err)
	}
	if got, err := s.ClaimTasks(t.Context(), "grouped", "in", 1); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("ClaimTasks(%q, %q) after leaving the group = %d tasks, %v; want %v", "grouped", "in", len(got), err, errdefs.ErrPermission)
	}
}

func testClaimTasksConcurrent(t *testing.T, s store.Store) {
	const tasks, claimers = 1000, 8
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", tasks)...)

	for i := range claimers {
		RegisterNodes(t, s, fmt.Sprintf("n%d", i))
	}
	var wg sync.WaitGroup
	claimed := make([][]store.Task, claimers)
	errs := make([]error, claimers)
	for i := range claimers {
		wg.Go(func() {
			node := fmt.Sprintf("n%d", i)
			for round := 0; ; round++ {
				got, err := s.ClaimTasks(t.Context(), "s1", node, 1+(i+round)%13)
				if err != nil {
					errs[i] = err
					return
				}
				if len(got) == 0 {
					return
				}
				claimed[i] = append(claimed[i], got...)
			}
		})
	}
	wg.Wait()

	seen := map[string]string{}
	for i, got := range claimed {
		node := fmt.Sprintf("n%d", i)
		if errs[i] != nil {
			t.Errorf("ClaimTasks(%q) = %v, want nil", node, errs[i])
		}
		for _, tk := range got {
			if other, ok := seen[tk.ID]; ok {
				t.Errorf("task %s claimed by %s and %s", tk.ID, other, node)
			}
			seen[tk.ID] = node
			if tk.NodeID != node || tk.Attempt != 1 {
				t.Errorf("task %s claimed by %s: node %q, attempt %d; want %q, 1", tk.ID, node, tk.NodeID, tk.Attempt, node)
			}
		}
	}
	if len(seen) != tasks {
		t.Errorf("%d claimers claimed %d tasks, want %d", claimers, len(seen), tasks)
	}
	if got := mustGetSuite(t, s, "s1").Counts; got != (api.TaskCounts{Running: tasks}) {
		t.Errorf("GetSuite(%q).Counts = %+v, want %d Running", "s1", got, tasks)
	}
	running, err := s.ListTasks(t.Context(), store.TaskFilter{SuiteID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range running {
		if tk.NodeID != seen[tk.ID] {
			t.Errorf("GetTask(%q).NodeID = %q, want %q, the node that claimed it", tk.ID, tk.NodeID, seen[tk.ID])
		}
	}
}

func testFinishSucceeded(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 2)...)
	c := mustClaim(t, s, "s1", "n1", 2)

	r0 := succeeded(c[0])
	r0.Result.NodeID = "someone-else" // the store knows better: the reporting node
	r1 := succeeded(c[1])
	r1.Result.FinishedAt = time.Time{} // zero: now
	mustFinish(t, s, "n1", 2, nil, r0, r1)

	got := mustGetTask(t, s, c[0].ID)
	wantResult := r0.Result
	wantResult.NodeID = "n1"
	want := c[0]
	want.State = api.TaskFinished
	want.Result = &wantResult
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Task{}, "UpdatedAt")); diff != "" {
		t.Errorf("GetTask(%q) after success mismatch (-want +got):\n%s", c[0].ID, diff)
	}
	if got.UpdatedAt.Before(c[0].UpdatedAt) {
		t.Errorf("GetTask(%q).UpdatedAt = %v, want at or after %v", c[0].ID, got.UpdatedAt, c[0].UpdatedAt)
	}
	if got := mustGetTask(t, s, c[1].ID); got.Result == nil || !recent(got.Result.FinishedAt) || got.Result.NodeID != "n1" {
		t.Errorf("GetTask(%q).Result = %+v, want finished about now on n1", c[1].ID, got.Result)
	}
	if got := mustGetSuite(t, s, "s1").Counts; got != (api.TaskCounts{Finished: 2}) {
		t.Errorf("GetSuite(%q).Counts = %+v, want 2 Finished", "s1", got)
	}

	if done, err := s.FinishAttempts(t.Context(), "n1", nil, nil); err != nil || done.Applied != 0 {
		t.Errorf("FinishAttempts(no reports) = %+v, %v, want 0 applied, nil", done, err)
	}
}

func testFinishFirstCommitWins(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 3)...)
	a := mustClaim(t, s, "s1", "n1", 1)[0]
	unchanged := func(when string, want store.Task) {
		t.Helper()
		if diff := cmp.Diff(want, mustGetTask(t, s, want.ID)); diff != "" {
			t.Errorf("GetTask(%q) changed after %s (-want +got):\n%s", want.ID, when, diff)
		}
	}

	wrongAttempt := succeeded(a)
	wrongAttempt.Attempt = 2
	zeroAttempt := succeeded(a)
	zeroAttempt.Attempt = 0
	for _, tc := range []struct {
		name   string
		node   string
		report store.Attempt
	}{
		{"another node", "n2", succeeded(a)},
		{"another node failing", "n2", failed(a, "x")},
		{"another node stopping", "n2", stopped(a)},
		{"a later attempt", "n1", wrongAttempt},
		{"an earlier attempt", "n1", zeroAttempt},
		{"an unknown task", "n1", store.Attempt{TaskID: "ghost", Attempt: 1, Outcome: api.OutcomeSucceeded}},
		{"a Ready task", "n1", succeeded(store.Task{ID: "s1-t2", Attempt: 0})},
	} {
		calls := 0
		policy := func(_, _ *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) { calls++; return true, 0 }
		mustFinish(t, s, tc.node, 0, policy, tc.report)
		unchanged("a report from "+tc.name, a)
		if calls != 0 {
			t.Errorf("FinishAttempts() with a report from %s called the abort policy %d times, want 0", tc.name, calls)
		}
	}

	// The first report wins; the same one again, or another outcome for
	// the same attempt, counts for nothing.
	first := succeeded(a)
	mustFinish(t, s, "n1", 1, nil, first)
	done := mustGetTask(t, s, a.ID)
	again := succeeded(a)
	again.Result.Stdout = "second\n"
	mustFinish(t, s, "n1", 0, nil, again, failed(a, "late"), stopped(a))
	unchanged("duplicate reports", done)

	// After the node lost the task, its late reports do not count, and the
	// attempt that holds the task now finishes it.
	b := mustClaim(t, s, "s1", "n1", 1)[0]
	mustReclaim(t, s, "n1", 1)
	b2 := mustClaim(t, s, "s1", "n2", 1)[0]
	if b2.ID != b.ID || b2.Attempt != 2 {
		t.Fatalf("ClaimTasks() after reclaim = %s attempt %d, want %s attempt 2", b2.ID, b2.Attempt, b.ID)
	}
	stale := failed(b, "lost")
	staleOnNew := succeeded(b)
	// One batch: stale reports around the good one, and the good one twice.
	fin, err := s.FinishAttempts(t.Context(), "n2", []store.Attempt{staleOnNew, succeeded(b2), succeeded(b2)}, nil)
	if done := fin; err != nil || done.Applied != 1 {
		t.Errorf("FinishAttempts(n2: stale, good, duplicate) = %+v, %v, want 1 applied, nil", done, err)
	}
	mustFinish(t, s, "n1", 0, nil, stale)
	if got := mustGetTask(t, s, b.ID); got.State != api.TaskFinished || len(got.Failures) != 0 || got.Result.NodeID != "n2" {
		t.Errorf("GetTask(%q) = %q, %d failures, result from %q; want %q, none, from n2", b.ID, got.State, len(got.Failures), got.Result.NodeID, api.TaskFinished)
	}
}

// testFinishFirstInBatchWins: within one batch, as across batches, the
// first report of an attempt is the one that counts, whatever the outcomes.
func testFinishFirstInBatchWins(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 4)...)
	c := mustClaim(t, s, "s1", "n1", 4)
	second := succeeded(c[3])
	second.Result.Stdout = "second\n"
	mustFinish(t, s, "n1", 4, abortAfter(1),
		failed(c[0], "first"), succeeded(c[0]),
		stopped(c[1]), failed(c[1], "second"),
		succeeded(c[2]), stopped(c[2]),
		succeeded(c[3]), second)
	for i, want := range []struct {
		state    string
		failures int
		result   string // the Stdout or, for failures, the Stderr of the result kept
	}{
		{api.TaskFailed, 1, "first"},
		{api.TaskReady, 0, ""},
		{api.TaskFinished, 0, "ok\n"},
		{api.TaskFinished, 0, "ok\n"},
	} {
		got := mustGetTask(t, s, c[i].ID)
		var result string
		if got.Result != nil {
			result = got.Result.Stdout + got.Result.Stderr
		}
		if got.State != want.state || len(got.Failures) != want.failures || result != want.result {
			t.Errorf("GetTask(%q) = %q, %d failures, result %q; want %q, %d, %q",
				c[i].ID, got.State, len(got.Failures), result, want.state, want.failures, want.result)
		}
	}
}

// testFinishLargeBatch reports a thousand attempts at once, of every outcome.
func testFinishLargeBatch(t *testing.T, s store.Store) {
	const n = 1000
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", n)...)
	c := mustClaim(t, s, "s1", "n1", n)
	var reports []store.Attempt
	var want api.TaskCounts
	for i, tk := range c {
		switch i % 4 {
		case 0, 1:
			reports = append(reports, succeeded(tk))
			want.Finished++
		case 2:
			reports = append(reports, failed(tk, fmt.Sprint(i)))
			if i%8 == 2 {
				want.Failed++
			} else {
				want.Ready++
			}
		case 3:
			reports = append(reports, stopped(tk))
			want.Ready++
		}
	}
	giveUpEvery8th := func(_, _ *api.RetryPolicy, f []api.TaskFailure) (bool, time.Duration) {
		var i int
		fmt.Sscan(f[len(f)-1].Reason, &i)
		return i%8 == 2, 0
	}
	mustFinish(t, s, "n1", n, giveUpEvery8th, reports...)
	if got := mustGetSuite(t, s, "s1").Counts; got != want {
		t.Errorf("GetSuite(%q).Counts after a batch of %d = %+v, want %+v", "s1", n, got, want)
	}
	for i, want := range map[int]string{0: api.TaskFinished, 1: api.TaskFinished, 2: api.TaskFailed,
		3: api.TaskReady, 6: api.TaskReady, n - 1: api.TaskReady} {
		if got := mustGetTask(t, s, c[i].ID); got.State != want {
			t.Errorf("GetTask(%q) after a batch of %d = %q, want %q", c[i].ID, n, got.State, want)
		}
	}
}

func testFinishFailed(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 2)...)

	var seen [][]api.TaskFailure
	policy := func(_, _ *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
		seen = append(seen, failures)
		return len(failures) >= 3, 0
	}
	var want []api.TaskFailure
	nodes := []string{"n1", "n2", "n3"}
	for i, node := range nodes {
		tk := mustClaim(t, s, "s1", node, 1)[0]
		if tk.ID != "s1-t0" || tk.Attempt != i+1 {
			t.Fatalf("ClaimTasks() = %s attempt %d, want s1-t0 attempt %d", tk.ID, tk.Attempt, i+1)
		}
		report := failed(tk, fmt.Sprintf("exit status %d", i))
		wantFailure := *report.Failure
		if i == 1 {
			// Without a Failure, the failure is the result's.
			report.Failure = nil
			report.Result = api.TaskResult{ExitCode: -1, Signal: "SIGSEGV", Stdout: "out", Stderr: "err", FinishedAt: t0}
			wantFailure = api.TaskFailure{ExitCode: -1, Signal: "SIGSEGV", Stdout: "out", Stderr: "err"}
		}
		// The store says which attempt on which node failed.
		report.Failure = withNode(report.Failure, "liar", 99)
		wantFailure.Attempt, wantFailure.NodeID = i+1, node
		want = append(want, wantFailure)
		mustFinish(t, s, node, 1, policy, report)

		got := mustGetTask(t, s, "s1-t0")
		opts := cmpopts.IgnoreFields(api.TaskFailure{}, "At")
		if diff := cmp.Diff(want, got.Failures, opts); diff != "" {
			t.Errorf("GetTask(%q).Failures after failure %d mismatch (-want +got):\n%s", "s1-t0", i+1, diff)
		}
		if len(seen) != i+1 {
			t.Fatalf("abort policy called %d times after %d failures, want once each", len(seen), i+1)
		}
		if diff := cmp.Diff(got.Failures, seen[i]); diff != "" {
			t.Errorf("abort policy saw failures other than those stored (-stored +seen):\n%s", diff)
		}
		if i == 1 {
			if !recent(got.Failures[1].At) {
				t.Errorf("failure without a time: At = %v, want about now", got.Failures[1].At)
			}
		} else if !got.Failures[i].At.Equal(t0) {
			t.Errorf("failure %d: At = %v, want %v", i+1, got.Failures[i].At, t0)
		}

		wantState, wantResult := api.TaskReady, (*api.TaskResult)(nil)
		if i == len(nodes)-1 {
			// Given up: the last attempt's result stays.
			wantState = api.TaskFailed
			r := report.Result
			r.NodeID = node
			wantResult = &r
		}
		if got.State != wantState || got.Attempt != i+1 || got.NodeID != node {
			t.Errorf("GetTask(%q) after failure %d = %q, attempt %d, node %q; want %q, %d, %q",
				"s1-t0", i+1, got.State, got.Attempt, got.NodeID, wantState, i+1, node)
		}
		if diff := cmp.Diff(wantResult, got.Result); diff != "" {
			t.Errorf("GetTask(%q).Result after failure %d mismatch (-want +got):\n%s", "s1-t0", i+1, diff)
		}
	}
	if got, err := s.ClaimTasks(t.Context(), "s1", "n1", 10); err != nil || !cmp.Equal(taskIDs(got), []string{"s1-t1"}) {
		t.Errorf("ClaimTasks() after s1-t0 failed for good = %q, %v, want only s1-t1", taskIDs(got), err)
	}

	// A nil policy never gives up.
	for i := range 5 {
		tk := mustGetTask(t, s, "s1-t1")
		if i > 0 {
			tk = mustClaim(t, s, "s1", "n1", 1)[0]
		}
		mustFinish(t, s, "n1", 1, nil, failed(tk, "again"))
	}
	if got := mustGetTask(t, s, "s1-t1"); got.State != api.TaskReady || got.Attempt != 5 || len(got.Failures) != 5 || got.Result != nil {
		t.Errorf("GetTask(%q) after 5 failures with no policy = %q, attempt %d, %d failures, result %v; want %q, 5, 5, none",
			"s1-t1", got.State, got.Attempt, len(got.Failures), got.Result, api.TaskReady)
	}
}

// withNode is a copy of f claiming another attempt and node.
func withNode(f *api.TaskFailure, node string, attempt int) *api.TaskFailure {
	if f == nil {
		return nil
	}
	c := *f
	c.NodeID, c.Attempt = node, attempt
	return &c
}

func testFinishStopped(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 1)...)
	tk := mustClaim(t, s, "s1", "n1", 1)[0]
	calls := 0
	mustFinish(t, s, "n1", 1, func(_, _ *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) { calls++; return true, 0 }, stopped(tk))

	got := mustGetTask(t, s, tk.ID)
	want := tk
	want.State = api.TaskReady
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Task{}, "UpdatedAt")); diff != "" {
		t.Errorf("GetTask(%q) after a stop mismatch (-want +got):\n%s", tk.ID, diff)
	}
	if calls != 0 {
		t.Errorf("abort policy called %d times for a stop, want 0", calls)
	}
	// The attempt stays counted: the next claim is attempt 2.
	if again := mustClaim(t, s, "s1", "n2", 1); len(again) != 1 || again[0].Attempt != 2 {
		t.Errorf("ClaimTasks() after a stop = %+v, want attempt 2", again)
	}
}

func testFinishInvalid(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 1)...)
	tk := mustClaim(t, s, "s1", "n1", 1)[0]
	bad := succeeded(tk)
	bad.Outcome = "exploded"
	done, err := s.FinishAttempts(t.Context(), "n1", []store.Attempt{succeeded(tk), bad}, nil)
	if !errors.Is(err, errdefs.ErrInvalid) || done.Applied != 0 {
		t.Errorf("FinishAttempts() with outcome %q = %+v, %v, want 0 applied, %v", bad.Outcome, done, err, errdefs.ErrInvalid)
	}
	if diff := cmp.Diff(tk, mustGetTask(t, s, tk.ID)); diff != "" {
		t.Errorf("GetTask(%q) after a refused batch changed (-before +after):\n%s", tk.ID, diff)
	}
}

func testReturnTasks(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 6)...)
	c := mustClaim(t, s, "s1", "n1", 3) // t0 t1 t2
	// t0 has failed once: it is at attempt 2 when returned.
	mustFinish(t, s, "n1", 1, nil, failed(c[0], "x"))
	t0 := mustClaim(t, s, "s1", "n1", 1)[0]
	if t0.ID != "s1-t0" || t0.Attempt != 2 {
		t.Fatalf("ClaimTasks() = %s attempt %d, want s1-t0 attempt 2", t0.ID, t0.Attempt)
	}
	onN2 := mustClaim(t, s, "s1", "n2", 1)[0] // t3

	ids := []string{"s1-t0", "s1-t1", "ghost", "s1-t4", onN2.ID}
	n, err := s.ReturnTasks(t.Context(), "n1", ids)
	if err != nil || n != 2 {
		t.Fatalf("ReturnTasks(%q, %q) = %d, %v, want 2, nil", "n1", ids, n, err)
	}
	for id, want := range map[string]struct {
		state   string
		attempt int
	}{
		"s1-t0": {api.TaskReady, 1}, // its failure stays, and the attempt that failed
		"s1-t1": {api.TaskReady, 0},
		"s1-t2": {api.TaskRunning, 1},
		"s1-t3": {api.TaskRunning, 1},
		"s1-t4": {api.TaskReady, 0},
	} {
		got := mustGetTask(t, s, id)
		if got.State != want.state || got.Attempt != want.attempt {
			t.Errorf("GetTask(%q) after ReturnTasks = %q, attempt %d; want %q, %d", id, got.State, got.Attempt, want.state, want.attempt)
		}
	}
	if got := mustGetTask(t, s, "s1-t0"); len(got.Failures) != 1 {
		t.Errorf("GetTask(%q) after ReturnTasks has %d failures, want 1", "s1-t0", len(got.Failures))
	}
	// A report for a returned attempt counts for nothing.
	mustFinish(t, s, "n1", 0, nil, succeeded(t0))
	// Returned tasks go out again in their old place, at the next attempt.
	again := mustClaim(t, s, "s1", "n3", 2)
	if diff := cmp.Diff([]string{"s1-t0", "s1-t1"}, taskIDs(again)); diff != "" {
		t.Errorf("ClaimTasks() after ReturnTasks IDs mismatch (-want +got):\n%s", diff)
	}
	if again[0].Attempt != 2 || again[1].Attempt != 1 {
		t.Errorf("ClaimTasks() after ReturnTasks attempts = %d, %d, want 2, 1", again[0].Attempt, again[1].Attempt)
	}

	if n, err := s.ReturnTasks(t.Context(), "n1", nil); err != nil || n != 0 {
		t.Errorf("ReturnTasks(%q, nil) = %d, %v, want 0, nil", "n1", n, err)
	}
}

// runningOnTwoNodes makes suites s1 (four tasks) and s2 (one) with work
// on two nodes: n1 claimed s1-t0..t2 and finished t0, and claimed s2-t0;
// n2 runs s1-t3. It returns n1's claims in s1 and n2's task.
func runningOnTwoNodes(t *testing.T, s store.Store) (n1 []store.Task, n2 store.Task) {
	t.Helper()
	mustCreateSuite(t, s, newSuite("s1"))
	mustCreateSuite(t, s, newSuite("s2"))
	mustAddTasks(t, s, "s1", newTasks("s1", 4)...)
	mustAddTasks(t, s, "s2", newTasks("s2", 1)...)
	n1 = mustClaim(t, s, "s1", "n1", 3)
	mustClaim(t, s, "s2", "n1", 1)
	n2 = mustClaim(t, s, "s1", "n2", 1)[0]
	mustFinish(t, s, "n1", 1, nil, succeeded(n1[0]))
	return n1, n2
}

// checkFirstAttempts fails t unless each task, after the reclaim named by
// after, is in its state and still on attempt 1: a reclaim counts no
// attempt.
func checkFirstAttempts(t *testing.T, s store.Store, after string, states map[string]string) {
	t.Helper()
	for id, want := range states {
		got := mustGetTask(t, s, id)
		if got.State != want || got.Attempt != 1 {
			t.Errorf("GetTask(%q) after %s = %q, attempt %d; want %q, 1 (attempts stay counted)", id, after, got.State, got.Attempt, want)
		}
	}
}

func testReclaimNode(t *testing.T, s store.Store) {
	c, n2 := runningOnTwoNodes(t, s)

	mustReclaim(t, s, "n1", 3)
	checkFirstAttempts(t, s, "ReclaimNode", map[string]string{
		"s1-t0": api.TaskFinished, "s1-t1": api.TaskReady, "s1-t2": api.TaskReady,
		"s2-t0": api.TaskReady, "s1-t3": api.TaskRunning,
	})
	if got := mustGetTask(t, s, n2.ID); got.NodeID != "n2" {
		t.Errorf("GetTask(%q).NodeID = %q, want %q", n2.ID, got.NodeID, "n2")
	}
	// The lost node's late failure counts for nothing; its late success
	// finishes the task (FinishLostAttemptWins).
	mustFinish(t, s, "n1", 1, nil, succeeded(c[1]), failed(c[2], "late"))
	if got := mustGetTask(t, s, c[2].ID); len(got.Failures) != 0 || got.State != api.TaskReady {
		t.Errorf("GetTask(%q) = %s with %d failures after a late failure, want Ready with 0", c[2].ID, got.State, len(got.Failures))
	}

	for _, node := range []string{"n1", "ghost"} {
		if n, err := s.ReclaimNode(t.Context(), node); err != nil || n != 0 {
			t.Errorf("ReclaimNode(%q) with nothing running = %d, %v, want 0, nil", node, n, err)
		}
	}
}

// testReclaimNodeKeeps: an agent that reconnects keeps the tasks it still
// holds; the rest go back.
func testReclaimNodeKeeps(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 4)...)
	c := mustClaim(t, s, "s1", "n1", 4)
	n, err := s.ReclaimNode(t.Context(), "n1", c[1].ID, c[3].ID, "not-a-task")
	if err != nil || n != 2 {
		t.Fatalf("ReclaimNode(n1, keep 2) = %d, %v, want 2, nil", n, err)
	}
	for i, want := range []string{api.TaskReady, api.TaskRunning, api.TaskReady, api.TaskRunning} {
		if got := mustGetTask(t, s, c[i].ID); got.State != want {
			t.Errorf("GetTask(%q) = %s, want %s", c[i].ID, got.State, want)
		}
	}
	su, err := s.GetSuite(t.Context(), "s1")
	if err != nil || su.Counts.Ready != 2 || su.Counts.Running != 2 {
		t.Errorf("counts after a partial reclaim = %+v, %v; want 2 ready, 2 running", su.Counts, err)
	}
}

// testReclaimSuiteTasks: a node that left a suite gives back that suite's
// tasks still Running on it, and only those; attempts stay counted and the
// lost attempt's late success still wins, as with ReclaimNode.
func testReclaimSuiteTasks(t *testing.T, s store.Store) {
	c, _ := runningOnTwoNodes(t, s)

	n, err := s.ReclaimSuiteTasks(t.Context(), "s1", "n1")
	if err != nil || n != 2 {
		t.Fatalf("ReclaimSuiteTasks(s1, n1) = %d, %v, want 2, nil", n, err)
	}
	checkFirstAttempts(t, s, "ReclaimSuiteTasks", map[string]string{
		"s1-t0": api.TaskFinished, "s1-t1": api.TaskReady, "s1-t2": api.TaskReady,
		"s2-t0": api.TaskRunning, "s1-t3": api.TaskRunning,
	})
	if got := mustGetTask(t, s, c[1].ID); got.NodeID != "n1" {
		t.Errorf("GetTask(%q).NodeID = %q, want %q", c[1].ID, got.NodeID, "n1")
	}
	su, err := s.GetSuite(t.Context(), "s1")
	if err != nil || su.Counts.Ready != 2 || su.Counts.Running != 1 || su.Counts.Finished != 1 {
		t.Errorf("s1 counts after ReclaimSuiteTasks = %+v, %v; want 2 ready, 1 running, 1 finished", su.Counts, err)
	}
	// The late success of the lost attempt finishes the task.
	mustFinish(t, s, "n1", 1, nil, succeeded(c[1]))
	if got := mustGetTask(t, s, c[1].ID); got.State != api.TaskFinished {
		t.Errorf("GetTask(%q) after the lost attempt's late success = %s, want %s", c[1].ID, got.State, api.TaskFinished)
	}

	for _, tc := range []struct{ suite, node string }{{"s1", "n1"}, {"s2", "n2"}, {"ghost", "n1"}, {"s1", "ghost"}} {
		if n, err := s.ReclaimSuiteTasks(t.Context(), tc.suite, tc.node); err != nil || n != 0 {
			t.Errorf("ReclaimSuiteTasks(%q, %q) with nothing running = %d, %v, want 0, nil", tc.suite, tc.node, n, err)
		}
	}
}

func testCancelTask(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 5)...)
	c := mustClaim(t, s, "s1", "n1", 3)
	mustFinish(t, s, "n1", 2, abortAfter(1), succeeded(c[0]), failed(c[1], "x"))
	running, ready := c[2], mustGetTask(t, s, "s1-t3")

	for _, before := range []store.Task{ready, running} {
		got, err := s.CancelTask(t.Context(), before.ID)
		if err != nil {
			t.Fatalf("CancelTask(%q) = %v, want nil", before.ID, err)
		}
		if diff := cmp.Diff(before, got); diff != "" {
			t.Errorf("CancelTask(%q) did not return the task as it was (-before +got):\n%s", before.ID, diff)
		}
		if after := mustGetTask(t, s, before.ID); after.State != api.TaskCancelled || after.NodeID != before.NodeID || after.Attempt != before.Attempt {
			t.Errorf("GetTask(%q) after CancelTask = %q, node %q, attempt %d; want %q, %q, %d",
				before.ID, after.State, after.NodeID, after.Attempt, api.TaskCancelled, before.NodeID, before.Attempt)
		}
	}
	// The node still running it reports too late.
	mustFinish(t, s, "n1", 0, nil, succeeded(running))

	for _, id := range []string{c[0].ID, c[1].ID, running.ID} { // Finished, Failed, Cancelled
		before := mustGetTask(t, s, id)
		if _, err := s.CancelTask(t.Context(), id); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("CancelTask(%q) of a %s task = %v, want %v", id, before.State, err, errdefs.ErrConflict)
		}
		if diff := cmp.Diff(before, mustGetTask(t, s, id)); diff != "" {
			t.Errorf("GetTask(%q) after a refused cancel changed (-before +after):\n%s", id, diff)
		}
	}
	if _, err := s.CancelTask(t.Context(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("CancelTask(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
	// Cancelled tasks are not claimed.
	if got := mustClaim(t, s, "s1", "n2", 10); !cmp.Equal(taskIDs(got), []string{"s1-t4"}) {
		t.Errorf("ClaimTasks() after cancels = %q, want [s1-t4]", taskIDs(got))
	}
}

func testNodeCurrentSuite(t *testing.T, s store.Store) {
	n := newNode("n1")
	n.CurrentSuite = "s1"
	if got := mustCreateNode(t, s, n); got.CurrentSuite != "s1" {
		t.Errorf("CreateNode(%q).CurrentSuite = %q, want %q", "n1", got.CurrentSuite, "s1")
	}
	check := func(when, want string) {
		t.Helper()
		if got := mustGetNode(t, s, "n1").CurrentSuite; got != want {
			t.Errorf("GetNode(%q).CurrentSuite %s = %q, want %q", "n1", when, got, want)
		}
		nodes, err := s.ListNodes(t.Context(), store.NodeFilter{})
		if err != nil || len(nodes) != 1 || nodes[0].CurrentSuite != want {
			t.Errorf("ListNodes() %s = %+v, %v, want n1 on suite %q", when, nodes, err, want)
		}
	}
	check("after creation", "s1")

	beat := func(at time.Time, suite string) {
		t.Helper()
		if err := s.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: "n1", At: at, AgentState: api.AgentIdle, SuiteID: suite}}); err != nil {
			t.Fatalf("RecordHeartbeats(%v, suite %q) = %v", at, suite, err)
		}
	}
	beat(t0.Add(time.Minute), "s2")
	check("after a heartbeat", "s2")
	beat(t0, "s3") // older than the last: ignored
	check("after an old heartbeat", "s2")
	beat(t0.Add(2*time.Minute), "")
	check("after an idle heartbeat", "")

	if _, err := s.UpdateNode(t.Context(), "n1", func(n *store.Node) error { n.CurrentSuite = "s4"; return nil }); err != nil {
		t.Fatalf("UpdateNode(%q) = %v", "n1", err)
	}
	check("after UpdateNode", "s4")
}

// lostAttempts makes suite s1 with three tasks that n1 claimed and then
// lost to a reclaim, and has n2 claim the first of them again: n1's
// attempts are late, n2's is the live one.
func lostAttempts(t *testing.T, s store.Store) (lost []store.Task, rerun store.Task) {
	t.Helper()
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 3)...)
	lost = mustClaim(t, s, "s1", "n1", 3)
	mustReclaim(t, s, "n1", 3)
	return lost, mustClaim(t, s, "s1", "n2", 1)[0]
}

// A node declared offline may have been cut off, not dead: the attempt it
// lost can still finish, and the first completion wins, whether the task
// is Ready again or running its re-run elsewhere.
func testFinishLostAttemptWins(t *testing.T, s store.Store) {
	// t0 is re-run on n2; t1 waits in the queue; t2 is re-run and
	// finishes there first.
	lost, rerun := lostAttempts(t, s)
	if rerun.ID != "s1-t0" || rerun.Attempt != 2 {
		t.Fatalf("ClaimTasks(n2) = %s attempt %d, want s1-t0 attempt 2", rerun.ID, rerun.Attempt)
	}
	second := mustClaim(t, s, "s1", "n3", 2)
	mustFinish(t, s, "n3", 1, nil, succeeded(task(second, "s1-t2")))
	mustFinish(t, s, "n3", 1, nil, stopped(task(second, "s1-t1"))) // back to Ready

	// A late failure does not count; late successes do, first wins.
	mustFinish(t, s, "n1", 0, abortAfter(1), failed(task(lost, "s1-t1"), "late"))
	done := mustFinish(t, s, "n1", 2, nil,
		succeeded(task(lost, "s1-t0")), succeeded(task(lost, "s1-t1")), succeeded(task(lost, "s1-t2")))
	want := []store.Superseded{{TaskID: "s1-t0", NodeID: "n2", Attempt: 2}}
	if diff := cmp.Diff(want, done.Superseded); diff != "" {
		t.Errorf("FinishAttempts(late successes).Superseded (-want +got):\n%s", diff)
	}
	for _, id := range []string{"s1-t0", "s1-t1"} {
		got := mustGetTask(t, s, id)
		if got.State != api.TaskFinished || got.Result == nil || got.Result.NodeID != "n1" || got.NodeID != "n1" {
			t.Errorf("GetTask(%s) = %s, result %+v on %s; want Finished by n1", id, got.State, got.Result, got.NodeID)
		}
	}
	if got := mustGetTask(t, s, "s1-t2"); got.Result == nil || got.Result.NodeID != "n3" {
		t.Errorf("GetTask(s1-t2).Result = %+v, want n3's, which came first", got.Result)
	}
	// The superseded re-run's report, when it comes, counts for nothing.
	mustFinish(t, s, "n2", 0, nil, succeeded(rerun))
	if got := mustGetSuite(t, s, "s1").Counts; got != (api.TaskCounts{Finished: 3}) {
		t.Errorf("GetSuite(s1).Counts = %+v, want 3 Finished", got)
	}
	// A lost attempt counts once: the same late success again does nothing.
	mustFinish(t, s, "n1", 0, nil, succeeded(task(lost, "s1-t0")))
}

// A counted failure holds the task back for the pause the policy asks for.
func testRetryWaits(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 2)...)
	both := mustClaim(t, s, "s1", "n1", 2)
	var waits []int
	policy := func(_, _ *api.RetryPolicy, f []api.TaskFailure) (bool, time.Duration) {
		waits = append(waits, len(f))
		if f[len(f)-1].Reason == "slow" {
			return false, time.Hour
		}
		return false, 0
	}
	mustFinish(t, s, "n1", 2, policy, failed(task(both, "s1-t0"), "slow"), failed(task(both, "s1-t1"), "fast"))
	if len(waits) != 2 {
		t.Fatalf("retry policy called %d times, want 2", len(waits))
	}
	got := mustClaim(t, s, "s1", "n1", 2)
	if len(got) != 1 || got[0].ID != "s1-t1" {
		t.Fatalf("ClaimTasks() = %v, want only s1-t1: s1-t0 waits an hour", taskIDs(got))
	}
	if c := mustGetSuite(t, s, "s1").Counts; c.Ready != 1 || c.Running != 1 {
		t.Errorf("GetSuite(s1).Counts = %+v, want 1 Ready (waiting), 1 Running", c)
	}
}

// An agent that comes back holding tasks taken from it gets them back,
// unless they run elsewhere meanwhile.
func testReattachTasks(t *testing.T, s store.Store) {
	held, elsewhere := lostAttempts(t, s)
	n, err := s.ReattachTasks(t.Context(), "n1", []string{"s1-t0", "s1-t1", "s1-t2", "ghost"})
	if err != nil || n != 2 {
		t.Fatalf("ReattachTasks(n1) = %d, %v, want 2 (one runs on n2), nil", n, err)
	}
	if n, err := s.ReattachTasks(t.Context(), "n3", []string{elsewhere.ID}); err != nil || n != 0 {
		t.Errorf("ReattachTasks(n3, a task it never had) = %d, %v, want 0, nil", n, err)
	}
	for _, tk := range held {
		if tk.ID == elsewhere.ID {
			continue
		}
		got := mustGetTask(t, s, tk.ID)
		if got.State != api.TaskRunning || got.NodeID != "n1" || got.Attempt != tk.Attempt {
			t.Errorf("GetTask(%s) = %s on %s attempt %d, want Running on n1 attempt %d", tk.ID, got.State, got.NodeID, got.Attempt, tk.Attempt)
		}
		mustFinish(t, s, "n1", 1, nil, succeeded(tk))
	}
	if c := mustGetSuite(t, s, "s1").Counts; c != (api.TaskCounts{Running: 1, Finished: 2}) {
		t.Errorf("GetSuite(s1).Counts = %+v, want 1 Running, 2 Finished", c)
	}
}
