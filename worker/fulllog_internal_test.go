package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
)

// readLog is the text of a task's log in dir, and whether it exists.
func readLog(t *testing.T, dir, id string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(tasklog.Path(dir, id, 1))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	text, err := tasklog.Text(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(text), true
}

func withFullLogs(t *testing.T) string {
	dir := t.TempDir()
	old := fullLogs
	fullLogs = logSettings{dir: dir, max: tasklog.DefaultMax}
	t.Cleanup(func() { fullLogs = old })
	return dir
}

func TestCommandOutputBeyondTheTailsIsKeptWhole(t *testing.T) {
	dir := withFullLogs(t)
	// 200,000 lines of "line N": about 1.3 MB, far beyond a 64 KiB tail.
	res := RunCommand(context.Background(), Task{ID: "big", Attempt: 1,
		Argv: []string{"sh", "-c", `seq 1 200000 | sed 's/^/line /'; echo oops >&2`}})
	if res.ExitCode != 0 || res.Err != nil {
		t.Fatalf("task failed: %+v", res)
	}
	b, err := os.ReadFile(tasklog.Path(dir, "big", 1))
	if err != nil {
		t.Fatalf("no full log for output beyond the tails: %v", err)
	}
	// Two pipes read as they turn readable: the streams' order against
	// each other is as close as that gets, each stream's own is exact.
	stdout, _ := tasklog.Text(b, func(s tasklog.Stream) bool { return s == tasklog.Stdout })
	stderr, _ := tasklog.Text(b, func(s tasklog.Stream) bool { return s == tasklog.Stderr })
	text := string(stdout)
	if strings.Count(text, "\n") != 200000 || !strings.HasPrefix(text, "line 1\nline 2\n") || !strings.HasSuffix(text, "line 199999\nline 200000\n") {
		t.Fatalf("the log's stdout is not the whole output: %d lines, starts %q, ends %q", strings.Count(text, "\n"), text[:20], text[len(text)-20:])
	}
	if string(stderr) != "oops\n" {
		t.Fatalf("the log's stderr = %q", stderr)
	}
	if len(res.Stdout) > maxTail {
		t.Fatalf("the result's tail is %d bytes, over %d", len(res.Stdout), maxTail)
	}
}

func TestShortTaskWithLittleOutputMakesNoLog(t *testing.T) {
	dir := withFullLogs(t)
	res := RunCommand(context.Background(), Task{ID: "small", Attempt: 1, Argv: []string{"echo", "hi"}})
	if res.Stdout != "hi\n" {
		t.Fatalf("stdout = %q", res.Stdout)
	}
	if _, ok := readLog(t, dir, "small"); ok {
		t.Fatal("a short task with a little output made a log file")
	}
}

func TestLongTaskOutputReachesTheLogWhileItRuns(t *testing.T) {
	dir := withFullLogs(t)
	res := RunCommand(context.Background(), Task{ID: "slow", Attempt: 1,
		Argv: []string{"sh", "-c", `echo early; sleep 1.5; test -s ` + filepath.Join(dir, "slow.1.log") + ` && echo seen-while-running`}})
	if res.ExitCode != 0 {
		t.Fatalf("task failed: %+v", res)
	}
	if !strings.Contains(res.Stdout, "seen-while-running") {
		t.Fatalf("the log file held nothing while the task ran past %v: stdout %q", logOpenAfter, res.Stdout)
	}
	if text, _ := readLog(t, dir, "slow"); text != "early\nseen-while-running\n" {
		t.Fatalf("log = %q", text)
	}
}

func TestHandlerOutputBeyondTheTailsIsKeptWhole(t *testing.T) {
	dir := withFullLogs(t)
	out := strings.Repeat("y", maxTail+10) + "END"
	s := &session{}
	task := &api.Task{ID: "h1", Attempt: 1}
	if err := s.report(task, Result{Stdout: out}, "succeeded", "", 0); err != nil {
		t.Fatal(err)
	}
	if text, ok := readLog(t, dir, "h1"); !ok || text != out {
		t.Fatalf("handler's whole output not in the log (%d bytes, found %v)", len(text), ok)
	}
	if got := s.pending.Report.Result.Stdout; len(got) > maxTail || !strings.HasSuffix(got, "END") {
		t.Fatalf("report's tail is %d bytes", len(got))
	}
}
