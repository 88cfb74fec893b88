package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerpool"
	"github.com/nodemgr/nodemgr/internal/node/workerpool/workerpooltest"
	"github.com/nodemgr/nodemgr/worker"
)

// With helperEnv set, the test binary is `nodemgr worker`.
const helperEnv = "WORKER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "gosegv" { // a Go program that faults
		var p *int
		println(*p)
	}
	if os.Getenv(helperEnv) == "cmdworker" {
		if err := worker.RunCommandWorker(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runPool runs the command worker on src until Run returns.
func startPool(t *testing.T, workers int, src workerpool.Source) (*workerpool.Pool, chan error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := workerpool.New(workerpool.Config{
		SuiteID: "suite-1", SuiteName: "test", NodeID: "node-1",
		Workers: workers, Prefetch: 8, Command: []string{os.Args[0]},
		Env: []string{helperEnv + "=cmdworker", "GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"},
		Dir: dir,
	}, src)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(context.Background()) }()
	t.Cleanup(func() {
		p.Stop(false)
		<-errc
		errc <- nil
	})
	return p, errc
}

func waitRun(t *testing.T, errc chan error) {
	t.Helper()
	select {
	case err := <-errc:
		errc <- err
		if err != nil {
			t.Fatalf("pool Run = %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("pool did not finish")
	}
}

func TestCommandWorker(t *testing.T) {
	tmp := t.TempDir()
	pidFile := filepath.Join(tmp, "bg.pid")
	task := func(id string, timeout time.Duration, env map[string]string, argv ...string) api.Task {
		tk := workerpooltest.WithTimeout(workerpooltest.Task(id, argv...), timeout)
		tk.Env = env
		return tk
	}
	cases := []struct {
		task    api.Task
		outcome string
		reason  string
		code    int
		signal  string
		stdout  string
		stderr  string
	}{
		{task("true", 0, nil, "true"), api.OutcomeSucceeded, "", 0, "", "", ""},
		{task("exit", 0, nil, "sh", "-c", "echo out; echo err >&2; exit 3"), api.OutcomeFailed, "exit status 3", 3, "", "out\n", "err\n"},
		{task("segv", 0, nil, "sh", "-c", "kill -s SEGV $$"), api.OutcomeFailed, "killed by SIGSEGV", -1, "SIGSEGV", "", ""},
		{task("term", 0, nil, "sh", "-c", "kill -s TERM $$"), api.OutcomeFailed, "killed by SIGTERM (not sent by nodemgr)", -1, "SIGTERM", "", ""},
		// A timed-out command gets SIGTERM first (SIGKILL only after its grace).
		{task("timeout", 300*time.Millisecond, nil, "sleep", "30"), api.OutcomeFailed, "timeout", -1, "SIGTERM", "", ""},
		{task("timeout-group", 300*time.Millisecond, nil, "sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait"),
			api.OutcomeFailed, "timeout", -1, "SIGTERM", "", ""},
		{task("env", 0, map[string]string{"FOO": "bar"}, "sh", "-c", `echo "$FOO ${NODEMGR_WORKER_TOKEN:-no-token} $NODEMGR_SUITE_ID $NODEMGR_WORKER_COUNT"`),
			api.OutcomeSucceeded, "", 0, "", "bar no-token suite-1 2\n", ""},
		{task("missing", 0, nil, "/nonexistent/program"), api.OutcomeFailed, "start /nonexistent/program", -1, "", "", ""},
	}
	var all []api.Task
	for _, tc := range cases {
		all = append(all, tc.task)
	}
	wd := workerpooltest.Task("workdir", "pwd")
	wd.Workdir = tmp
	big := workerpooltest.Task("big", "sh", "-c", "head -c 200000 /dev/zero | tr '\\0' a; echo -n END")
	all = append(all, wd, big)

	src := workerpooltest.NewSource(all...)
	_, errc := startPool(t, 2, src)
	waitRun(t, errc)

	for _, tc := range cases {
		t.Run(tc.task.ID, func(t *testing.T) {
			r, ok := src.ReportFor(tc.task.ID)
			if !ok {
				t.Fatal("no report")
			}
			if r.Outcome != tc.outcome || !strings.HasPrefix(r.Reason, tc.reason) || r.Result.ExitCode != tc.code ||
				r.Result.Signal != tc.signal || r.Result.Stdout != tc.stdout || r.Result.Stderr != tc.stderr || r.Crash {
				t.Errorf("report = %+v\nwant outcome %s, reason %q..., exit %d, signal %q, stdout %q, stderr %q, no crash",
					r, tc.outcome, tc.reason, tc.code, tc.signal, tc.stdout, tc.stderr)
			}
		})
	}
	t.Run("workdir", func(t *testing.T) {
		if r, _ := src.ReportFor("workdir"); r.Result.Stdout != tmp+"\n" {
			t.Errorf("pwd printed %q, want %q", r.Result.Stdout, tmp+"\n")
		}
	})
	t.Run("output tail", func(t *testing.T) {
		r, _ := src.ReportFor("big")
		if out := r.Result.Stdout; len(out) != 64<<10 || !strings.HasSuffix(out, "aaaEND") {
			t.Errorf("stdout is %d bytes ending %q, want the last 64 KiB", len(out), out[max(0, len(out)-6):])
		}
	})
	t.Run("timeout kills the group", func(t *testing.T) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		workerpooltest.WaitFor(t, 5*time.Second, "the background sleep to die", func() bool { return !alive(pid) })
	})
}

// alive reports whether pid runs (a zombie, dead but not reaped by a
// careless init, does not count).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestCommandWorkerCancel(t *testing.T) {
	started := filepath.Join(t.TempDir(), "started")
	src := workerpooltest.NewSource(workerpooltest.Task("long", "sh", "-c", "touch "+started+"; exec sleep 30"),
		workerpooltest.Task("next", "true"))
	p, errc := startPool(t, 1, src)
	// The command runs (a cancel that comes before it does skips it).
	workerpooltest.WaitFor(t, 20*time.Second, "the command to run", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	if !p.Cancel("long", 0) {
		t.Fatal(`Cancel("long") = false, want true`)
	}
	waitRun(t, errc)
	if r, _ := src.ReportFor("long"); r.Outcome != api.OutcomeFailed || r.Reason != "cancelled" || r.Result.Signal != "SIGTERM" {
		t.Errorf("report = %+v, want failed, cancelled, the command stopped by SIGTERM", r)
	}
	if r, _ := src.ReportFor("next"); r.Outcome != api.OutcomeSucceeded {
		t.Errorf("next: %+v, want succeeded", r)
	}
	if n := p.Stats().Respawns; n != 0 {
		t.Errorf("Respawns = %d, want 0: the worker killed its command and carried on", n)
	}
}

func TestCommandWorkerStop(t *testing.T) {
	src := workerpooltest.NewSource(workerpooltest.Task("long", "sleep", "30"))
	p, errc := startPool(t, 1, src)
	workerpooltest.WaitFor(t, 20*time.Second, "the task to run", func() bool { return p.Stats().Busy == 1 })
	p.Stop(false)
	waitRun(t, errc)
	// The worker itself says so, whether the stop caught the task running
	// or on its way (not the pool, for a worker that died holding it).
	r, _ := src.ReportFor("long")
	if r.Outcome != api.OutcomeStopped || (r.Reason != "worker stopped" && r.Reason != "worker stopped before starting the task") {
		t.Errorf("report = %+v, want stopped by the worker", r)
	}
}
