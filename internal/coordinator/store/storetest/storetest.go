// Package storetest is the conformance suite for store.Store. Every backend
// runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
//	}
//
// The suite also pins down what the interface's comments leave open, so that
// the server sees the same behaviour whichever store it runs on:
//
//   - missing rows are errdefs.ErrNotFound (an unknown node too, for Enqueue,
//     Pending and Ack), clashes errdefs.ErrConflict, an empty node ID, token
//     ID or user name errdefs.ErrInvalid, and so is changing a node's ID in
//     UpdateNode;
//   - a token's user or node must exist;
//   - nil lists and maps read back empty, never nil;
//   - nodes list by name then ID, users by name, tokens oldest first then
//     by ID;
//   - every list pages by keyset (store.Page): a page starts after the
//     cursor of the last row of the one before, whether or not that row
//     still exists, so rows added or deleted between pages never make a row
//     that was there all along repeat or go missing; a cursor of another
//     shape is errdefs.ErrInvalid;
//   - creation times the caller gives (RegisteredAt, CreatedAt) are kept;
//     zero ones become now;
//   - heartbeats and token touches never move a time backwards;
//   - StaleNodes with no statuses means any status, and a node that never
//     sent a heartbeat counts from its registration;
//   - a node ID never gets the same notification seq twice, even after
//     DeleteNode and a new node under that ID;
//   - a node's CurrentSuite comes from heartbeats (older ones ignored) and
//     UpdateNode; CreateNode never adopts a known node;
//   - NodesRevision moves when a node is created or deleted or its name,
//     tags, labels, groups or hardware change, and at no other write.
//
// For suites and tasks:
//
//   - a suite needs an ID and a spec name, and its state must be one of
//     api.Suite* (an empty one is Open), else errdefs.ErrInvalid; the rule
//     that a live (Open or Closed) suite's name is its own holds for
//     UpdateSuite too (renames, revivals) as errdefs.ErrConflict;
//   - suites list by priority (highest first), then CreatedAt, then ID;
//     SuiteByName finds the newest whatever its state; a group filter
//     matches Spec.Group exactly;
//   - Counts are computed, so UpdateSuite drops fn's changes to them;
//   - specs are stored as JSON: empty lists inside them may read back nil;
//     AssignedNodes and Failures read back empty, never nil;
//   - new tasks are Ready at attempt 0 whatever the caller set; task IDs
//     are unique across suites;
//   - ListTasks of an unknown suite, and
//     ClaimTasks of an unknown suite, are errdefs.ErrNotFound; ClaimTasks
//     by a node the suite's placement refuses (store.Placement), or one not
//     registered, is errdefs.ErrPermission and changes nothing; ClaimTasks
//     with max <= 0 claims nothing (but is refused the same); claimed and listed tasks are what
//     GetTask returns, failures included;
//   - FinishAttempts refuses a batch with an unknown outcome whole
//     (errdefs.ErrInvalid); a result's NodeID is the reporting node and a
//     zero FinishedAt or failure time is now; a failure's Attempt and
//     NodeID are the report's; a failed report without a Failure is
//     recorded from its Result; a task given up keeps its last result, one
//     retried keeps none; the abort policy is not asked about ignored
//     reports or stops; within a batch, as across batches, the first report
//     of an attempt is the one that counts, whatever the outcomes;
//   - a suite's Counts always agree with its tasks' states;
//   - a task keeps its NodeID when it goes back to Ready (stop, failure,
//     ReturnTasks, ReclaimNode, ReclaimSuiteTasks);
//   - CancelTask of a Finished, Failed or Cancelled task is
//     errdefs.ErrConflict and changes nothing.
//
// For suite problems: one per (suite, node), the newest replaces the
// older, listed newest first with the node's name; a zero At becomes now;
// an empty suite or node is errdefs.ErrInvalid, an unknown one
// errdefs.ErrNotFound; deleting the node drops its problems.
package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Run runs the suite. open must return a new, empty store each time it is
// called; it is called once per test, from parallel tests. Run closes the
// stores it opens.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		run  func(*testing.T, store.Store)
	}{
		{"CreateNode", testCreateNodeCreates},
		{"CreateNodeRefusesSameMachine", testCreateNodeRefusesSameMachine},
		{"CreateNodeIDConflict", testCreateNodeIDConflict},
		{"CreateNodeEmptyReadsBackEmpty", testCreateNodeEmptyReadsBackEmpty},
		{"GetNodeNotFound", testGetNodeNotFound},
		{"ListNodes", testListNodes},
		{"UpdateNode", testUpdateNode},
		{"UpdateNodeAborts", testUpdateNodeAborts},
		{"UpdateNodeConflict", testUpdateNodeConflict},
		{"RecordHeartbeats", testRecordHeartbeats},
		{"RecordHeartbeatsLargeBatch", testRecordHeartbeatsLargeBatch},
		{"SetNodeStatus", testSetNodeStatus},
		{"StaleNodes", testStaleNodes},
		{"NodeReplicas", testNodeReplicas},
		{"DeleteNode", testDeleteNode},
		{"NodesRevision", testNodesRevision},
		{"HeldTasks", testHeldTasks},

		{"EnqueueSeqs", testEnqueueSeqs},
		{"EnqueueConcurrent", testEnqueueConcurrent},
		{"Pending", testPending},
		{"Ack", testAck},
		{"SeqsSurviveDeleteNode", testSeqsSurviveDeleteNode},
		{"NotificationsUnknownNode", testNotificationsUnknownNode},

		{"Documents", testDocuments},
		{"Deployments", testDeployments},
		{"PoolMachines", testPoolMachines},
		{"PoolEvents", testPoolEvents},
		{"BoundJoinToken", testBoundJoinToken},
		{"Containers", testContainers},
		{"Ensembles", testEnsembles},
		{"Overlay", testOverlay},

		{"Users", testUsers},
		{"CreateUserConflict", testCreateUserConflict},
		{"SetMembership", testSetMembership},
		{"DeleteUser", testDeleteUser},
		{"Tokens", testTokens},
		{"CreateTokenErrors", testCreateTokenErrors},
		{"ListTokens", testListTokens},
		{"DeleteToken", testDeleteToken},
		{"UseJoinToken", testUseJoinToken},
		{"UseJoinTokenConcurrent", testUseJoinTokenConcurrent},
		{"JoinNode", testJoinNode},
		{"TouchTokens", testTouchTokens},
		{"ReplaceNodeCredential", testReplaceNodeCredential},
		{"AuthChangesSeenAtOnce", testAuthChangesSeenAtOnce},

		{"CreateSuite", testCreateSuite},
		{"CreateSuiteErrors", testCreateSuiteErrors},
		{"SuiteByName", testSuiteByName},
		{"ListSuites", testListSuites},
		{"UpdateSuite", testUpdateSuite},
		{"CancelSuiteCascades", testCancelSuiteCascades},
		{"CloseIdleSuites", testCloseIdleSuites},
		{"CompleteSuites", testCompleteSuites},
		{"SuiteCounts", testSuiteCounts},
		{"CountsMatchTasks", testCountsMatchTasks},
		{"SuiteProblems", testSuiteProblems},
		{"SuiteProblemErrors", testSuiteProblemErrors},

		{"AddTasks", testAddTasks},
		{"Dependencies", testDependencies},
		{"DependencyFailure", testDependencyFailure},
		{"DependencyCancel", testDependencyCancel},
		{"TaskNames", testTaskNames},
		{"RetryPoliciesReachTheStore", testRetryPoliciesReachTheStore},
		{"AddTasksErrors", testAddTasksErrors},
		{"ListTasks", testListTasks},
		{"ClaimTasksOrder", testClaimTasksOrder},
		{"ClaimTasksConcurrent", testClaimTasksConcurrent},
		{"ClaimTasksAuthorized", testClaimTasksAuthorized},
		{"FinishSucceeded", testFinishSucceeded},
		{"FinishFirstCommitWins", testFinishFirstCommitWins},
		{"FinishFirstInBatchWins", testFinishFirstInBatchWins},
		{"FinishLargeBatch", testFinishLargeBatch},
		{"FinishFailed", testFinishFailed},
		{"FinishStopped", testFinishStopped},
		{"FinishInvalid", testFinishInvalid},
		{"FinishLostAttemptWins", testFinishLostAttemptWins},
		{"RetryWaits", testRetryWaits},
		{"ReattachTasks", testReattachTasks},
		{"ReturnTasks", testReturnTasks},
		{"ReclaimNode", testReclaimNode},
		{"ReclaimNodeKeeps", testReclaimNodeKeeps},
		{"ReclaimSuiteTasks", testReclaimSuiteTasks},
		{"CancelTask", testCancelTask},
		{"NodeCurrentSuite", testNodeCurrentSuite},
		{"NodeReadsBlob", testNodeReadsBlob}, {"NodeBlobScope", testNodeBlobScope}, {"BlobInGroups", testBlobInGroups}, {"BlobsInUse", testBlobsInUse}, {"TaskLogs", testTaskLogs}, {"ActionCache", testActionCache},
		{"Stats", testStats},

		{"LeaseAcquire", testLeaseAcquire}, {"LeaseTakeover", testLeaseTakeover}, {"LeaseExpiredSelf", testLeaseExpiredSelf}, {"LeaseRelease", testLeaseRelease}, {"FencedWrites", testFencedWrites}, {"FenceRace", testFenceRace},
	}
	for _, l := range pagedLists() {
		tests = append(tests, struct {
			name string
			run  func(*testing.T, store.Store)
		}{"Paging_" + l.name, func(t *testing.T, s store.Store) { walkPages(t, s, l) }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close() = %v, want nil", err)
				}
			})
			tc.run(t, s)
		})
	}
}

// t0 is the suite's fixed "now". Times the suite stores are whole
// microseconds, which every backend can keep exactly.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ignoreStamps leaves out the times a store sets itself.
var ignoreStamps = cmpopts.IgnoreFields(store.Node{}, "RegisteredAt", "UpdatedAt")

// recent reports whether a time the store set itself is plausibly "now".
func recent(tm time.Time) bool {
	return time.Since(tm).Abs() < time.Minute
}

// wantErr reports whether err is of class want (nil: no error).
func wantErr(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

// idsOf is the IDs of items in order, never nil: an empty list compares
// equal to []string{}.
func idsOf[T any](items []T, id func(T) string) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, id(it))
	}
	return out
}

// checkListed fails t unless a list call (named so in messages) returned
// no error and a non-nil slice whose IDs are want, in order.
func checkListed[T any](t *testing.T, call string, got []T, err error, ids func([]T) []string, want []string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s = %v, want nil", call, err)
	}
	if got == nil {
		t.Errorf("%s = nil, want a non-nil slice", call)
	}
	if diff := cmp.Diff(want, ids(got)); diff != "" {
		t.Errorf("%s IDs mismatch (-want +got):\n%s", call, diff)
	}
}
