package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// newSuite is a minimal Open suite named after its ID.
func newSuite(id string) store.Suite {
	return store.Suite{
		ID:    id,
		Spec:  api.SuiteSpec{Name: "suite-" + id, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
		State: api.SuiteOpen,
		Owner: "alice",
	}
}

func mustCreateSuite(t *testing.T, s store.Store, su store.Suite) {
	t.Helper()
	if err := s.CreateSuite(t.Context(), su); err != nil {
		t.Fatalf("CreateSuite(%q) = %v, want nil", su.ID, err)
	}
}

func mustGetSuite(t *testing.T, s store.Store, id string) store.Suite {
	t.Helper()
	su, err := s.GetSuite(t.Context(), id)
	if err != nil {
		t.Fatalf("GetSuite(%q) = %v, want nil", id, err)
	}
	return su
}

// setSuiteState moves a suite to state with UpdateSuite.
func setSuiteState(t *testing.T, s store.Store, id, state string) store.Suite {
	t.Helper()
	su, err := s.UpdateSuite(t.Context(), id, func(su *store.Suite) error {
		su.State = state
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSuite(%q) to %s = %v, want nil", id, state, err)
	}
	return su
}

func suiteIDs(suites []store.Suite) []string {
	return idsOf(suites, func(su store.Suite) string { return su.ID })
}

func testCreateSuite(t *testing.T, s store.Store) {
	prefetch := 8
	in := store.Suite{
		ID: "s1",
		Spec: api.SuiteSpec{
			Name:        "fuzz",
			Description: "fuzz the parser",
			Group:       "ml",
			Tags:        []string{"gpu"},
			Labels:      map[string]string{"team": "x"},
			Priority:    5,
			WorkerSchedule: api.WorkerSchedule{
				WorkerCount:       4,
				CPUBinding:        &api.CPUBinding{Cores: []int{0, 1, 2, 3}, Strategy: api.BindExclusive},
				TaskPrefetchCount: &prefetch,
				WorkerCommand:     []string{"./worker", "--fast"},
			},
			Hooks: api.Hooks{
				Prepare: &api.Hook{
					Command:   []string{"make"},
					Env:       map[string]string{"CC": "clang"},
					Resources: []api.Resource{{URL: "https://example.com/corpus.tar", Path: "corpus.tar"}},
					Timeout:   api.Duration(time.Minute),
				},
			},
		},
		State:         api.SuiteOpen,
		Owner:         "alice",
		AssignedNodes: []string{"n1", "n2"},
		Counts:        api.TaskCounts{Ready: 7}, // computed: ignored
		CreatedAt:     t0,
	}
	mustCreateSuite(t, s, in)
	got := mustGetSuite(t, s, "s1")
	want := in
	want.Counts = api.TaskCounts{}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Suite{}, "UpdatedAt")); diff != "" {
		t.Errorf("GetSuite(%q) mismatch (-want +got):\n%s", "s1", diff)
	}
	if !recent(got.UpdatedAt) || !got.LastTaskAt.IsZero() {
		t.Errorf("GetSuite(%q): updated at %v, last task at %v; want about now and zero", "s1", got.UpdatedAt, got.LastTaskAt)
	}

	// Defaults: an empty state is Open, a zero creation time now, and nil
	// lists read back empty.
	mustCreateSuite(t, s, store.Suite{ID: "s2", Spec: api.SuiteSpec{Name: "other"}})
	got = mustGetSuite(t, s, "s2")
	if got.State != api.SuiteOpen || !recent(got.CreatedAt) {
		t.Errorf("GetSuite(%q) = state %q, created at %v; want %q, about now", "s2", got.State, got.CreatedAt, api.SuiteOpen)
	}
	if got.AssignedNodes == nil || len(got.AssignedNodes) != 0 {
		t.Errorf("GetSuite(%q).AssignedNodes = %#v, want empty, not nil", "s2", got.AssignedNodes)
	}

	if _, err := s.GetSuite(t.Context(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSuite(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
}

func testCreateSuiteErrors(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("open"))
	closed := newSuite("closed")
	closed.State = api.SuiteClosed
	mustCreateSuite(t, s, closed)

	tests := []struct {
		name string
		in   store.Suite
		want error
	}{
		{"no id", store.Suite{Spec: api.SuiteSpec{Name: "x"}}, errdefs.ErrInvalid},
		{"no name", store.Suite{ID: "x"}, errdefs.ErrInvalid},
		{"unknown state", store.Suite{ID: "x", Spec: api.SuiteSpec{Name: "x"}, State: "Paused"}, errdefs.ErrInvalid},
		{"id taken", store.Suite{ID: "open", Spec: api.SuiteSpec{Name: "fresh"}}, errdefs.ErrConflict},
		{"name of an open suite", store.Suite{ID: "x", Spec: api.SuiteSpec{Name: "suite-open"}}, errdefs.ErrConflict},
		{"name of a closed suite", store.Suite{ID: "x", Spec: api.SuiteSpec{Name: "suite-closed"}}, errdefs.ErrConflict},
		// A finished suite may share a live one's name: it holds none.
		{"complete with a live name", store.Suite{ID: "old", Spec: api.SuiteSpec{Name: "suite-open"}, State: api.SuiteComplete}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.CreateSuite(t.Context(), tc.in); !wantErr(err, tc.want) {
				t.Errorf("CreateSuite(%q, name %q) = %v, want %v", tc.in.ID, tc.in.Spec.Name, err, tc.want)
			}
		})
	}
	if got := mustGetSuite(t, s, "open"); got.Spec.Name != "suite-open" {
		t.Errorf("GetSuite(%q).Spec.Name after clashes = %q, want %q", "open", got.Spec.Name, "suite-open")
	}
	if _, err := s.GetSuite(t.Context(), "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSuite(%q) after refused creates = %v, want %v", "x", err, errdefs.ErrNotFound)
	}

	// A name is free again once its suite is Complete or Cancelled.
	for _, final := range []string{api.SuiteComplete, api.SuiteCancelled} {
		id := "again-" + final
		setSuiteState(t, s, "open", final)
		mustCreateSuite(t, s, store.Suite{ID: id, Spec: api.SuiteSpec{Name: "suite-open"}})
		setSuiteState(t, s, id, final)
	}
	// And a final suite cannot come back to life under a name that is taken.
	mustCreateSuite(t, s, store.Suite{ID: "live", Spec: api.SuiteSpec{Name: "suite-open"}})
	_, err := s.UpdateSuite(t.Context(), "open", func(su *store.Suite) error {
		su.State = api.SuiteOpen
		return nil
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("UpdateSuite(%q) back to Open under a taken name = %v, want %v", "open", err, errdefs.ErrConflict)
	}
	// Nor can a live suite take another's name.
	_, err = s.UpdateSuite(t.Context(), "closed", func(su *store.Suite) error {
		su.Spec.Name = "suite-open"
		return nil
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("UpdateSuite(%q) renamed to a taken name = %v, want %v", "closed", err, errdefs.ErrConflict)
	}
}

func testSuiteByName(t *testing.T, s store.Store) {
	for i, id := range []string{"first", "second", "third"} {
		su := newSuite(id)
		su.Spec.Name = "nightly"
		su.CreatedAt = t0.Add(time.Duration(i) * time.Hour)
		mustCreateSuite(t, s, su)
		if id != "third" {
			setSuiteState(t, s, id, api.SuiteComplete)
		}
	}
	// The newest is found whatever its state; an older live one is not.
	setSuiteState(t, s, "third", api.SuiteCancelled)
	mustCreateSuite(t, s, store.Suite{ID: "other", Spec: api.SuiteSpec{Name: "weekly"}, CreatedAt: t0.Add(time.Hour)})

	got, err := s.SuiteByName(t.Context(), "nightly")
	if err != nil || got.ID != "third" {
		t.Errorf("SuiteByName(%q) = %q, %v, want %q, nil", "nightly", got.ID, err, "third")
	}
	if diff := cmp.Diff(mustGetSuite(t, s, "third"), got); diff != "" {
		t.Errorf("SuiteByName(%q) differs from GetSuite (-get +by name):\n%s", "nightly", diff)
	}
	if _, err := s.SuiteByName(t.Context(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SuiteByName(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
}

func testListSuites(t *testing.T, s store.Store) {
	if got, err := s.ListSuites(t.Context(), store.SuiteFilter{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListSuites() on an empty store = %#v, %v, want empty, not nil", got, err)
	}
	// Highest priority first, then oldest: IDs sort in neither order.
	for _, su := range []store.Suite{
		{ID: "a", Spec: api.SuiteSpec{Priority: 1, Group: "ml"}, State: api.SuiteOpen, CreatedAt: t0.Add(3 * time.Hour)},
		{ID: "b", Spec: api.SuiteSpec{Priority: 1, Group: "web"}, State: api.SuiteClosed, CreatedAt: t0.Add(1 * time.Hour)},
		{ID: "c", Spec: api.SuiteSpec{Priority: 9}, State: api.SuiteComplete, CreatedAt: t0.Add(5 * time.Hour)},
		{ID: "d", Spec: api.SuiteSpec{Priority: 0, Group: "ml"}, State: api.SuiteCancelled, CreatedAt: t0},
		{ID: "e", Spec: api.SuiteSpec{Priority: -2, Group: "ml"}, State: api.SuiteOpen, CreatedAt: t0},
		{ID: "f", Spec: api.SuiteSpec{Priority: 1, Group: "db"}, State: api.SuiteOpen, CreatedAt: t0.Add(2 * time.Hour)},
	} {
		su.Spec.Name = "suite-" + su.ID
		mustCreateSuite(t, s, su)
	}
	tests := []struct {
		name   string
		filter store.SuiteFilter
		want   []string
	}{
		{"all", store.SuiteFilter{}, []string{"c", "b", "f", "a", "d", "e"}},
		{"live", store.SuiteFilter{States: []string{api.SuiteOpen, api.SuiteClosed}}, []string{"b", "f", "a", "e"}},
		{"state", store.SuiteFilter{States: []string{api.SuiteCancelled}}, []string{"d"}},
		{"group", store.SuiteFilter{Groups: []string{"ml"}}, []string{"a", "d", "e"}},
		{"any of groups", store.SuiteFilter{Groups: []string{"web", "db"}}, []string{"b", "f"}},
		{"no group", store.SuiteFilter{Groups: []string{""}}, []string{"c"}},
		{"state and group", store.SuiteFilter{States: []string{api.SuiteOpen}, Groups: []string{"ml"}}, []string{"a", "e"}},
		{"no such state", store.SuiteFilter{States: []string{"Paused"}}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListSuites(t.Context(), tc.filter)
			checkListed(t, fmt.Sprintf("ListSuites(%+v)", tc.filter), got, err, suiteIDs, tc.want)
		})
	}

	// Listed suites carry their counts, as GetSuite has them.
	mustAddTasks(t, s, "a", newTasks("a", 3)...)
	mustAddTasks(t, s, "f", newTasks("f", 2)...)
	n1 := newNode("n1")
	n1.Groups = []string{"db"}
	mustCreateNode(t, s, n1)
	mustClaim(t, s, "f", "n1", 1)
	got, err := s.ListSuites(t.Context(), store.SuiteFilter{States: []string{api.SuiteOpen}})
	if err != nil {
		t.Fatalf("ListSuites(open) = %v", err)
	}
	for _, su := range got {
		if diff := cmp.Diff(mustGetSuite(t, s, su.ID), su); diff != "" {
			t.Errorf("ListSuites() suite %s differs from GetSuite (-get +list):\n%s", su.ID, diff)
		}
	}
	want := map[string]api.TaskCounts{"a": {Ready: 3}, "f": {Ready: 1, Running: 1}, "e": {}}
	for _, su := range got {
		if su.Counts != want[su.ID] {
			t.Errorf("ListSuites() suite %s counts = %+v, want %+v", su.ID, su.Counts, want[su.ID])
		}
	}
}

func testUpdateSuite(t *testing.T, s store.Store) {
	before := newSuite("s1")
	before.CreatedAt = t0
	mustCreateSuite(t, s, before)
	before = mustGetSuite(t, s, "s1")

	got, err := s.UpdateSuite(t.Context(), "s1", func(su *store.Suite) error {
		su.State = api.SuiteClosed
		su.AssignedNodes = []string{"n2", "n1"}
		su.StoppedNodes = []string{"n3"}
		su.Spec.Priority = 3
		su.Spec.Description = "closed by hand"
		su.Counts.Ready = 99 // computed: dropped
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSuite(%q) = %v, want nil", "s1", err)
	}
	want := before
	want.State = api.SuiteClosed
	want.AssignedNodes = []string{"n2", "n1"}
	want.StoppedNodes = []string{"n3"}
	want.Spec.Priority = 3
	want.Spec.Description = "closed by hand"
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Suite{}, "UpdatedAt")); diff != "" {
		t.Errorf("UpdateSuite(%q) mismatch (-want +got):\n%s", "s1", diff)
	}
	if got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("UpdateSuite(%q).UpdatedAt = %v, want at or after %v", "s1", got.UpdatedAt, before.UpdatedAt)
	}
	if diff := cmp.Diff(got, mustGetSuite(t, s, "s1")); diff != "" {
		t.Errorf("GetSuite(%q) differs from what UpdateSuite returned (-update +get):\n%s", "s1", diff)
	}
	// The priority is what lists order by.
	mustCreateSuite(t, s, store.Suite{ID: "s0", Spec: api.SuiteSpec{Name: "s0", Priority: 2}, CreatedAt: t0.Add(-time.Hour)})
	if list, err := s.ListSuites(t.Context(), store.SuiteFilter{}); err != nil || !cmp.Equal(suiteIDs(list), []string{"s1", "s0"}) {
		t.Errorf("ListSuites() after a priority change = %q, %v, want [s1 s0]", suiteIDs(list), err)
	}

	// fn's error aborts the update.
	errBoom := errors.New("boom")
	_, err = s.UpdateSuite(t.Context(), "s1", func(su *store.Suite) error {
		su.State = api.SuiteCancelled
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Errorf("UpdateSuite(%q) with a failing fn = %v, want %v", "s1", err, errBoom)
	}
	if diff := cmp.Diff(got, mustGetSuite(t, s, "s1")); diff != "" {
		t.Errorf("GetSuite(%q) after an aborted update changed (-before +after):\n%s", "s1", diff)
	}

	for _, tc := range []struct {
		name string
		fn   func(*store.Suite)
	}{
		{"change id", func(su *store.Suite) { su.ID = "s9" }},
		{"unknown state", func(su *store.Suite) { su.State = "Paused" }},
		{"empty name", func(su *store.Suite) { su.Spec.Name = "" }},
	} {
		_, err = s.UpdateSuite(t.Context(), "s1", func(su *store.Suite) error { tc.fn(su); return nil })
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("UpdateSuite(%q) to %s = %v, want %v", "s1", tc.name, err, errdefs.ErrInvalid)
		}
	}
	if diff := cmp.Diff(got, mustGetSuite(t, s, "s1")); diff != "" {
		t.Errorf("GetSuite(%q) after refused updates changed (-before +after):\n%s", "s1", diff)
	}

	called := false
	_, err = s.UpdateSuite(t.Context(), "ghost", func(*store.Suite) error { called = true; return nil })
	if !errors.Is(err, errdefs.ErrNotFound) || called {
		t.Errorf("UpdateSuite(%q) = %v, fn called %v; want %v, not called", "ghost", err, called, errdefs.ErrNotFound)
	}
}

func testCancelSuiteCascades(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustCreateSuite(t, s, newSuite("s2"))
	mustAddTasks(t, s, "s1", newTasks("s1", 6)...)
	mustAddTasks(t, s, "s2", newTasks("s2", 2)...)
	claimed := mustClaim(t, s, "s1", "n1", 4) // t0..t3 Running, t4, t5 Ready
	mustClaim(t, s, "s2", "n1", 1)
	mustFinish(t, s, "n1", 2, nil,
		succeeded(claimed[0]),
		failed(claimed[1], "exit status 1"))
	// Failing once is not fatal: t1 is Ready again. Give it up now.
	c := mustClaim(t, s, "s1", "n2", 3)
	mustFinish(t, s, "n2", 1, abortAfter(2), failed(task(c, claimed[1].ID), "exit status 1"))

	// Now: t0 Finished, t1 Failed, t2 t3 Running on n1, t4 t5 Running on n2.
	if _, err := s.ReturnTasks(t.Context(), "n2", []string{"s1-t5"}); err != nil {
		t.Fatal(err)
	}
	before := mustGetSuite(t, s, "s1").Counts
	if want := (api.TaskCounts{Ready: 1, Running: 3, Finished: 1, Failed: 1}); before != want {
		t.Fatalf("GetSuite(%q).Counts before cancel = %+v, want %+v", "s1", before, want)
	}

	got := setSuiteState(t, s, "s1", api.SuiteCancelled)
	if want := (api.TaskCounts{Finished: 1, Failed: 1, Cancelled: 4}); got.Counts != want {
		t.Errorf("UpdateSuite(%q) to Cancelled counts = %+v, want %+v", "s1", got.Counts, want)
	}
	for id, want := range map[string]string{
		"s1-t0": api.TaskFinished, "s1-t1": api.TaskFailed,
		"s1-t2": api.TaskCancelled, "s1-t3": api.TaskCancelled, "s1-t4": api.TaskCancelled, "s1-t5": api.TaskCancelled,
		"s2-t0": api.TaskRunning, "s2-t1": api.TaskReady,
	} {
		if got := mustGetTask(t, s, id); got.State != want {
			t.Errorf("GetTask(%q).State after cancelling s1 = %q, want %q", id, got.State, want)
		}
	}
	// Reports from nodes still running a cancelled task count for nothing.
	mustFinish(t, s, "n1", 0, nil, succeeded(claimed[2]))
	if got := mustGetTask(t, s, "s1-t2"); got.State != api.TaskCancelled || got.Result != nil {
		t.Errorf("GetTask(%q) after a late report = %q, result %v; want %q, none", "s1-t2", got.State, got.Result, api.TaskCancelled)
	}
	// Nothing is left to claim, and no task can be added.
	if got, err := s.ClaimTasks(t.Context(), "s1", "n1", 10); err != nil || len(got) != 0 {
		t.Errorf("ClaimTasks(%q) after cancel = %d tasks, %v, want none", "s1", len(got), err)
	}
	if err := s.AddTasks(t.Context(), "s1", newTasks("late", 1)); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("AddTasks(%q) after cancel = %v, want %v", "s1", err, errdefs.ErrConflict)
	}
}

func testCloseIdleSuites(t *testing.T, s store.Store) {
	cutoff := t0.Add(time.Hour)
	for _, su := range []store.Suite{
		{ID: "never-old", CreatedAt: t0},                      // no task ever, created before cutoff
		{ID: "never-new", CreatedAt: cutoff.Add(time.Minute)}, // no task ever, created after
		{ID: "exact", CreatedAt: cutoff},                      // not before cutoff
		{ID: "fed-old", CreatedAt: t0, LastTaskAt: t0.Add(30 * time.Minute)},
		{ID: "fed-new", CreatedAt: t0, LastTaskAt: cutoff.Add(time.Second)},
		{ID: "closed", CreatedAt: t0, State: api.SuiteClosed},
		{ID: "complete", CreatedAt: t0, State: api.SuiteComplete},
	} {
		su.Spec.Name = su.ID
		mustCreateSuite(t, s, su)
	}
	got, err := s.CloseIdleSuites(t.Context(), cutoff)
	if err != nil {
		t.Fatalf("CloseIdleSuites(%v) = %v, want nil", cutoff, err)
	}
	if diff := cmp.Diff([]string{"fed-old", "never-old"}, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("CloseIdleSuites(%v) mismatch (-want +got):\n%s", cutoff, diff)
	}
	for id, want := range map[string]string{
		"never-old": api.SuiteClosed, "fed-old": api.SuiteClosed, "closed": api.SuiteClosed,
		"never-new": api.SuiteOpen, "exact": api.SuiteOpen, "fed-new": api.SuiteOpen,
		"complete": api.SuiteComplete,
	} {
		if got := mustGetSuite(t, s, id).State; got != want {
			t.Errorf("GetSuite(%q).State = %q, want %q", id, got, want)
		}
	}
	if got, err := s.CloseIdleSuites(t.Context(), cutoff); err != nil || got == nil || len(got) != 0 {
		t.Errorf("CloseIdleSuites(%v) again = %#v, %v, want empty, not nil", cutoff, got, err)
	}

	// Adding tasks keeps a suite open: LastTaskAt is now.
	mustAddTasks(t, s, "never-new", newTasks("x", 1)...)
	if got := mustGetSuite(t, s, "never-new").LastTaskAt; !recent(got) {
		t.Errorf("GetSuite(%q).LastTaskAt after AddTasks = %v, want about now", "never-new", got)
	}
	got, err = s.CloseIdleSuites(t.Context(), time.Now().Add(-time.Minute))
	if err != nil || !cmp.Equal(got, []string{"exact", "fed-new"}, cmpopts.SortSlices(func(a, b string) bool { return a < b })) {
		t.Errorf("CloseIdleSuites(a minute ago) = %q, %v, want [exact fed-new]", got, err)
	}
}

func testCompleteSuites(t *testing.T, s store.Store) {
	// Each suite is made Closed once its tasks are where the name says.
	setups := map[string]func(id string){
		"empty": func(string) {},
		"ready": func(id string) {
			mustAddTasks(t, s, id, newTasks(id, 2)...)
		},
		"running": func(id string) {
			mustAddTasks(t, s, id, newTasks(id, 1)...)
			mustClaim(t, s, id, "n1", 1)
		},
		"ended": func(id string) {
			mustAddTasks(t, s, id, newTasks(id, 3)...)
			c := mustClaim(t, s, id, "n1", 3)
			mustFinish(t, s, "n1", 2, abortAfter(1), succeeded(c[0]), failed(c[1], "crash"))
			if _, err := s.CancelTask(t.Context(), c[2].ID); err != nil {
				t.Fatalf("CancelTask(%q) = %v", c[2].ID, err)
			}
		},
	}
	for id, setup := range setups {
		mustCreateSuite(t, s, newSuite(id))
		setup(id)
		setSuiteState(t, s, id, api.SuiteClosed)
	}
	// An Open suite with nothing left is not complete: more may come.
	mustCreateSuite(t, s, newSuite("open"))

	got, err := s.CompleteSuites(t.Context())
	if err != nil {
		t.Fatalf("CompleteSuites() = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"empty", "ended"}, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("CompleteSuites() mismatch (-want +got):\n%s", diff)
	}
	for id, want := range map[string]string{
		"empty": api.SuiteComplete, "ended": api.SuiteComplete,
		"ready": api.SuiteClosed, "running": api.SuiteClosed, "open": api.SuiteOpen,
	} {
		if got := mustGetSuite(t, s, id).State; got != want {
			t.Errorf("GetSuite(%q).State = %q, want %q", id, got, want)
		}
	}

	// The running task ends: its suite completes next time, once.
	running := mustGetTask(t, s, "running-t0")
	mustFinish(t, s, "n1", 1, nil, succeeded(running))
	if got, err := s.CompleteSuites(t.Context()); err != nil || !cmp.Equal(got, []string{"running"}) {
		t.Errorf("CompleteSuites() after the last task ended = %q, %v, want [running]", got, err)
	}
	if got, err := s.CompleteSuites(t.Context()); err != nil || got == nil || len(got) != 0 {
		t.Errorf("CompleteSuites() again = %#v, %v, want empty, not nil", got, err)
	}
}

func testSuiteCounts(t *testing.T, s store.Store) {
	mustCreateSuite(t, s, newSuite("s1"))
	mustAddTasks(t, s, "s1", newTasks("s1", 10)...)
	check := func(when string, want api.TaskCounts) {
		t.Helper()
		got := mustGetSuite(t, s, "s1").Counts
		if got != want {
			t.Errorf("GetSuite(%q).Counts %s = %+v, want %+v", "s1", when, got, want)
		}
		if got.Total() != 10 {
			t.Errorf("GetSuite(%q).Counts.Total() %s = %d, want 10", "s1", when, got.Total())
		}
	}
	check("after adding", api.TaskCounts{Ready: 10})
	c := mustClaim(t, s, "s1", "n1", 6)
	check("after claiming", api.TaskCounts{Ready: 4, Running: 6})
	mustFinish(t, s, "n1", 4, abortAfter(1),
		succeeded(c[0]), succeeded(c[1]), failed(c[2], "boom"), stopped(c[3]))
	check("after reports", api.TaskCounts{Ready: 5, Running: 2, Finished: 2, Failed: 1})
	if _, err := s.CancelTask(t.Context(), c[4].ID); err != nil {
		t.Fatal(err)
	}
	check("after a cancel", api.TaskCounts{Ready: 5, Running: 1, Finished: 2, Failed: 1, Cancelled: 1})
	if _, err := s.ReclaimNode(t.Context(), "n1"); err != nil {
		t.Fatal(err)
	}
	check("after reclaiming", api.TaskCounts{Ready: 6, Finished: 2, Failed: 1, Cancelled: 1})
}
