package executetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
)

func testExec(t *testing.T, tg Target) {
	outer, outerVal, _ := strings.Cut(tg.Env, "=")
	dir := tempDir(t, tg)
	tests := []struct {
		name   string
		cmd    execute.Command
		code   int
		stdout string
		stderr string
	}{
		{name: "echo", cmd: execute.Command{Argv: []string{"echo", "hello", "world"}}, stdout: "hello world\n"},
		{name: "true", cmd: execute.Command{Argv: []string{"true"}}},
		{name: "exit 3", cmd: execute.Command{Argv: []string{"sh", "-c", "exit 3"}}, code: 3},
		{name: "exit 255", cmd: execute.Command{Argv: []string{"sh", "-c", "exit 255"}}, code: 255},
		{name: "killed by SIGTERM", cmd: execute.Command{Argv: []string{"sh", "-c", "kill -TERM $$"}}, code: 128 + 15},
		{name: "killed by SIGKILL", cmd: execute.Command{Argv: []string{"sh", "-c", "kill -KILL $$"}}, code: 128 + 9},
		{name: "stdout and stderr apart", cmd: execute.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}}, stdout: "out\nout2\n", stderr: "err\n"},
		{name: "stdin", cmd: execute.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("piped\nin\n")}, stdout: "piped\nin\n"},
		{name: "stdin unread", cmd: execute.Command{Argv: []string{"true"}, Stdin: strings.NewReader("ignored")}},
		{name: "env added and overriding", cmd: execute.Command{Argv: []string{"sh", "-c", `echo "$FOO|$BAR|$` + outer + `"`}, Env: []string{"FOO=bar", "BAR=a b", outer + "=inner"}}, stdout: "bar|a b|inner\n"},
		{name: "environment inherited", cmd: execute.Command{Argv: []string{"sh", "-c", `echo "$` + outer + `"`}}, stdout: outerVal + "\n"},
		{name: "dir", cmd: execute.Command{Argv: []string{"pwd"}, Dir: dir}, stdout: dir + "\n"},
		{name: "runs as the target's user", cmd: execute.Command{Argv: []string{"id", "-un"}}, stdout: tg.User + "\n"},
		{name: "large output", cmd: execute.Command{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo 0123456789; i=$((i+1)); done"}}, stdout: strings.Repeat("0123456789\n", 20000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tg, tc.cmd)
			if code != tc.code {
				t.Errorf("Exec(%q) = %d, want %d", tc.cmd.Argv, code, tc.code)
			}
			if stdout != tc.stdout {
				t.Errorf("Exec(%q) stdout = %.200q, want %.200q", tc.cmd.Argv, stdout, tc.stdout)
			}
			if stderr != tc.stderr {
				t.Errorf("Exec(%q) stderr = %q, want %q", tc.cmd.Argv, stderr, tc.stderr)
			}
		})
	}
}

func testExecErrors(t *testing.T, tg Target) {
	tests := []struct {
		name  string
		cmd   execute.Command
		class error
	}{
		{"no argv", execute.Command{}, errdefs.ErrInvalid},
		{"program not on PATH", execute.Command{Argv: []string{"nodemgr-no-such-program"}}, errdefs.ErrNotFound},
		{"program path missing", execute.Command{Argv: []string{"/no/such/program"}}, errdefs.ErrNotFound},
		{"no such dir", execute.Command{Argv: []string{"true"}, Dir: "/no/such/dir"}, errdefs.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, err := tg.Executor.Exec(ctxFor(t), tg.Deployment, tc.cmd)
			if !errors.Is(err, tc.class) || code != -1 {
				t.Errorf("Exec(%q) = %d, %v; want -1 and class %v", tc.cmd.Argv, code, err, tc.class)
			}
			t.Logf("Exec(%q): %v", tc.cmd.Argv, err)
		})
	}
}

// testCapability checks that a deployment without the executor's
// capability is refused, whatever else it carries, by Check and before
// anything is run or copied.
func testCapability(t *testing.T, tg Target) {
	e, ctx := tg.Executor, ctxFor(t)
	if err := execute.Check(e, tg.Deployment); err != nil {
		t.Errorf("Check(%v) = %v, want nil", tg.Deployment.Executors, err)
	}
	src := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := tempDir(t, tg)
	tests := []struct {
		name      string
		executors []string
	}{
		{"other executors", []string{"exec:elsewhere", "copy:elsewhere"}},
		{"no executors", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tg.Deployment
			d.Executors = tc.executors
			if err := execute.Check(e, d); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Check(%v) = %v, want invalid", d.Executors, err)
			}
			if code, err := e.Exec(ctx, d, execute.Command{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrInvalid) || code != -1 {
				t.Errorf("Exec(%v) = %d, %v; want -1 and invalid", d.Executors, code, err)
			}
			if err := e.CopyTo(ctx, d, src, path.Join(remote, "x")); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("CopyTo(%v) = %v, want invalid", d.Executors, err)
			}
			if err := e.CopyFrom(ctx, d, remote, filepath.Join(t.TempDir(), "x")); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("CopyFrom(%v) = %v, want invalid", d.Executors, err)
			}
		})
	}
}

// testExecCutOff checks that a command cut off by its Timeout or by ctx
// ends promptly, with everything it started: the command records the
// PIDs of its processes in a file on the target.
func testExecCutOff(t *testing.T, tg Target) {
	dir := tempDir(t, tg)
	tests := []struct {
		name   string
		script string // %[1]s: the file of PIDs
		cancel bool   // cancel ctx instead of a Timeout
		want   error
	}{
		{"timeout", "echo $$ > %[1]s; exec sleep 300", false, context.DeadlineExceeded},
		{"timeout kills the group", "sleep 301 & echo $! >> %[1]s; sleep 302 & echo $! >> %[1]s; echo $$ >> %[1]s; wait", false, context.DeadlineExceeded},
		{"cancelled", "echo $$ > %[1]s; exec sleep 303", true, context.Canceled},
		{"cancelled kills the group", "sleep 304 & echo $! >> %[1]s; sleep 305 & echo $! >> %[1]s; echo $$ >> %[1]s; wait", true, context.Canceled},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := path.Join(dir, strconv.Itoa(i)+".pids")
			cmd := execute.Command{Argv: []string{"sh", "-c", fmt.Sprintf(tc.script, pidfile)}}
			ctx := ctxFor(t)
			if tc.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				time.AfterFunc(300*time.Millisecond, cancel)
			} else {
				cmd.Timeout = 300 * time.Millisecond
			}
			start := time.Now()
			code, err := tg.Executor.Exec(ctx, tg.Deployment, cmd)
			if !errors.Is(err, tc.want) || code != -1 {
				t.Fatalf("Exec(%q) = %d, %v; want -1, %v", cmd.Argv, code, err, tc.want)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("Exec(%q) returned after %v", cmd.Argv, el)
			}
			pids := strings.Fields(mustRun(t, tg, "cat", pidfile))
			if len(pids) == 0 {
				t.Fatalf("%s on the target is empty", pidfile)
			}
			// Nothing it started may be left: poll with a deadline.
			deadline := time.Now().Add(5 * time.Second)
			for _, pid := range pids {
				for !gone(t, tg, pid) {
					if time.Now().After(deadline) {
						run(t, tg, execute.Command{Argv: []string{"kill", "-KILL", pid}})
						t.Fatalf("process %s of the command outlived the cut-off", pid)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// gone reports whether process pid on the target has exited (a zombie
// counts).
func gone(t *testing.T, tg Target, pid string) bool {
	t.Helper()
	code, stat, _ := run(t, tg, execute.Command{Argv: []string{"cat", "/proc/" + pid + "/stat"}})
	if code != 0 {
		return true
	}
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	return len(f) > 0 && f[0] == "Z"
}
