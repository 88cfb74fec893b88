package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Partial failures: one part of the system stalls or dies while the rest
// lives. Work must not be re-run, hidden or split.

// TestFrozenAgentStartsNothingTwice freezes an agent (SIGSTOP: its
// connection stays open, its tasks keep running in their workers) while it
// holds one running and two buffered tasks. The server must find it
// silent and reclaim its tasks as for a dropped connection, the other
// agent runs them, and the woken agent must start none of them again: its
// welcome revokes them, and it starts nothing it holds while out of touch.
func TestFrozenAgentStartsNothingTwice(t *testing.T) {
	const n = 3
	s := startServer(t, "--heartbeat-interval", "30s", "--offline-after", "2m", "--confirm-timeout", "10s",
		"--reconnect-grace", "10s")
	frozen := startAgent(t, s, "a2", "--tag", "freeze")
	startAgent(t, s, "a1", "--tag", "freeze")
	a2 := waitStatus(t, s, "a2", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "a1", api.StatusOnline, 20*time.Second)

	dir := sharedDir(t)
	createSuite(t, s, api.SuiteSpec{Name: "freeze", Tags: []string{"freeze"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(2)}})
	if _, stderr, code := s.run(t, "suite", "assign", "freeze", "a2"); code != 0 {
		t.Fatalf("suite assign: %s", stderr)
	}
	submit(t, s, "freeze", countingTasks(dir, n, "sleep 4"))
	s.client().CloseSuite(context.Background(), "freeze")
	waitFor(t, 30*time.Second, "a2 holding all three tasks, one of them started", func() (bool, string) {
		held := len(runningOn(t, s, "freeze", a2.ID))
		return held == n && slices.Max(runsPerTask(t, dir, n)) == 1, ""
	})
	if _, stderr, code := s.run(t, "suite", "assign", "freeze", "--auto"); code != 0 {
		t.Fatalf("suite assign --auto: %s", stderr)
	}

	frozen.signal(syscall.SIGSTOP)
	stopped := time.Now()
	defer frozen.signal(syscall.SIGCONT) // a test that fails early must not leave it stopped
	waitStatus(t, s, "a2", api.StatusOffline, 30*time.Second)
	t.Logf("the frozen agent's node was offline %s after SIGSTOP", time.Since(stopped).Round(100*time.Millisecond))
	waitSuite(t, s, "freeze", api.SuiteComplete, time.Minute)
	before := runsPerTask(t, dir, n)

	frozen.signal(syscall.SIGCONT)
	waitStatus(t, s, "a2", api.StatusOnline, 30*time.Second)
	time.Sleep(6 * time.Second) // what the woken agent would start, it starts by now
	after := runsPerTask(t, dir, n)
	if !slices.Equal(before, after) {
		t.Errorf("runs per task %v before SIGCONT, %v after: the woken agent started finished tasks again", before, after)
	}
	twice := 0
	for _, runs := range after {
		if runs > 1 {
			twice++
		}
	}
	// Only the task that ran when the agent froze may have started twice:
	// its attempt was lost with the node.
	if twice > 1 || slices.Contains(after, 0) {
		t.Errorf("runs per task %v: want each started once, but the one running at the freeze", after)
	}
	if out := frozen.output(); !strings.Contains(out, "dropping them") {
		t.Errorf("the woken agent did not say it dropped the tasks given to others:\n%s", out)
	}
}
