package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestTaskLogsKeepAndFollowTheWholeOutput: an attempt's output beyond the
// result's 64 KiB tails is kept whole, per attempt, and `task logs -f`
// follows a running task's output as it is printed and stops at its end.
// (Issue 31 item 6: only a tail cut mid-line was kept.)
func TestTaskLogsKeepAndFollowTheWholeOutput(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "logger")
	ctx := context.Background()
	// In the suite's work dir, which is the tasks' user's.
	flag := "failed-once"

	createSuite(t, s, api.SuiteSpec{Name: "logs", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(0)},
		Retry: &api.RetryPolicy{MaxAttempts: 2, Backoff: api.Duration(time.Millisecond)}})
	ids := submit(t, s, "logs", []api.TaskSpec{
		sh(`for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done`),
		sh(`seq 1 100000 | sed 's/^/line /'; echo done >&2`),
		sh(`if [ ! -e ` + flag + ` ]; then touch ` + flag + `; seq 1 20000; exit 3; fi; echo second`),
	})
	slow, big, flaky := ids[0], ids[1], ids[2]
	if _, err := s.client().CloseSuite(ctx, "logs"); err != nil {
		t.Fatal(err)
	}

	follower := s.startCLI(t, "task", "logs", "-f", slow)
	waitFor(t, 30*time.Second, "the follower to print the first tick", func() (bool, string) {
		return strings.Contains(follower.output(), "tick 1\n"), follower.output()
	})
	if tk, _ := s.client().Task(ctx, slow); tk.State != api.TaskRunning {
		t.Errorf("the first tick reached the follower when the task was %s; want it followed while Running", tk.State)
	}
	if code := follower.wait(30 * time.Second); code != 0 {
		t.Fatalf("task logs -f exited %d: %s", code, follower.output())
	}
	if want := "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n"; follower.output() != want {
		t.Errorf("followed output = %q, want %q (no gap, no repeat across the task's end)", follower.output(), want)
	}

	waitSuite(t, s, "logs", api.SuiteComplete, 60*time.Second)
	out, errOut, code := s.run(t, "task", "logs", big, "--stream", "stdout")
	if code != 0 {
		t.Fatalf("task logs: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 100000 || lines[0] != "line 1" || lines[99999] != "line 100000" {
		t.Errorf("task logs of a 1.1 MB output: %d lines, first %q, last %q; want all 100,000", len(lines), lines[0], lines[len(lines)-1])
	}
	if errs, _, _ := s.run(t, "task", "logs", big, "--stream", "stderr"); errs != "done\n" {
		t.Errorf("task logs --stream stderr = %q, want %q", errs, "done\n")
	}
	all, _, _ := s.run(t, "task", "logs", big)
	if len(all) != len(out)+len("done\n") || !strings.Contains(all, "done\n") {
		t.Errorf("task logs (both streams) = %d bytes, want stdout's %d and stderr's", len(all), len(out))
	}
	tk, err := s.client().Task(ctx, big)
	if err != nil || tk.Result == nil || tk.Result.Log == nil || tk.Result.Log.Bytes != int64(len(all)) {
		t.Errorf("the result does not name a log of the whole output (%d bytes): %+v, %v", len(all), tk.Result, err)
	}

	first, _, code := s.run(t, "task", "logs", flaky, "--attempt", "1")
	if n := strings.Count(first, "\n"); code != 0 || n != 20000 || !strings.HasSuffix(first, "\n20000\n") {
		t.Errorf("the failed first attempt's log: exit %d, %d lines; want its 20,000", code, n)
	}
	if last, _, _ := s.run(t, "task", "logs", flaky); last != "second\n" {
		t.Errorf("the latest attempt's log = %q, want %q", last, "second\n")
	}
	show, _, _ := s.run(t, "task", "show", flaky)
	if !strings.Contains(show, "LOG") || !strings.Contains(show, fmt.Sprintf("nodemgr task logs %s --attempt N", flaky)) {
		t.Errorf("task show does not point to the failed attempt's log:\n%s", show)
	}
	if _, errOut, code := s.run(t, "task", "logs", flaky, "--attempt", "3"); code != 1 || !strings.Contains(errOut, "attempt") {
		t.Errorf("task logs --attempt 3 of a task with 2: exit %d, %q; want 1 naming the field", code, errOut)
	}
}
