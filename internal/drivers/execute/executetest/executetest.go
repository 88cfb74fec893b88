// Package executetest is the conformance suite for execute.Executor. Every
// executor runs it from its own tests against a live target:
//
//	func TestConformance(t *testing.T) {
//		executetest.Run(t, func(t *testing.T) executetest.Target {
//			e, d := startNode(t)
//			return executetest.Target{Executor: e, Deployment: d, User: "nodemgr", Env: "OUTER=outer"}
//		})
//	}
//
// The suite looks at the target only through the executor under test: it
// makes its scratch directories there, reads back what was copied and
// checks what is left running with commands it execs, so the target needs
// a POSIX shell with cat, find, id, mktemp, readlink and stat -c, and a
// Linux /proc (busybox will do). Paths on the target are slash paths.
//
// Besides what the interface says, the suite pins down:
//
//   - an exit code of 128+n for a command killed by signal n;
//   - -1 and an error when a command cannot run: errdefs.ErrInvalid for an
//     empty argv or a deployment without the executor's capability (which
//     CopyTo, CopyFrom and execute.Check refuse too), errdefs.ErrNotFound
//     for a missing program or working directory;
//   - -1 and context.DeadlineExceeded or context.Canceled when Timeout or
//     ctx cuts a command off, promptly, with nothing it started left
//     running;
//   - commands get the target's environment plus Command.Env, which wins,
//     and run as the target's user;
//   - copies either way: dst names the copy and a dst ending in "/" means
//     into it; missing parents are made; a tree copied onto a directory
//     merges into it; modes, modification times of files and symbolic
//     links (kept as links) are kept; what lands on the target belongs to
//     the target's user, who may use it;
//   - a missing source, on either side, is errdefs.ErrNotFound; a file
//     onto a directory on the target, or a tree onto a local file,
//     errdefs.ErrConflict; and a failed copy changes neither side.
package executetest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Target is what a backend gives the suite for one test.
type Target struct {
	// Executor is the executor under test.
	Executor execute.Executor
	// Deployment is a live deployment that carries Executor's
	// capability, for this test alone.
	Deployment provision.Deployment
	// User is the name of the user commands run as on the target, who
	// owns what is copied there.
	User string
	// Env is a variable, KEY=VALUE, in the environment commands get on
	// the target.
	Env string
}

// Run runs the suite. newTarget is called once per test, in that test;
// what it starts it should end with t.Cleanup.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	tests := []struct {
		name string
		run  func(*testing.T, Target)
	}{
		{"Exec", testExec},
		{"ExecErrors", testExecErrors},
		{"ExecCutOff", testExecCutOff},
		{"Capability", testCapability},
		{"CopyTo", testCopyTo},
		{"CopyFrom", testCopyFrom},
		{"CopyFile", testCopyFile},
		{"CopyErrors", testCopyErrors},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newTarget(t)) })
	}
}

// ctxFor bounds what one test may spend on its target.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run execs cmd on the target and returns its exit code and output; it
// fails the test if cmd cannot be run.
func run(t *testing.T, tg Target, cmd execute.Command) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code, err := tg.Executor.Exec(ctxFor(t), tg.Deployment, cmd)
	if err != nil {
		t.Fatalf("Exec(%q) = %v (stdout %q, stderr %q)", cmd.Argv, err, stdout.String(), stderr.String())
	}
	return code, stdout.String(), stderr.String()
}

// mustRun execs argv on the target and returns its output; it fails the
// test unless argv exits 0.
func mustRun(t *testing.T, tg Target, argv ...string) string {
	t.Helper()
	code, stdout, stderr := run(t, tg, execute.Command{Argv: argv})
	if code != 0 {
		t.Fatalf("Exec(%q) = %d, want 0 (stderr %q)", argv, code, stderr)
	}
	return stdout
}

// tempDir makes a new directory on the target, as its user, and removes
// it when the test ends.
func tempDir(t *testing.T, tg Target) string {
	t.Helper()
	dir := strings.TrimSpace(mustRun(t, tg, "mktemp", "-d"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var stderr bytes.Buffer
		if code, err := tg.Executor.Exec(ctx, tg.Deployment, execute.Command{Argv: []string{"rm", "-rf", dir}, Stderr: &stderr}); err != nil || code != 0 {
			t.Errorf("remove %s from the target: %d, %v (%s)", dir, code, err, stderr.String())
		}
	})
	return dir
}
