package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// testStats checks CountNodes and CountSuites against what the nodes,
// suites and tasks are, through claims, reports, a cancel and a state
// change.
func testStats(t *testing.T, s store.Store) {
	ctx := t.Context()
	if nodes, err := s.CountNodes(ctx); err != nil || len(nodes) != 0 {
		t.Fatalf("CountNodes() of an empty store = %v, %v; want empty, nil", nodes, err)
	}
	if suites, tasks, err := s.CountSuites(ctx); err != nil || len(suites) != 0 || tasks != (api.TaskCounts{}) {
		t.Fatalf("CountSuites() of an empty store = %v, %+v, %v; want empty, zero, nil", suites, tasks, err)
	}
	for id, status := range map[string]string{"a": api.StatusOnline, "b": api.StatusOnline, "c": api.StatusOffline} {
		n := newNode(id)
		n.Status = status
		mustCreateNode(t, s, n)
	}
	for _, id := range []string{"s1", "s2", "s3"} {
		mustCreateSuite(t, s, newSuite(id))
	}
	mustAddTasks(t, s, "s1", newTasks("s1", 5)...)
	mustAddTasks(t, s, "s2", newTasks("s2", 2)...)
	claimed, err := s.ClaimTasks(ctx, "s1", "a", 3)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("ClaimTasks(s1, a, 3) = %d tasks, %v; want 3, nil", len(claimed), err)
	}
	done := store.Attempt{TaskID: claimed[0].ID, Attempt: claimed[0].Attempt, Outcome: api.OutcomeSucceeded}
	if _, err := s.FinishAttempts(ctx, "a", []store.Attempt{done}, func(_, _ *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) { return true, 0 }); err != nil {
		t.Fatalf("FinishAttempts() = %v", err)
	}
	if _, err := s.CancelTask(ctx, claimed[1].ID); err != nil {
		t.Fatalf("CancelTask() = %v", err)
	}
	if _, err := s.UpdateSuite(ctx, "s3", func(su *store.Suite) error { su.State = api.SuiteClosed; return nil }); err != nil {
		t.Fatalf("UpdateSuite(s3) = %v", err)
	}

	nodes, err := s.CountNodes(ctx)
	if err != nil {
		t.Fatalf("CountNodes() = %v", err)
	}
	if diff := cmp.Diff(map[string]int{api.StatusOnline: 2, api.StatusOffline: 1}, nodes); diff != "" {
		t.Errorf("CountNodes() (-want +got):\n%s", diff)
	}
	suites, tasks, err := s.CountSuites(ctx)
	if err != nil {
		t.Fatalf("CountSuites() = %v", err)
	}
	if diff := cmp.Diff(map[string]int{api.SuiteOpen: 2, api.SuiteClosed: 1}, suites); diff != "" {
		t.Errorf("CountSuites() suites (-want +got):\n%s", diff)
	}
	want := api.TaskCounts{Ready: 4, Running: 1, Finished: 1, Cancelled: 1}
	if tasks != want {
		t.Errorf("CountSuites() tasks = %+v, want %+v", tasks, want)
	}
}
