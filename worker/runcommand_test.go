package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/node/proctree"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// treeModeEnv makes the test binary run TestRunCommandStopsTheWholeTree's
// cases in the proctree mode NODEMGR_PROCTREE says: the mode is chosen
// once per process.
const treeModeEnv = "WORKER_TEST_TREE_MODE"

// On timeout (and cancel, and stop) a task's processes get SIGTERM and its
// grace, then SIGKILL, all of them: also those that left its process group
// and hold its output pipes, which would otherwise hold the attempt up to
// outputDrainWait and outlive it. Run in each of proctree's modes.
func TestRunCommandStopsTheWholeTree(t *testing.T) {
	if mode := os.Getenv(treeModeEnv); mode != "" {
		stopsTheWholeTree(t, proctree.Mode(mode))
		return
	}
	// As root, also with the tasks started as another user (an agent's
	// default): the worker, still root, stops their trees all the same.
	users := []string{""}
	if os.Geteuid() == 0 {
		users = append(users, workerproto.FormatRunAs(65534, 65534, nil))
	}
	for _, mode := range []proctree.Mode{proctree.Cgroup2, proctree.Cgroup1, proctree.Walk} {
		for _, runAs := range users {
			name := string(mode)
			if runAs != "" {
				name += "/as-" + runAs
			}
			t.Run(name, func(t *testing.T) {
				if mode != proctree.Walk { // walk works anywhere, and would make this process a subreaper
					m, err := proctree.New(proctree.Options{Mode: mode})
					if err != nil {
						t.Skipf("no %s here: %v", mode, err)
					}
					m.Close()
				}
				cmd := exec.Command(os.Args[0], "-test.run=^TestRunCommandStopsTheWholeTree$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), treeModeEnv+"="+string(mode), proctree.EnvMode+"="+string(mode),
					workerproto.EnvRunAs+"="+runAs)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("in %s mode: %v\n%s", name, err, out)
				}
			})
		}
	}
}

// openToAll lets any user write into dir and pass through its parents,
// for tasks started as another user.
func openToAll(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o001)
		}
	}
}

func stopsTheWholeTree(t *testing.T, mode proctree.Mode) {
	dir := t.TempDir()
	if v := os.Getenv(workerproto.EnvRunAs); v != "" {
		if err := runTasksAs(v); err != nil {
			t.Fatal(err)
		}
		defer func() { taskCred = nil }()
		openToAll(t, dir)
	}
	cases := []struct {
		name    string
		script  string // $P: a pid file for the process that left the group
		timeout time.Duration
		grace   time.Duration
		// what the attempt should come to
		code   int
		signal string
		stdout string
		// how long it should take
		atLeast, atMost time.Duration
	}{
		{name: "traps SIGTERM and exits cleanly within its grace",
			script:  `trap 'sleep 0.3; echo cleaned; exit 0' TERM; echo started; sleep 30 & wait`,
			timeout: 200 * time.Millisecond, grace: 5 * time.Second,
			code: 0, stdout: "started\ncleaned\n", atLeast: 500 * time.Millisecond, atMost: 2 * time.Second},
		{name: "ignores SIGTERM: SIGKILL after the grace",
			script:  `trap '' TERM; echo started; sleep 30`,
			timeout: 200 * time.Millisecond, grace: 700 * time.Millisecond,
			code: -1, signal: "SIGKILL", stdout: "started\n", atLeast: 900 * time.Millisecond, atMost: 900*time.Millisecond + time.Second},
		{name: "setsid grandchild ignoring SIGTERM holds the pipes",
			script: `setsid sh -c 'trap "" TERM; echo $$ > $P; exec sleep 30' &
				trap '' TERM; while [ ! -s $P ]; do sleep 0.01; done; echo started; sleep 30`,
			timeout: 200 * time.Millisecond, grace: 700 * time.Millisecond,
			code: -1, signal: "SIGKILL", stdout: "started\n", atLeast: 900 * time.Millisecond, atMost: 900*time.Millisecond + time.Second},
		{name: "double fork out of the session, SIGTERM at the timeout",
			script: `(setsid sh -c '(echo $$ > $P; exec sleep 30) &' &)
				while [ ! -s $P ]; do sleep 0.01; done; echo started; sleep 30`,
			timeout: time.Second, grace: 5 * time.Second, // time to start its processes, even on a busy machine
			code: -1, signal: "SIGTERM", stdout: "started\n", atLeast: time.Second, atMost: 2 * time.Second},
		{name: "setsid leftover of a task that exits by itself",
			script:  `setsid sh -c 'echo $$ > $P; exec sleep 30' & while [ ! -s $P ]; do sleep 0.01; done; echo done`,
			timeout: time.Minute, grace: 5 * time.Second,
			code: 0, stdout: "done\n", atMost: time.Second},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(dir, strconv.Itoa(i))
			start := time.Now() // before the timeout's clock starts
			ctx, cancel := context.WithTimeoutCause(context.Background(), tc.timeout, ErrTimeout)
			defer cancel()
			r := RunCommand(ctx, Task{Argv: []string{"sh", "-c", tc.script}, Env: map[string]string{"P": pidFile}, KillGrace: tc.grace})
			took := time.Since(start)
			if r.ExitCode != tc.code || r.Signal != tc.signal || r.Stdout != tc.stdout {
				t.Errorf("RunCommand = %+v, want exit %d, signal %q, stdout %q", r, tc.code, tc.signal, tc.stdout)
			}
			if took < tc.atLeast || took > tc.atMost {
				t.Errorf("took %v, want %v to %v (outputDrainWait is %v)", took, tc.atLeast, tc.atMost, outputDrainWait)
			}
			if b, err := os.ReadFile(pidFile); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				if processRuns(pid) {
					t.Errorf("process %d that left the task's group still runs", pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
	trees.Lock()
	got := trees.m.Mode()
	trees.Unlock()
	if got != mode {
		t.Errorf("tasks ran in proctree mode %s, want %s", got, mode)
	}
}

// processRuns says whether pid runs; a zombie does not.
func processRuns(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// Output larger than a pipe holds, on both streams at once, comes out
// whole up to the tail.
func TestRunCommandBothStreamsLarge(t *testing.T) {
	r := RunCommand(context.Background(), Task{Argv: []string{"sh", "-c",
		"head -c 300000 /dev/zero | tr '\\0' o & head -c 300000 /dev/zero | tr '\\0' e >&2; wait; echo -n O; echo -n E >&2"}})
	if r.ExitCode != 0 || r.Err != nil {
		t.Fatalf("RunCommand = exit %d, %v", r.ExitCode, r.Err)
	}
	if len(r.Stdout) != maxTail || !strings.HasSuffix(r.Stdout, "ooO") || strings.Contains(r.Stdout, "e") {
		t.Errorf("stdout is %d bytes ending %q, want the last %d of stdout only", len(r.Stdout), r.Stdout[max(0, len(r.Stdout)-3):], maxTail)
	}
	if len(r.Stderr) != maxTail || !strings.HasSuffix(r.Stderr, "eeE") || strings.Contains(r.Stderr, "o") {
		t.Errorf("stderr is %d bytes ending %q, want the last %d of stderr only", len(r.Stderr), r.Stderr[max(0, len(r.Stderr)-3):], maxTail)
	}
}

// Commands run at once from several goroutines keep their output, exit
// codes and signals apart.
func TestRunCommandConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 40 {
		wg.Go(func() {
			script := fmt.Sprintf("echo out%d; echo err%d >&2; exit %d", i, i, i%5)
			want := Result{ExitCode: i % 5, Stdout: fmt.Sprintf("out%d\n", i), Stderr: fmt.Sprintf("err%d\n", i)}
			if i%7 == 0 {
				script = "kill -s KILL $$"
				want = Result{ExitCode: -1, Signal: "SIGKILL"}
			}
			if r := RunCommand(context.Background(), Task{Argv: []string{"sh", "-c", script}}); r != want {
				errs <- fmt.Sprintf("task %d: %+v, want %+v", i, r, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A program found in PATH is remembered; when it is gone from there, the
// next start looks again and finds it where it is now.
func TestRunCommandLooksAgainWhenTheProgramMoved(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	t.Setenv("PATH", first+":"+second+":"+os.Getenv("PATH"))
	install := func(dir, says string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "nodemgr-test-tool"), []byte("#!/bin/sh\necho "+says+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func() Result {
		return RunCommand(context.Background(), Task{Argv: []string{"nodemgr-test-tool"}})
	}
	install(first, "first")
	if r := run(); r.Stdout != "first\n" {
		t.Fatalf("first run: %+v, want the tool in %s", r, first)
	}
	os.Remove(filepath.Join(first, "nodemgr-test-tool"))
	install(second, "second")
	if r := run(); r.Stdout != "second\n" || r.Err != nil {
		t.Errorf("after the move: %+v, want the tool in %s", r, second)
	}
	os.Remove(filepath.Join(second, "nodemgr-test-tool"))
	if r := run(); r.Err == nil || !strings.Contains(r.Err.Error(), "nodemgr-test-tool") {
		t.Errorf("after removal: %+v, want an error naming the program", r)
	}
}

// A missing working directory is named as such, not taken for a missing
// program.
func TestRunCommandMissingWorkdir(t *testing.T) {
	r := RunCommand(context.Background(), Task{Argv: []string{"true"}, Workdir: "/nonexistent/dir"})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "workdir") || !strings.Contains(r.Err.Error(), "/nonexistent/dir") {
		t.Errorf("RunCommand = %+v, want an error about the workdir", r)
	}
}

// A process that ignores SIGCHLD has its children reaped by the kernel:
// the task's end cannot be told, and RunCommand says so rather than
// report a success. It runs in a process of its own: ignoring SIGCHLD
// here would break every other test's children.
func TestRunCommandCannotCollectStatus(t *testing.T) {
	const env = "WORKER_TEST_IGNORE_SIGCHLD"
	if os.Getenv(env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunCommandCannotCollectStatus$", "-test.count=1")
		cmd.Env = append(os.Environ(), env+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("in a process ignoring SIGCHLD: %v\n%s", err, out)
		}
		return
	}
	signal.Ignore(syscall.SIGCHLD)
	r := RunCommand(context.Background(), Task{Argv: []string{"sh", "-c", "exit 3"}})
	if r.Err == nil || r.ExitCode != -1 || !strings.Contains(r.Err.Error(), "cannot tell how it ended") {
		t.Errorf("RunCommand = %+v, want an error that the exit status is unknown", r)
	}
}

// A Go program that faults exits 2 with the runtime's report on stderr: it
// is reported as the fault, so the hardware-fault rule counts it.
func TestRunCommandGoFault(t *testing.T) {
	r := RunCommand(context.Background(), Task{Argv: []string{os.Args[0]},
		Env: map[string]string{"WORKER_TEST_HELPER": "gosegv", "GOTRACEBACK": "single"}})
	if r.ExitCode != 2 || r.Signal != "SIGSEGV" || r.Err != nil || !strings.Contains(r.Stderr, "[signal SIGSEGV") {
		t.Errorf("RunCommand = exit %d, signal %q, err %v, stderr %q; want exit 2 reported as SIGSEGV", r.ExitCode, r.Signal, r.Err, r.Stderr)
	}
	if outcome, reason := classify(r, nil, false); outcome != "failed" || reason != "crashed by SIGSEGV (Go runtime, exit status 2)" {
		t.Errorf("classify = %q, %q; want failed, crashed by SIGSEGV", outcome, reason)
	}
	// A Go program that exits 2 by itself is an exit status.
	r = RunCommand(context.Background(), Task{Argv: []string{"sh", "-c", "echo 'panic: not a fault' >&2; exit 2"}})
	if r.ExitCode != 2 || r.Signal != "" {
		t.Errorf("RunCommand(exit 2) = exit %d, signal %q; want exit 2, no signal", r.ExitCode, r.Signal)
	}
}

// Told a user (an agent that runs as root), the command worker starts its
// tasks as that user: they cannot act as the worker (signal it, read its
// environment with the socket token) nor keep its rights.
func TestRunCommandAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start processes as another user")
	}
	if err := runTasksAs(workerproto.FormatRunAs(65534, 65534, nil)); err != nil {
		t.Fatal(err)
	}
	defer func() { taskCred = nil }()
	dir := t.TempDir()
	openToAll(t, dir)
	tests := []struct {
		name, script, stdout string
	}{
		{"its ids", `echo $(id -u) $(id -g) $(id -G)`, "65534 65534 65534\n"},
		{"the worker is out of reach", `kill -0 $PPID 2>/dev/null && echo signalled || echo refused`, "refused\n"},
		{"the worker's environment is unreadable", `cat /proc/$PPID/environ >/dev/null 2>&1 && echo read || echo refused`, "refused\n"},
		{"its own files are its", `touch out && stat -c %u out`, "65534\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := RunCommand(context.Background(), Task{Argv: []string{"sh", "-c", tc.script}, Workdir: dir})
			if r.Err != nil || r.ExitCode != 0 || r.Stdout != tc.stdout {
				t.Errorf("RunCommand(%q) = %+v, want stdout %q", tc.script, r, tc.stdout)
			}
		})
	}
}
