// Package worker makes a program a nodemgr worker: a process that a node
// agent starts for a task suite (worker_schedule.worker_command) and feeds
// tasks over a local socket, so that tasks run in-process instead of as a
// command each.
//
// A worker program calls Run with a Handler; Run connects to the agent,
// takes tasks one at a time, calls the handler for each and reports how it
// went, and returns when the agent says there are no more:
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//		defer stop()
//		if err := worker.Run(ctx, handle); err != nil {
//			log.Fatal(err)
//		}
//	}
//
//	func handle(ctx context.Context, t worker.Task) worker.Result {
//		if err := train(ctx, t.Argv); err != nil {
//			return worker.Result{ExitCode: 1, Err: err}
//		}
//		return worker.Result{}
//	}
//
// An attempt succeeds when the handler returns ExitCode 0 and no Err. The
// handler's context ends when the task times out (cause ErrTimeout), when
// the agent cancels the task (cause a *CancelError), or when Run's context
// ends; a handler should return soon after, or the agent kills the worker.
// A task whose worker is stopped (Run's context ends) is reported
// stopped: the server runs it again and does not count it as a failure.
// A task that ends by a SIGTERM or SIGINT nodemgr did not send (Signal,
// with the handler's context not ended) is a failure: the server counts
// it.
//
// The agent sets NODEMGR_SUITE_ID, NODEMGR_SUITE_NAME, NODEMGR_NODE_ID,
// NODEMGR_WORKER_ID and NODEMGR_WORKER_COUNT in a worker's environment,
// pins it to its CPU cores before it starts, and starts it again if it
// dies. RunCommandWorker is the worker behind `nodemgr worker`, which runs
// each task's argv as a command.
package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// Task is one task to run.
type Task struct {
	ID      string
	SuiteID string
	Argv    []string
	Env     map[string]string
	Workdir string        // relative to the worker's working directory; empty: that directory
	Timeout time.Duration // 0: none
	Attempt int           // attempts started so far, this one included
	// KillGrace is how long the task has to stop after it is asked to
	// (timeout, cancel, the worker stopping) before it is killed; 0: the
	// default, api.DefaultKillGrace. A handler should return within it;
	// RunCommand sends the command SIGTERM and SIGKILL after it.
	KillGrace time.Duration
}

// Result is how a task ended. Its report keeps the last 64 KiB of Stdout
// and of Stderr; more than that is kept whole as the attempt's log where
// the server keeps logs (nodemgr task logs).
type Result struct {
	ExitCode int
	// Signal is the signal that killed the task's process, e.g.
	// "SIGSEGV"; with ExitCode > 0, a fatal signal a Go program reported
	// before it exited.
	Signal string
	Stdout string
	Stderr string
	Err    error // why the task failed, if not (only) its exit code
}

// Handler runs one task.
type Handler func(ctx context.Context, t Task) Result

// ErrTimeout is the cause (context.Cause) of a handler's context that ended
// at the task's timeout.
var ErrTimeout = errors.New("timeout")

// CancelError is the cause of a handler's context that the agent cancelled.
type CancelError struct {
	Reason string // "cancelled", "timeout"
}

func (e *CancelError) Error() string { return e.Reason }

// Environment variables the agent sets for its workers.
const (
	EnvSuiteID     = workerproto.EnvSuiteID
	EnvSuiteName   = workerproto.EnvSuiteName
	EnvNodeID      = workerproto.EnvNodeID
	EnvWorkerID    = workerproto.EnvWorkerID
	EnvWorkerCount = workerproto.EnvWorkerCount
)

// maxTail bounds each output tail.
const maxTail = 64 << 10

// stopAnswerWait is how long a worker whose context ended waits for the
// answer to a fetch already sent, so that a task already on its way is
// reported stopped rather than left to look like a crash.
const stopAnswerWait = 500 * time.Millisecond

var errConnLost = errors.New("connection to the agent lost")

// Run serves tasks from the agent that started this process until the
// agent says there are no more (Run returns nil) or ctx ends (the running
// task, if any, is cancelled and reported stopped; Run returns nil). It
// returns an error if the process was not started by an agent or the
// connection fails.
func Run(ctx context.Context, h Handler) error {
	return run(ctx, h, 0)
}

// run is Run with extraProcs threads of Go code on top of the worker's
// share of the cores, for handlers that spend their time blocked in a
// system call.
func run(ctx context.Context, h Handler, extraProcs int) error {
	sock := os.Getenv(workerproto.EnvSocket)
	if sock == "" {
		return fmt.Errorf("worker: %s is not set: this program is a nodemgr worker, started by the agent for a task suite", workerproto.EnvSocket)
	}
	id, err := strconv.Atoi(os.Getenv(workerproto.EnvWorkerID))
	if err != nil {
		return fmt.Errorf("worker: bad %s: %w", workerproto.EnvWorkerID, err)
	}
	sizeRuntime(extraProcs)
	fullLogs = readLogSettings()
	nc, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("worker: connect to agent: %w", err)
	}
	c := workerproto.NewConn(nc)
	defer c.Close()
	s := &session{c: c, frames: make(chan frameOrErr), quit: make(chan struct{}), batch: 1, cancelled: map[attemptKey]string{}}
	defer close(s.quit)
	defer s.flush()
	go s.read()

	hello := workerproto.Frame{Op: workerproto.OpHello, Hello: &workerproto.Hello{
		Version: workerproto.Version, WorkerID: id, Token: os.Getenv(workerproto.EnvToken), PID: os.Getpid(),
		Release: true}}
	if err := c.Write(hello); err != nil {
		return fmt.Errorf("worker: hello: %w", err)
	}
	select {
	case <-ctx.Done():
		return nil
	case fe := <-s.frames:
		if fe.err != nil {
			return fmt.Errorf("worker: agent refused hello: %w", fe.err)
		}
		if fe.f.Op != workerproto.OpAck {
			return fmt.Errorf("worker: agent answered hello with %q", fe.f.Op)
		}
	}
	for {
		t := s.take()
		if t == nil {
			// The last task's report travels with this fetch: one write,
			// one wake-up of the agent.
			out := []workerproto.Frame{{Op: workerproto.OpFetch, Fetch: s.fetchSize()}}
			if s.pending != nil {
				out = append([]workerproto.Frame{*s.pending}, out...)
				s.pending = nil
			}
			// Cancels noted so far were about tasks reported by now. Not
			// after the write: a cancel of a task the answer brings may
			// come first.
			s.mu.Lock()
			clear(s.cancelled)
			s.mu.Unlock()
			if err := c.Write(out...); err != nil {
				return fmt.Errorf("worker: fetch: %w", err)
			}
			ts, err := s.next(ctx)
			if err != nil || ts == nil {
				return err
			}
			s.mu.Lock()
			s.queue = ts
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		reason, cancelled := s.cancelledLocked(t)
		s.mu.Unlock()
		switch {
		case ctx.Err() != nil: // stopped while the task was on its way or waiting
			s.report(t, Result{ExitCode: -1}, api.OutcomeStopped, "worker stopped before starting the task", 0)
		case cancelled:
			s.report(t, Result{ExitCode: -1}, api.OutcomeFailed, reason, 0)
		default:
			if err := s.runTask(ctx, h, t); err != nil {
				return err
			}
		}
		more := s.holds()
		if more {
			// The pool knows which task runs by the reports: the next
			// one starts only once this one's is on its way.
			s.flush()
		}
		if ctx.Err() != nil && !more {
			return nil
		}
	}
}

// Batching: a worker whose tasks end within shortTask asks for up to
// batchMax at once; a longer task makes it take one at a time again, so a
// slow task never holds up others another worker could run.
const (
	shortTask = time.Millisecond
	batchMax  = 8
)

// fetchSize is the body of the next fetch: nil asks for one task.
func (s *session) fetchSize() *workerproto.Fetch {
	if s.batch <= 1 {
		return nil
	}
	return &workerproto.Fetch{Max: s.batch}
}

type frameOrErr struct {
	f   workerproto.Frame
	err error
}

// session is Run's connection to the agent.
type session struct {
	c       *workerproto.Conn
	frames  chan frameOrErr // what the reader does not handle itself
	quit    chan struct{}
	pending *workerproto.Frame // a report not yet sent
	batch   int                // tasks to ask for in the next fetch

	mu sync.Mutex
	// queue holds the tasks fetched and not started, in order. The reader
	// takes from it what the agent asks back (Release), so Run takes the
	// next task from it under mu: a task taken has started.
	queue []*api.Task
	// running is the task the handler runs, if any: the reader cancels it
	// when the agent says so or the connection fails.
	running *runningTask
	// cancelled holds cancels for tasks held but not started yet: the
	// reason each is to be reported with when its turn comes. They are
	// kept per attempt: a cancel of an attempt already reported must not
	// hit the task's next attempt, which may be the next task fetched.
	cancelled map[attemptKey]string
}

// attemptKey names one attempt of a task; attempt 0 means whichever
// attempt the worker holds.
type attemptKey struct {
	id      string
	attempt int
}

// cancelledLocked returns the reason t is to be skipped with, if a cancel
// came for it (for its attempt, or for any attempt) before it started.
func (s *session) cancelledLocked(t *api.Task) (string, bool) {
	if reason, ok := s.cancelled[attemptKey{t.ID, t.Attempt}]; ok {
		return reason, true
	}
	reason, ok := s.cancelled[attemptKey{t.ID, 0}]
	return reason, ok
}

// runningTask is the task the handler runs.
type runningTask struct {
	id      string
	attempt int
	cancel  context.CancelCauseFunc
	lost    error // why the connection failed while it ran
}

// take returns the next task to start, nil if none is held.
func (s *session) take() *api.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil
	}
	t := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return t
}

// holds says whether tasks wait to start.
func (s *session) holds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0
}

// release drops the tasks named that wait to start and tells the agent
// which. It writes the answer with mu held: Run sees the queue empty, and
// fetches, only after the answer is on its way, and the agent wants it
// before the fetch. A Release that comes between a batch's arrival and
// Run's keeping it finds nothing to drop: those tasks then run here.
func (s *session) release(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	dropped := []string{}
	s.queue = slices.DeleteFunc(s.queue, func(t *api.Task) bool {
		if asked[t.ID] {
			dropped = append(dropped, t.ID)
			return true
		}
		return false
	})
	s.c.Write(workerproto.Frame{Op: workerproto.OpReleased, Released: &workerproto.Released{TaskIDs: dropped}})
}

// flush sends a report still waiting for the next fetch.
func (s *session) flush() {
	if s.pending != nil {
		s.c.Write(*s.pending)
		s.pending = nil
	}
}

// read reads the agent's frames. It acts on cancels and releases itself,
// so that the handler runs on Run's goroutine with no other waiting on it,
// and hands the rest to Run; another frame while a task runs, or a failed
// connection, cancels that task.
func (s *session) read() {
	for {
		f, err := s.c.Read()
		if err == nil && f.Op == workerproto.OpCancel && f.Cancel != nil {
			s.cancel(f.Cancel.TaskID, f.Cancel.Attempt, f.Cancel.Reason)
			continue
		}
		if err == nil && f.Op == workerproto.OpRelease && f.Release != nil {
			s.release(f.Release.TaskIDs)
			continue
		}
		s.mu.Lock()
		if r := s.running; r != nil && r.lost == nil {
			r.lost = err
			if err == nil {
				r.lost = fmt.Errorf("unexpected %q frame while running a task", f.Op)
			}
			r.cancel(errConnLost)
		}
		s.mu.Unlock()
		select {
		case s.frames <- frameOrErr{f, err}:
		case <-s.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// cancel cancels the running task if it is that attempt of taskID (any
// attempt if 0), or else notes the cancel for when the task's turn comes
// (or for nothing, if it was reported already).
func (s *session) cancel(taskID string, attempt int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.running; r != nil && r.id == taskID && (attempt == 0 || attempt == r.attempt) {
		r.cancel(&CancelError{Reason: reason})
		return
	}
	s.cancelled[attemptKey{taskID, attempt}] = reason
}

// next waits for the answer to a fetch: the tasks to run, in order, or nil
// when there are no more or ctx ended while none was on its way.
func (s *session) next(ctx context.Context) ([]*api.Task, error) {
	var stopWait <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-done:
			done, stopWait = nil, time.After(stopAnswerWait)
			continue
		case <-stopWait:
			return nil, nil
		case fe := <-s.frames:
			if fe.err != nil {
				if ctx.Err() != nil {
					return nil, nil
				}
				return nil, fmt.Errorf("worker: %w: %w", errConnLost, fe.err)
			}
			switch fe.f.Op {
			case workerproto.OpTask:
				tf := fe.f.Task
				if tf == nil || (!tf.Done && tf.Task == nil) {
					return nil, errors.New("worker: agent sent an empty task frame")
				}
				if tf.Done {
					return nil, nil
				}
				if slices.Contains(tf.More, nil) {
					return nil, errors.New("worker: agent sent an empty task in a batch")
				}
				return append([]*api.Task{tf.Task}, tf.More...), nil
			}
			return nil, fmt.Errorf("worker: unexpected %q frame from the agent", fe.f.Op)
		}
	}
}

// runTask runs one task through h and reports it.
func (s *session) runTask(ctx context.Context, h Handler, at *api.Task) error {
	t := Task{ID: at.ID, SuiteID: at.SuiteID, Argv: at.Argv, Env: at.Env, Workdir: at.Workdir,
		Timeout: time.Duration(at.Timeout), Attempt: at.Attempt, KillGrace: time.Duration(at.KillGrace)}
	// Taken before the deadline is set, so a task cut off by its timeout
	// reports at least the timeout as its duration.
	start := time.Now()
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if t.Timeout > 0 {
		var cancelT context.CancelFunc
		tctx, cancelT = context.WithTimeoutCause(tctx, t.Timeout, ErrTimeout)
		defer cancelT()
	}
	s.mu.Lock()
	running := &runningTask{id: t.ID, attempt: t.Attempt, cancel: cancel}
	s.running = running
	if reason, ok := s.cancelledLocked(at); ok { // came since Run looked
		cancel(&CancelError{Reason: reason})
	}
	s.mu.Unlock()
	res := call(tctx, h, t)
	s.mu.Lock()
	s.running = nil
	lost := running.lost
	s.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("worker: task %s: %w: %w", t.ID, errConnLost, lost)
	}
	var cause error
	if tctx.Err() != nil {
		cause = context.Cause(tctx)
	}
	outcome, reason := classify(res, cause, ctx.Err() != nil)
	took := time.Since(start)
	if took < shortTask {
		s.batch = batchMax
	} else {
		s.batch = 1
	}
	if err := s.report(at, res, outcome, reason, took); err != nil {
		return fmt.Errorf("worker: report task %s: %w", t.ID, err)
	}
	return nil
}

func (s *session) report(t *api.Task, res Result, outcome, reason string, d time.Duration) error {
	if len(res.Stdout) > maxTail || len(res.Stderr) > maxTail {
		keepFullOutput(t, res) // a handler's output, returned whole
	}
	r := api.TaskReport{TaskID: t.ID, Attempt: t.Attempt, Outcome: outcome, Reason: reason,
		Result: api.TaskResult{ExitCode: res.ExitCode, Signal: res.Signal,
			Stdout: tailString(res.Stdout), Stderr: tailString(res.Stderr), DurationMS: d.Milliseconds()}}
	s.pending = &workerproto.Frame{Op: workerproto.OpReport, Report: &workerproto.Report{TaskReport: r}}
	return nil
}

// call runs h, turning a panic into a failed result.
func call(ctx context.Context, h Handler, t Task) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			res = Result{ExitCode: -1, Err: fmt.Errorf("handler panicked: %v", v), Stderr: string(debug.Stack())}
		}
	}()
	return h(ctx, t)
}

// classify decides an attempt's outcome and reason from the handler's
// result, why its context ended (nil if it did not), and whether the
// worker is stopping.
//
// Only an attempt that nodemgr itself stopped (the worker is stopping) is
// reported stopped, which the server never counts. A SIGTERM or SIGINT
// that came while the task's context had not ended was not sent by
// nodemgr (a task that kills itself, a user's kill): that is a failure
// like any other signal, or a task that does so would be retried forever.
func classify(r Result, cause error, stopping bool) (outcome, reason string) {
	switch {
	case r.Err == nil && r.ExitCode == 0 && r.Signal == "":
		return api.OutcomeSucceeded, ""
	case stopping:
		return api.OutcomeStopped, "worker stopped"
	case errors.Is(cause, ErrTimeout):
		return api.OutcomeFailed, "timeout"
	case cause != nil && errors.As(cause, new(*CancelError)):
		return api.OutcomeFailed, cause.Error()
	case r.Err != nil:
		return api.OutcomeFailed, r.Err.Error()
	case r.Signal == "SIGTERM" || r.Signal == "SIGINT":
		return api.OutcomeFailed, "killed by " + r.Signal + " (not sent by nodemgr)"
	case r.Signal != "" && r.ExitCode > 0: // a Go program's fatal signal
		return api.OutcomeFailed, "crashed by " + r.Signal + " (Go runtime, exit status " + strconv.Itoa(r.ExitCode) + ")"
	case r.Signal != "":
		return api.OutcomeFailed, "killed by " + r.Signal
	}
	return api.OutcomeFailed, "exit status " + strconv.Itoa(r.ExitCode)
}

// sizeRuntime runs as many threads of Go code as the agent says this
// worker's share of the cores is (NODEMGR_WORKER_PROCS), plus extra, so
// that workers sharing cores do not spin threads on each other's;
// GOMAXPROCS, when the suite sets it, wins.
func sizeRuntime(extra int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if n, err := strconv.Atoi(os.Getenv(workerproto.EnvProcs)); err == nil && n > 0 {
		runtime.GOMAXPROCS(n + extra)
	}
}
