package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Which suite a node works on, and when it moves on.

// TestIdleSuiteDoesNotHoldItsAgent: an agent with nothing to run in an
// Open priority-0 suite takes up a priority-100 suite with ready tasks
// after the idle grace (1s here), not when the idle suite closes (180s),
// and comes back to the first suite when it gets tasks again.
func TestIdleSuiteDoesNotHoldItsAgent(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "solo")
	createSuite(t, s, api.SuiteSpec{Name: "quiet", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	submit(t, s, "quiet", []api.TaskSpec{sh("true")})
	waitFor(t, 30*time.Second, "the quiet suite's task done", func() (bool, string) {
		return finished(s, "quiet") == 1, ""
	})
	// The agent now sits in "quiet", which is Open with nothing to run.
	createSuite(t, s, api.SuiteSpec{Name: "urgent", Priority: 100, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	submit(t, s, "urgent", slices.Repeat([]api.TaskSpec{sh("true")}, 3))
	s.client().CloseSuite(context.Background(), "urgent")
	waitSuite(t, s, "urgent", api.SuiteComplete, 30*time.Second)

	submit(t, s, "quiet", []api.TaskSpec{sh("true")})
	waitFor(t, 30*time.Second, "the agent back in the quiet suite", func() (bool, string) {
		return finished(s, "quiet") == 2, ""
	})
}

// TestHigherPrioritySuiteTakesTheNode: a node busy with a priority-0
// suite moves to a priority-100 suite that gets ready tasks, finishing
// what it holds, and the low one goes on after.
func TestHigherPrioritySuiteTakesTheNode(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "busy")
	createSuite(t, s, api.SuiteSpec{Name: "bulk", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(1)}})
	submit(t, s, "bulk", slices.Repeat([]api.TaskSpec{sh("sleep 0.2")}, 200))
	s.client().CloseSuite(context.Background(), "bulk")
	waitFor(t, 30*time.Second, "bulk under way", func() (bool, string) { return finished(s, "bulk") > 0, "" })

	createSuite(t, s, api.SuiteSpec{Name: "vip", Priority: 100, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	submit(t, s, "vip", slices.Repeat([]api.TaskSpec{sh("true")}, 3))
	s.client().CloseSuite(context.Background(), "vip")
	waitSuite(t, s, "vip", api.SuiteComplete, 30*time.Second)
	if n := finished(s, "bulk"); n >= 200 {
		t.Fatalf("bulk finished (%d) before vip ran: priority was ignored", n)
	}
	waitSuite(t, s, "bulk", api.SuiteComplete, 2*time.Minute)
}

// TestAssignReplacesTheNodes: assigning a suite to another node takes it
// off the first one, which takes no more of its tasks; --add keeps both.
func TestAssignReplacesTheNodes(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "first")
	startAgent(t, s, "second")
	waitStatus(t, s, "first", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "second", api.StatusOnline, 20*time.Second)
	first, _ := nodeByName(t, s, "first")
	second, _ := nodeByName(t, s, "second")

	createSuite(t, s, api.SuiteSpec{Name: "moving", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(1)}})
	if _, stderr, code := s.run(t, "suite", "assign", "moving", "first"); code != 0 {
		t.Fatalf("suite assign moving first: exit %d: %s", code, stderr)
	}
	submit(t, s, "moving", []api.TaskSpec{sh("true")})
	waitFor(t, 30*time.Second, "a task done on first", func() (bool, string) { return finished(s, "moving") == 1, "" })

	if _, stderr, code := s.run(t, "suite", "assign", "moving", "second"); code != 0 {
		t.Fatalf("suite assign moving second: exit %d: %s", code, stderr)
	}
	submit(t, s, "moving", slices.Repeat([]api.TaskSpec{sh("true")}, 10))
	waitFor(t, 30*time.Second, "the new tasks done", func() (bool, string) {
		n := finished(s, "moving")
		return n == 11, fmt.Sprint(n)
	})
	for _, tk := range allTasks(t, s, "moving")[1:] {
		if tk.Result.NodeID != second.ID {
			t.Errorf("task %s ran on %s after the suite was assigned to second only", tk.ID, tk.Result.NodeID)
		}
	}

	out, stderr, code := s.run(t, "suite", "assign", "moving", "first", "--add")
	if code != 0 {
		t.Fatalf("suite assign --add: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, first.ID) || !strings.Contains(out, second.ID) {
		t.Errorf("suite assign --add said %q, want both nodes", out)
	}
}

// TestTaskKillingItselfIsRetriedWithAPause: a task that sends itself
// SIGTERM (nodemgr did not) fails, counts under the 3-attempt rule, and
// each retry waits — no endless loop of stopped attempts.
func TestTaskKillingItselfIsRetriedWithAPause(t *testing.T) {
	s := startServer(t, "--retry-backoff", "300ms")
	startOnline(t, s, "suicidal")
	createSuite(t, s, api.SuiteSpec{Name: "self-term", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	ids := submit(t, s, "self-term", []api.TaskSpec{sh("kill -TERM $$")})
	s.client().CloseSuite(context.Background(), "self-term")
	waitSuite(t, s, "self-term", api.SuiteComplete, time.Minute)
	tk, err := s.client().Task(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != api.TaskFailed || tk.Attempt != 3 || len(tk.Failures) != 3 {
		t.Fatalf("task = %s after %d attempts with %d failures, want Failed after 3", tk.State, tk.Attempt, len(tk.Failures))
	}
	for i := 1; i < len(tk.Failures); i++ {
		gap := tk.Failures[i].At.Sub(tk.Failures[i-1].At)
		if want := 300 * time.Millisecond << (i - 1); gap < want {
			t.Errorf("retry %d came %s after the failure before it, want at least the %s pause", i, gap, want)
		}
	}
}

// TestFrozenAgentIsOfflineWithoutWaitingForTheClose: an agent that is
// connected but does not answer (SIGSTOP) is offline after the offline
// timeout and the ping, without waiting for its WebSocket to close (5s),
// and its tasks run elsewhere; when it thaws, nothing runs twice.
func TestFrozenAgentIsOfflineWithoutWaitingForTheClose(t *testing.T) {
	s := startServer(t)
	frozen := startAgent(t, s, "frozen", "--tag", "ice")
	startAgent(t, s, "thawed", "--tag", "ice")
	waitStatus(t, s, "frozen", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "thawed", api.StatusOnline, 20*time.Second)
	f, _ := nodeByName(t, s, "frozen")
	createSuite(t, s, api.SuiteSpec{Name: "ice", Tags: []string{"ice"}, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, s, "ice", slices.Repeat([]api.TaskSpec{sh("sleep 1")}, 6))
	s.client().CloseSuite(context.Background(), "ice")
	waitFor(t, 30*time.Second, "frozen running a task", func() (bool, string) {
		return len(runningOn(t, s, "ice", f.ID)) > 0, ""
	})
	frozen.signal(syscall.SIGSTOP)
	stopped := time.Now()
	waitStatus(t, s, "frozen", api.StatusOffline, 30*time.Second)
	// offline-after 1s, a check every 250ms, ping 500ms: well under the
	// 5s a close handshake with a frozen peer would add.
	if took := time.Since(stopped); took > offlineAfter+confirmWait+3*time.Second {
		t.Errorf("frozen agent offline %s after SIGSTOP, want about %s", took, offlineAfter+confirmWait)
	}
	frozen.signal(syscall.SIGCONT)
	su := waitSuite(t, s, "ice", api.SuiteComplete, time.Minute)
	if su.Counts.Finished != 6 {
		t.Errorf("after the freeze: %+v, want all 6 finished", su.Counts)
	}
}

// TestAllocationStopPoolIsForGood: allocation stop pool:SUITE stops the
// suite on that node and keeps it off (its tasks go back to the queue,
// uncounted) until the suite is assigned there again.
func TestAllocationStopPoolIsForGood(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "stopper")
	n, _ := nodeByName(t, s, "stopper")
	su := createSuite(t, s, api.SuiteSpec{Name: "halted", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(2)}})
	submit(t, s, "halted", slices.Repeat([]api.TaskSpec{sh("sleep 30")}, 6))
	s.client().CloseSuite(context.Background(), "halted")
	waitFor(t, 30*time.Second, "two tasks running on stopper", func() (bool, string) {
		return len(runningOn(t, s, "halted", n.ID)) >= 2, ""
	})

	out, stderr, code := s.run(t, "allocation", "stop", "stopper", "pool:"+su.ID)
	if code != 0 {
		t.Fatalf("allocation stop pool: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "stopped") {
		t.Errorf("allocation stop said %q, want it stopped", out)
	}
	// Not taken up again: the suite waits, with a reason, and its tasks
	// are back in the queue with no failure counted.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if got := runningOn(t, s, "halted", n.ID); len(got) > 0 {
			t.Fatalf("task %s runs on stopper again after its pool was stopped", got[0].ID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := s.client().Suite(context.Background(), "halted")
	if err != nil {
		t.Fatal(err)
	}
	if got.Counts.Ready != 6 || !slices.Contains(got.StoppedNodes, n.ID) || !strings.Contains(got.WaitingReason, "stopped by hand") {
		t.Errorf("after allocation stop: counts %+v, stopped nodes %v, waiting %q; want 6 Ready, stopper stopped, a reason saying so",
			got.Counts, got.StoppedNodes, got.WaitingReason)
	}
	for _, tk := range allTasks(t, s, "halted") {
		if len(tk.Failures) > 0 {
			t.Errorf("task %s has failures %+v after its pool was stopped by hand", tk.ID, tk.Failures)
		}
	}

	if _, stderr, code := s.run(t, "suite", "assign", "halted", "stopper"); code != 0 {
		t.Fatalf("suite assign halted stopper: exit %d: %s", code, stderr)
	}
	waitFor(t, 30*time.Second, "the suite running on stopper again", func() (bool, string) {
		return len(runningOn(t, s, "halted", n.ID)) > 0, ""
	})
}
