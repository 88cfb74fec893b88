package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/internal/node/gocrash"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// outputDrainWait bounds how long RunCommand waits for a task's output
// after the task's process group is gone: only a process that left the
// group (setsid) can still hold the pipes then.
const outputDrainWait = 2 * time.Second

// RunCommandWorker is the worker behind `nodemgr worker`: Run with
// RunCommand as the handler. SIGTERM or SIGINT stop it: the running task's
// processes get SIGTERM, and SIGKILL after the task's kill grace, and the
// task is reported stopped. Told a user in NODEMGR_WORKER_RUN_AS (an agent
// that runs as root and keeps its tasks from its rights), it starts every
// task as that user, and stays itself the one who tracks and kills the
// task's processes (cgroups), which the task cannot touch.
func RunCommandWorker(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	if v := os.Getenv(workerproto.EnvRunAs); v != "" {
		if err := runTasksAs(v); err != nil {
			return fmt.Errorf("command worker: %w", err)
		}
	}
	ownChildren() // every child of this process is a task's, or an orphan of one
	defer closeTrees()
	// RunCommand spends a task blocked in epoll_wait, holding a P (a
	// thread's right to run Go code) but no CPU. With no P to spare, the
	// runtime takes it back from the waiting thread after 20 µs and hands
	// it to a new one, at every task; one more P than the worker's share
	// of the cores lets the rest of the worker run meanwhile (measured:
	// the worker's CPU per `true` task -15 %).
	return run(ctx, RunCommand, 1)
}

// RunCommand runs t.Argv as a command, with the worker's environment (a
// clean one the agent gave it: no secrets of the agent's) plus t.Env, in
// t.Workdir, and returns its exit code or the signal that killed
// it (for a Go program that reports a fatal SIGSEGV, SIGBUS, SIGFPE or
// SIGILL and exits 2, that signal, with the exit code), and the tails of
// its output.
//
// The command and everything it starts are tracked as one tree (package
// proctree: a cgroup where the machine has them), so that a process that
// left the command's process group (setsid, a double fork) is still
// reached. When ctx ends (timeout, cancel, stop) the tree gets SIGTERM,
// and SIGKILL t.KillGrace later (default api.DefaultKillGrace) if it has
// not ended; when the command exits, whatever it left running is killed
// at once. A program name without a slash is looked up in the worker's
// PATH; what a lookup finds is remembered for a second.
func RunCommand(ctx context.Context, t Task) Result {
	if len(t.Argv) == 0 {
		return Result{ExitCode: -1, Err: errors.New("task has no argv")}
	}
	res := runCommand(ctx, t, taskEnv(os.Environ(), t.Env))
	// A Go program that faults exits 2 and says so on stderr: it counts
	// as the hardware fault it is, not as an exit status.
	if res.Signal == "" && res.Err == nil {
		res.Signal = gocrash.Signal(res.ExitCode, res.Stderr)
	}
	return res
}

// taskEnv is the worker's environment without its connection details, with
// the task's variables on top, in a stable order.
func taskEnv(base []string, extra map[string]string) []string {
	env := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		return strings.HasPrefix(kv, workerproto.EnvSocket+"=") || strings.HasPrefix(kv, workerproto.EnvToken+"=") ||
			strings.HasPrefix(kv, workerproto.EnvRunAs+"=") || strings.HasPrefix(kv, workerproto.EnvLogDir+"=") ||
			strings.HasPrefix(kv, workerproto.EnvLogMax+"=")
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

// programLookupTTL is how long a PATH lookup is trusted: a worker running
// the same program thousands of times a second need not search PATH for
// each, and a program installed earlier in PATH is still seen soon.
const programLookupTTL = time.Second

// programs remembers where PATH lookups found programs, like a shell's
// hash table.
var programs = programCache{found: map[string]foundProgram{}}

type programCache struct {
	mu    sync.Mutex
	found map[string]foundProgram
}

type foundProgram struct {
	path, pathEnv string
	at            time.Time
}

// lookup returns the program to run for name, and whether it came from
// the cache (so that a failed start can look again).
func (c *programCache) lookup(name string) (path string, cached bool, err error) {
	if strings.Contains(name, "/") {
		return name, false, nil
	}
	pathEnv := os.Getenv("PATH")
	now := time.Now()
	c.mu.Lock()
	f, ok := c.found[name]
	c.mu.Unlock()
	if ok && f.pathEnv == pathEnv && now.Sub(f.at) < programLookupTTL {
		return f.path, true, nil
	}
	path, err = exec.LookPath(name)
	if err != nil {
		c.forget(name)
		return "", false, err
	}
	c.mu.Lock()
	c.found[name] = foundProgram{path: path, pathEnv: pathEnv, at: now}
	c.mu.Unlock()
	return path, false, nil
}

func (c *programCache) forget(name string) {
	c.mu.Lock()
	delete(c.found, name)
	c.mu.Unlock()
}
