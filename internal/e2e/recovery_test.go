package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Faults while a suite runs: servers and agents killed, stopped by a signal
// or frozen. Nothing may be lost, nothing finished may run again, and
// nothing may wait for a timeout when the server knows better.

// countingTasks are n tasks that each append a line to their own file in
// dir when they start, so a test can tell how often each one ran.
func countingTasks(dir string, n int, work string) []api.TaskSpec {
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = sh(fmt.Sprintf("echo run >> %s/%d; %s", dir, i, work))
	}
	return tasks
}

// runsPerTask reads how often each of n counting tasks started.
func runsPerTask(t *testing.T, dir string, n int) []int {
	t.Helper()
	runs := make([]int, n)
	for i := range runs {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		runs[i] = strings.Count(string(b), "run\n")
	}
	return runs
}

// finished counts a suite's finished tasks.
func finished(s *server, suite string) int {
	su, err := s.client().Suite(context.Background(), suite)
	if err != nil {
		return -1
	}
	return su.Counts.Finished
}

// runningOn lists the tasks of a suite Running on a node.
func runningOn(t *testing.T, s *server, suite, nodeID string) []api.Task {
	t.Helper()
	var out []api.Task
	for _, tk := range allTasks(t, s, suite) {
		if tk.State == api.TaskRunning && tk.NodeID == nodeID {
			out = append(out, tk)
		}
	}
	return out
}

// TestServerRestartsRunNothingTwice kills the server five times while a
// 1,000-task suite runs, each time for longer than the agents' reconnect
// backoff grows to: the restarted server must count its own start as
// every node's last heartbeat, so the agents, backing off, are not
// declared offline and their running tasks are not started again.
func TestServerRestartsRunNothingTwice(t *testing.T) {
	const n = 1000
	s := startServer(t, "--offline-after", "2s", "--confirm-timeout", "500ms")
	for _, name := range []string{"r1", "r2"} {
		startAgent(t, s, name, "--reconnect-max", "1500ms")
		waitStatus(t, s, name, api.StatusOnline, 20*time.Second)
	}
	dir := sharedDir(t) // the tasks' marks
	createSuite(t, s, api.SuiteSpec{Name: "restarts", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(8)}})
	submit(t, s, "restarts", countingTasks(dir, n, "sleep 0.02"))
	s.client().CloseSuite(context.Background(), "restarts")

	for restart := 1; restart <= 5; restart++ {
		done := finished(s, "restarts")
		waitFor(t, time.Minute, "more tasks done before the next kill", func() (bool, string) {
			now := finished(s, "restarts")
			return now >= done+60 || now == n, strconv.Itoa(now)
		})
		s.signal(syscall.SIGKILL)
		s.wait(10 * time.Second)
		time.Sleep(3 * time.Second) // the outage: the agents' backoff reaches its cap
		s.restart(t)
	}
	su := waitSuite(t, s, "restarts", api.SuiteComplete, 3*time.Minute)
	if su.Counts.Finished != n {
		t.Errorf("after 5 server kills: %+v, want all %d finished", su.Counts, n)
	}
	var twice []int
	for i, runs := range runsPerTask(t, dir, n) {
		if runs != 1 {
			twice = append(twice, i)
		}
	}
	if len(twice) > 0 {
		t.Errorf("%d tasks ran other than once (e.g. %v): finished work was thrown away and run again", len(twice), twice[:min(5, len(twice))])
	}
	for _, name := range []string{"r1", "r2"} {
		if out := s.proc.output(); strings.Contains(out, "node offline") {
			t.Errorf("a node was declared offline across the restarts:\n%s", strings.Join(grep(out, "node offline"), "\n"))
			break
		}
		if n, _ := nodeByName(t, s, name); n.Status != api.StatusOnline {
			t.Errorf("%s is %s, want online", name, n.Status)
		}
	}
}

// TestAgentSIGTERMFinishesRunningTasks: systemctl stop (SIGTERM) lets the
// running tasks finish on the node, gives the buffered ones back at once,
// and says goodbye, so the server knows the node is gone without waiting.
func TestAgentSIGTERMFinishesRunningTasks(t *testing.T) {
	s := startServer(t)
	victim := startAgent(t, s, "leaver", "--tag", "term")
	startAgent(t, s, "stayer", "--tag", "term")
	waitStatus(t, s, "leaver", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "stayer", api.StatusOnline, 20*time.Second)
	v, _ := nodeByName(t, s, "leaver")

	createSuite(t, s, api.SuiteSpec{Name: "term", Tags: []string{"term"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(8)}})
	submit(t, s, "term", slices.Repeat([]api.TaskSpec{sh("sleep 2")}, 24))
	s.client().CloseSuite(context.Background(), "term")
	var running []api.Task
	waitFor(t, 30*time.Second, "leaver running two tasks", func() (bool, string) {
		running = runningOn(t, s, "term", v.ID)
		return len(running) >= 2+8, fmt.Sprint(len(running), " running or buffered there")
	})

	victim.signal(syscall.SIGTERM)
	waitFor(t, 20*time.Second, "leaver to say goodbye", func() (bool, string) {
		n, _ := nodeByName(t, s, "leaver")
		return n.Status == api.StatusOffline, n.Status + " " + n.StatusReason
	})
	if code := victim.wait(30 * time.Second); code != 0 {
		t.Errorf("agent exited %d after SIGTERM, want 0", code)
	}
	n, _ := nodeByName(t, s, "leaver")
	if !strings.Contains(n.StatusReason, "shut down") || n.AgentState != "" || n.CurrentSuite != "" {
		t.Errorf("leaver after SIGTERM: %s (%q), state %q, suite %q; want offline by goodbye, no state, no suite",
			n.Status, n.StatusReason, n.AgentState, n.CurrentSuite)
	}
	su := waitSuite(t, s, "term", api.SuiteComplete, time.Minute)
	if su.Counts.Finished != 24 {
		t.Errorf("after SIGTERM: %+v, want all 24 finished", su.Counts)
	}
	// The two it was running finished there, first time; the rest ran
	// on the other node.
	finishedThere := 0
	for _, tk := range allTasks(t, s, "term") {
		if tk.Result != nil && tk.Result.NodeID == v.ID {
			finishedThere++
			if tk.Attempt != 1 {
				t.Errorf("task %s finished on leaver at attempt %d, want 1", tk.ID, tk.Attempt)
			}
		}
	}
	if finishedThere < 2 {
		t.Errorf("%d tasks finished on leaver after SIGTERM, want the 2 it was running", finishedThere)
	}
	if out := victim.output(); strings.Contains(out, "reason=complete") {
		t.Errorf("the agent logged that it left the suite complete:\n%s", strings.Join(grep(out, "left suite"), "\n"))
	}
}

// TestAgentSecondSignalStopsAtOnce: a second SIGTERM does not wait for
// the running tasks; the agent still says goodbye, so they run elsewhere
// at once and count as no failure.
func TestAgentSecondSignalStopsAtOnce(t *testing.T) {
	s := startServer(t)
	victim := startAgent(t, s, "hasty", "--tag", "twice")
	startAgent(t, s, "patient", "--tag", "twice")
	waitStatus(t, s, "hasty", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "patient", api.StatusOnline, 20*time.Second)
	v, _ := nodeByName(t, s, "hasty")
	createSuite(t, s, api.SuiteSpec{Name: "twice", Tags: []string{"twice"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(2)}})
	submit(t, s, "twice", slices.Repeat([]api.TaskSpec{sh("sleep 30")}, 4))
	s.client().CloseSuite(context.Background(), "twice")
	waitFor(t, 30*time.Second, "hasty running tasks", func() (bool, string) {
		running := runningOn(t, s, "twice", v.ID)
		return len(running) >= 2, fmt.Sprint(len(running))
	})
	victim.signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond) // the first signal is being acted on
	victim.signal(syscall.SIGTERM)
	if code := victim.wait(15 * time.Second); code != 0 {
		t.Errorf("agent exited %d after two SIGTERMs, want 0", code)
	}
	n, _ := nodeByName(t, s, "hasty")
	if n.Status != api.StatusOffline || !strings.Contains(n.StatusReason, "shut down") {
		t.Errorf("hasty after two SIGTERMs: %s (%q), want offline by its goodbye", n.Status, n.StatusReason)
	}
	for _, tk := range allTasks(t, s, "twice") {
		if len(tk.Failures) > 0 {
			t.Errorf("task %s has failures %+v: a stop by nodemgr must not count", tk.ID, tk.Failures)
		}
		if tk.State == api.TaskRunning && tk.NodeID == v.ID {
			t.Errorf("task %s still Running on the agent that said goodbye", tk.ID)
		}
	}
}

// TestKill9RequeuesAfterGrace: with the default
// timers (heartbeat 30s, offline after 2m), the server sees the
// connection of a SIGKILLed agent end and requeues its running tasks once
// the reconnect grace (10s) is over, not after the heartbeat timeout.
// NODEMGR_E2E_KILLS=10 repeats the kill and logs each time.
func TestKill9RequeuesAfterGrace(t *testing.T) {
	kills := 1
	if v, err := strconv.Atoi(os.Getenv("NODEMGR_E2E_KILLS")); err == nil && v > 0 {
		kills = v
	}
	s := startServer(t, "--heartbeat-interval", "30s", "--offline-after", "2m", "--confirm-timeout", "10s",
		"--reconnect-grace", "10s")
	victim := startAgent(t, s, "doomed", "--tag", "kill")
	startAgent(t, s, "heir", "--tag", "kill")
	waitStatus(t, s, "doomed", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "heir", api.StatusOnline, 20*time.Second)
	v, _ := nodeByName(t, s, "doomed")
	createSuite(t, s, api.SuiteSpec{Name: "kills", Tags: []string{"kill"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	var took []time.Duration
	for k := range kills {
		submit(t, s, "kills", slices.Repeat([]api.TaskSpec{sh("sleep 600")}, 2))
		var held []api.Task
		waitFor(t, 30*time.Second, "doomed running a task", func() (bool, string) {
			held = runningOn(t, s, "kills", v.ID)
			return len(held) > 0, ""
		})
		victim.signal(syscall.SIGKILL)
		victim.wait(10 * time.Second)
		killed := time.Now()
		waitFor(t, 40*time.Second, "the killed agent's task back in the queue", func() (bool, string) {
			tk, err := s.client().Task(context.Background(), held[0].ID)
			return err == nil && (tk.State != api.TaskRunning || tk.NodeID != v.ID), tk.State + " on " + tk.NodeID
		})
		took = append(took, time.Since(killed))
		t.Logf("kill %d: its task was requeued %s after the kill", k+1, took[k].Round(100*time.Millisecond))
		for _, tk := range allTasks(t, s, "kills") {
			if tk.State == api.TaskReady || tk.State == api.TaskRunning {
				s.client().CancelTask(context.Background(), tk.ID)
			}
		}
		if k+1 < kills {
			victim.restart(t)
			waitStatus(t, s, "doomed", api.StatusOnline, 30*time.Second)
		}
	}
	slices.Sort(took)
	t.Logf("kill -9 to requeue over %d kills: min %s, median %s, max %s", len(took),
		took[0].Round(100*time.Millisecond), took[len(took)/2].Round(100*time.Millisecond), took[len(took)-1].Round(100*time.Millisecond))
}
