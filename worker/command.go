package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/internal/workerproto"
)

// outputDrainWait bounds how long RunCommand waits for a task's output
// after the task's process group is gone: only a process that left the
// group (setsid) can still hold the pipes then.
const outputDrainWait = 2 * time.Second

// RunCommandWorker is the worker behind `nodemgr worker`: Run with
// RunCommand as the handler. SIGTERM or SIGINT stop it: the running task's
// processes are killed and the task is reported stopped.
func RunCommandWorker(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	return Run(ctx, RunCommand)
}

// RunCommand runs t.Argv as a command, with the worker's environment plus
// t.Env, in t.Workdir, and returns its exit code or the signal that killed
// it, and the tails of its output. The command runs in a process group of
// its own; when ctx ends (timeout, cancel, stop) the whole group is killed
// with SIGKILL, and so is whatever the command left running in it when it
// exits.
func RunCommand(ctx context.Context, t Task) Result {
	if len(t.Argv) == 0 {
		return Result{ExitCode: -1, Err: errors.New("task has no argv")}
	}
	cmd := exec.Command(t.Argv[0], t.Argv[1:]...)
	cmd.Dir = t.Workdir
	cmd.Env = taskEnv(os.Environ(), t.Env)
	var stdout, stderr tailBuffer
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{ExitCode: -1, Err: fmt.Errorf("output pipe: %w", err)}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return Result{ExitCode: -1, Err: fmt.Errorf("output pipe: %w", err)}
	}
	// *os.File, not a writer: Wait then returns when the command exits,
	// not when the last process holding its output does.
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := startTask(cmd); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return Result{ExitCode: -1, Err: fmt.Errorf("start %s: %w", t.Argv[0], err)}
	}
	outW.Close()
	errW.Close()
	copied := make(chan struct{}, 2)
	go func() { io.Copy(&stdout, outR); copied <- struct{}{} }()
	go func() { io.Copy(&stderr, errR); copied <- struct{}{} }()

	stopKill := context.AfterFunc(ctx, func() { killTaskGroup(cmd.Process) })
	cmd.Wait() // the exit status is in ProcessState
	stopKill()
	killTaskGroup(cmd.Process) // what it left behind

	drain := time.After(outputDrainWait)
	for drained := 0; drained < 2; {
		select {
		case <-copied:
			drained++
		case <-drain:
			outR.Close() // unblocks the copies
			errR.Close()
			drain = nil
		}
	}
	outR.Close()
	errR.Close()

	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	res.ExitCode, res.Signal = exitInfo(cmd.ProcessState)
	if ctx.Err() != nil {
		res.Err = context.Cause(ctx)
	}
	return res
}

// taskEnv is the worker's environment without its connection details, with
// the task's variables on top, in a stable order.
func taskEnv(base []string, extra map[string]string) []string {
	env := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		return strings.HasPrefix(kv, workerproto.EnvSocket+"=") || strings.HasPrefix(kv, workerproto.EnvToken+"=")
	})
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}
