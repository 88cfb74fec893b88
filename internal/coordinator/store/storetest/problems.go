package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func mustProblems(t *testing.T, s store.Store, suiteID, nodeID string) []store.SuiteProblem {
	t.Helper()
	got, err := s.SuiteProblems(t.Context(), suiteID, nodeID)
	if err != nil {
		t.Fatalf("SuiteProblems(%q, %q) = %v, want nil", suiteID, nodeID, err)
	}
	return got
}

// testSuiteProblems: one problem per (suite, node), the newest replaces
// the older, lists are newest first with the node's name, filters by
// suite and node, clearing is idempotent, and deleting the node drops its
// problems.
func testSuiteProblems(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateNode(t, s, newNode("n1"))
	mustCreateNode(t, s, newNode("n2"))
	mustCreateSuite(t, s, newSuite("s1"))
	mustCreateSuite(t, s, newSuite("s2"))

	if got := mustProblems(t, s, "s1", ""); got == nil || len(got) != 0 {
		t.Fatalf("SuiteProblems(s1) before any = %#v, want empty, not nil", got)
	}
	put := func(suite, node string, exit int, reason string, at time.Time) {
		t.Helper()
		p := api.SuiteProblem{NodeID: node, Stage: api.StagePrepare, ExitCode: exit, Reason: reason, OutputTail: "missing license file\n", At: at}
		if err := s.PutSuiteProblem(ctx, suite, p); err != nil {
			t.Fatalf("PutSuiteProblem(%s, %s) = %v, want nil", suite, node, err)
		}
	}
	put("s1", "n1", 3, "exit status 3", t0)
	put("s1", "n2", -1, "timed out after 30s", t0.Add(time.Second))
	put("s2", "n1", 1, "exit status 1", t0.Add(2*time.Second))
	put("s1", "n1", 4, "exit status 4", t0.Add(3*time.Second)) // replaces the first

	want := []store.SuiteProblem{
		{SuiteID: "s1", SuiteProblem: api.SuiteProblem{NodeID: "n1", NodeName: "n1", Stage: api.StagePrepare, ExitCode: 4, Reason: "exit status 4", OutputTail: "missing license file\n", At: t0.Add(3 * time.Second)}},
		{SuiteID: "s1", SuiteProblem: api.SuiteProblem{NodeID: "n2", NodeName: "n2", Stage: api.StagePrepare, ExitCode: -1, Reason: "timed out after 30s", OutputTail: "missing license file\n", At: t0.Add(time.Second)}},
	}
	if diff := cmp.Diff(want, mustProblems(t, s, "s1", "")); diff != "" {
		t.Errorf("SuiteProblems(s1) mismatch (-want +got):\n%s", diff)
	}
	if got := mustProblems(t, s, "", "n1"); len(got) != 2 || got[0].SuiteID != "s1" || got[1].SuiteID != "s2" {
		t.Errorf("SuiteProblems(node n1) = %+v, want s1 then s2", got)
	}
	if got := mustProblems(t, s, "s2", "n1"); len(got) != 1 || got[0].ExitCode != 1 {
		t.Errorf("SuiteProblems(s2, n1) = %+v, want its one problem", got)
	}

	for range 2 { // clearing twice is fine
		if err := s.ClearSuiteProblem(ctx, "s1", "n1"); err != nil {
			t.Fatalf("ClearSuiteProblem(s1, n1) = %v, want nil", err)
		}
	}
	if got := mustProblems(t, s, "s1", ""); len(got) != 1 || got[0].NodeID != "n2" {
		t.Errorf("SuiteProblems(s1) after clearing n1 = %+v, want only n2's", got)
	}

	if err := s.DeleteNode(ctx, "n2"); err != nil {
		t.Fatalf("DeleteNode(n2) = %v", err)
	}
	if got := mustProblems(t, s, "s1", ""); len(got) != 0 {
		t.Errorf("SuiteProblems(s1) after deleting n2 = %+v, want none", got)
	}
}

// testSuiteProblemErrors: a problem needs a known suite and node.
func testSuiteProblemErrors(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	mustCreateSuite(t, s, newSuite("s1"))
	tests := []struct {
		name, suite, node string
		want              error
	}{
		{"no node", "s1", "", errdefs.ErrInvalid},
		{"no suite", "", "n1", errdefs.ErrInvalid},
		{"unknown node", "s1", "ghost", errdefs.ErrNotFound},
		{"unknown suite", "ghost", "n1", errdefs.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.PutSuiteProblem(t.Context(), tc.suite, api.SuiteProblem{NodeID: tc.node, Stage: api.StagePrepare, Reason: "x"})
			if !wantErr(err, tc.want) {
				t.Errorf("PutSuiteProblem(%q, %q) = %v, want %v", tc.suite, tc.node, err, tc.want)
			}
		})
	}
}
