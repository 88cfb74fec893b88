package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/procenv"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"github.com/nodemgr/nodemgr/internal/node/workerpool"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// defaultIdlePoll is how often an idle agent asks for a suite when nobody
// wakes it, unless the server's welcome says otherwise.
const defaultIdlePoll = 5 * time.Second

// runner takes suites one at a time and walks the Mitosis state machine:
// Idle → Preparing → Executing → Cleanup → Idle.
type runner struct {
	env  runnerEnv
	wake chan struct{}
	// idlePoll is the server's IdlePoll, in nanoseconds; 0 until a
	// welcome says it.
	idlePoll atomic.Int64
	// takesHeld: the server takes the count of held tasks (Welcome).
	takesHeld atomic.Bool
	// taskLogMax: the bytes of each attempt's output the server keeps as
	// its full log (Welcome); 0: none.
	taskLogMax atomic.Int64
	// parksFetch: the server may hold a fetch that finds nothing (Welcome).
	parksFetch atomic.Bool

	mu       sync.Mutex
	run      *suiteRun // nil when idle
	stopping string    // shutdown mode once asked
	draining string    // why it takes no new suite (a spot interruption)
	stopped  chan struct{}
}

// suiteRun is the suite in progress.
type suiteRun struct {
	suite     api.Suite
	pool      *workerpool.Pool
	src       *taskSource
	files     *filesSource
	cancel    context.CancelFunc
	cancelled bool
	// stoppedHere: the pool was stopped by hand on this node (allocation
	// stop); the server keeps the suite off the node.
	stoppedHere bool
	left        chan struct{} // closed once the suite is left
}

// runnerEnv is what the runner needs of the agent, each part a small
// interface (the agent is all of them): no back-pointer to *Agent.
type runnerEnv struct {
	log     *slog.Logger
	server  serverLink // asks the server, and whether it still answers
	node    nodeWork   // the node's ID, and what it works on now
	sandbox sandboxes  // who code runs as, and its work dirs
	books   poolBooks  // the worker pool's place in the node's books
	// blobs moves task files; stop ends when the agent stops. Both are
	// made after the runner (when the agent runs), so they are read late.
	blobs func() *blobClient
	stop  func() <-chan struct{}
}

// serverLink is the agent's connection to its server.
type serverLink interface {
	call(ctx context.Context, method string, req, resp any) error
	// inTouch reports whether the server answered lately: a worker
	// starts no task while it does not (the task may be another's now).
	inTouch() bool
}

// nodeWork is the node's ID and the work it reports in its heartbeats.
type nodeWork interface {
	NodeID() string
	setWork(state, suite string)
}

// sandboxes are who suite code runs as and the suites' work dirs.
type sandboxes interface {
	resolveUser(field, name string) (runas.User, error)
	switchTo(u runas.User) *runas.User
	giveWorkDir(workDir string, as *runas.User) error
	takeWorkDir(workDir string, as *runas.User)
	suitesDir() string
	taskLogsDir() string
}

// poolBooks books a suite's worker pool on the node's hardware.
type poolBooks interface {
	machine() api.Hardware
	bookPool(suiteID string, workers int, cores []int)
	unbookPool(suiteID string)
}

func newRunner(a *Agent) *runner {
	env := runnerEnv{log: a.log, server: a, node: a, sandbox: a, books: a,
		blobs: func() *blobClient { return a.blobs }, stop: func() <-chan struct{} { return a.stopCtx.Done() }}
	return &runner{env: env, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// The agent as the runner's environment.

func (a *Agent) resolveUser(field, name string) (runas.User, error) {
	return a.users.Resolve(field, name)
}
func (a *Agent) machine() api.Hardware { return a.hardware }
func (a *Agent) bookPool(suiteID string, workers int, cores []int) {
	a.wl.bookPool(suiteID, workers, cores)
}
func (a *Agent) unbookPool(suiteID string) { a.wl.unbook(api.AllocationPool, suiteID) }

func (r *runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
	r.mu.Lock()
	if r.run != nil && r.run.pool != nil {
		r.run.pool.Wake()
	}
	r.mu.Unlock()
}

// loop runs suites until ctx ends or a shutdown is requested.
func (r *runner) loop(ctx context.Context) {
	defer close(r.stopped)
	poll := false
	for ctx.Err() == nil && !r.shuttingDown() {
		if r.drainingFor() != "" {
			// No new suite: wait for the shutdown, or the machine's end.
			select {
			case <-ctx.Done():
			case <-r.wake:
			}
			continue
		}
		su, err := r.next(ctx, poll)
		if err != nil && ctx.Err() == nil {
			r.env.log.Debug("ask for a suite", "err", err)
		}
		poll = false
		if su == nil {
			select {
			case <-ctx.Done():
			case <-r.wake:
			case <-time.After(cmp.Or(time.Duration(r.idlePoll.Load()), defaultIdlePoll)):
				poll = true // nothing woke it: the server may answer from a recent listing
			}
			continue
		}
		r.runSuite(ctx, *su)
	}
}

func (r *runner) shuttingDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopping != ""
}

func (r *runner) next(ctx context.Context, poll bool) (*api.Suite, error) {
	var resp api.SuiteNext
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.env.server.call(cctx, api.MethodSuiteNext, api.SuiteNextRequest{Poll: poll}, &resp); err != nil {
		return nil, err
	}
	return resp.Suite, nil
}

// runSuite prepares, executes and cleans up one suite, then tells the server
// it left and why.
func (r *runner) runSuite(parent context.Context, su api.Suite) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	run := &suiteRun{suite: su, cancel: cancel, left: make(chan struct{})}
	r.mu.Lock()
	r.run = run
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.run = nil
		r.mu.Unlock()
		close(run.left)
		r.env.node.setWork(api.AgentIdle, "")
	}()
	log := r.env.log.With("suite", su.ID, "name", su.Name)
	workDir := filepath.Join(r.env.sandbox.suitesDir(), su.ID)
	// worker_count 0 leaves the count to the node: one per CPU it may use.
	su.WorkerSchedule.WorkerCount = su.WorkerSchedule.WorkersOn(r.env.books.machine())

	r.env.node.setWork(api.AgentPreparing, su.ID)
	// Who the suite's code runs as: a run_as this agent cannot honour is
	// refused as a failed prepare, never run as someone else.
	user, err := r.env.sandbox.resolveUser("run_as", su.RunAs)
	if err != nil {
		log.Warn("cannot run the suite as its run_as; leaving the suite", "err", err)
		r.leaveUnprepared(parent, ctx, su.ID, api.StagePrepare, err)
		return
	}
	as := r.env.sandbox.switchTo(user)
	log.Info("preparing suite", "user", user.String())
	if err := r.env.sandbox.giveWorkDir(workDir, as); err != nil {
		log.Warn("prepare failed; leaving the suite", "err", err)
		r.leaveUnprepared(parent, ctx, su.ID, api.StagePrepare, err)
		return
	}
	defer r.env.sandbox.takeWorkDir(workDir, as)
	if err := r.prepare(ctx, su, workDir, as); err != nil {
		log.Warn("prepare failed; leaving the suite", "err", err)
		r.leaveUnprepared(parent, ctx, su.ID, api.StagePrepare, err)
		return
	}

	r.env.node.setWork(api.AgentExecuting, su.ID)
	src := startTaskSource(r.env.server.call, r.env.stop(), r.env.log, su.ID)
	src.parks = r.parksFetch.Load
	logs := r.taskLogs(su, as, log)
	defer logs.remove()
	files, err := newFilesSource(src, r.env.blobs(), workDir, as, r.env.stop(), log)
	var pool *workerpool.Pool
	if err == nil {
		files.logs = logs
		pool, err = workerpool.New(r.poolConfig(su, workDir, as, logs), files)
	}
	if err != nil {
		log.Warn("cannot start workers; leaving the suite", "err", err)
		if files != nil {
			files.drain()
		}
		src.close(parent)
		r.runHook(parent, su, workDir, "cleanup", su.Hooks.Cleanup, as)
		r.leaveUnprepared(parent, ctx, su.ID, api.StageWorkers, err)
		return
	}
	src.countUnstarted(func() (int, bool) { return pool.Unstarted(), r.takesHeld.Load() })
	r.mu.Lock()
	run.pool, run.src, run.files = pool, src, files
	stop, draining := r.stopping, r.draining
	r.mu.Unlock()
	if stop != "" {
		pool.Stop(stop == api.ShutdownGraceful)
	} else if draining != "" {
		pool.Stop(true) // the drain began while it prepared
	}
	log.Info("executing suite", "workers", su.WorkerSchedule.WorkerCount)
	var cores []int
	if b := su.WorkerSchedule.CPUBinding; b != nil {
		cores = b.Cores
	}
	r.env.books.bookPool(su.ID, su.WorkerSchedule.WorkerCount, cores)
	defer r.env.books.unbookPool(su.ID)
	if err := pool.Run(ctx); err != nil && ctx.Err() == nil {
		log.Warn("worker pool ended with an error", "err", err)
	}
	files.drain()     // outputs uploaded, reports handed on
	src.close(parent) // every report reaches the server before we leave
	st := pool.Stats()
	log.Info("workers stopped", "reported", st.Reported, "respawns", st.Respawns, "dropped", st.Dropped,
		"fetch_p50", st.FetchLatency.P50, "fetch_p99", st.FetchLatency.P99)
	writeStats(workDir, st)

	reason := "complete"
	r.mu.Lock()
	force := r.stopping == api.ShutdownForce
	stoppedHere := run.stoppedHere
	switch {
	case stoppedHere:
		reason = "stopped on this node by hand (allocation stop)"
	case run.cancelled:
		reason = "cancelled"
	case r.stopping != "":
		reason = "shutdown (" + r.stopping + ")"
	case r.draining != "":
		reason = "draining: " + r.draining
	case src.yielded() != "":
		reason = "moved on: " + src.yielded()
	}
	r.mu.Unlock()
	var problem *api.SuiteProblem
	if !force {
		r.env.node.setWork(api.AgentCleanup, su.ID)
		problem = r.cleanup(parent, su, workDir, as, log)
	}
	r.leaveWith(parent, api.SuiteLeave{SuiteID: su.ID, Reason: reason, Stopped: stoppedHere, Problem: problem})
	log.Info("left suite", "reason", reason)
}

// cleanup runs the suite's cleanup hook after it ran here. A hook that
// fails is the suite's problem on this node, for the server to keep and
// show with the suite as it does a failed prepare; nil when it worked.
func (r *runner) cleanup(ctx context.Context, su api.Suite, workDir string, as *runas.User, log *slog.Logger) *api.SuiteProblem {
	err := r.runHook(ctx, su, workDir, "cleanup", su.Hooks.Cleanup, as)
	if err == nil {
		return nil
	}
	log.Warn("cleanup hook failed", "err", err)
	p := problemOf(api.StageCleanup, err)
	return &p
}

// poolConfig is the suite's worker pool, its code run as as (nil: the
// agent's own user).
func (r *runner) poolConfig(su api.Suite, workDir string, as *runas.User, logs suiteLogs) workerpool.Config {
	ws := su.WorkerSchedule
	prefetch := 32
	if ws.TaskPrefetchCount != nil {
		prefetch = *ws.TaskPrefetchCount
	}
	cmd := ws.WorkerCommand
	if len(cmd) == 0 {
		self, err := os.Executable()
		if err != nil {
			self = "nodemgr"
		}
		cmd = []string{self, "worker"}
	}
	env := suiteEnv(su, r.env.node.NodeID())
	if as != nil {
		env = append(env, "HOME="+workDir) // the agent's HOME is not theirs
	}
	if logs.dir != "" {
		env = append(env, workerproto.EnvLogDir+"="+logs.dir, workerproto.EnvLogMax+"="+strconv.FormatInt(logs.max, 10))
	}
	return workerpool.Config{
		SuiteID: su.ID, SuiteName: su.Name, NodeID: r.env.node.NodeID(),
		Workers: ws.WorkerCount, Binding: ws.CPUBinding, Prefetch: prefetch,
		Command: cmd, Env: env, Dir: workDir, SocketDir: r.env.sandbox.suitesDir(),
		RunAs: as, CommandWorker: len(ws.WorkerCommand) == 0,
		Logger:   r.env.log.With("suite", su.ID),
		MayStart: r.env.server.inTouch,
	}
}

// writeStats leaves the pool's last stats in the suite's work dir, for
// whoever looks into a node afterwards (and for bench dispatch). The dir
// may be the suite's user's: it is written through an os.Root, so a link
// left there cannot send the agent's write elsewhere.
func writeStats(workDir string, st workerpool.Stats) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err == nil {
		var root *os.Root
		if root, err = os.OpenRoot(workDir); err == nil {
			err = root.WriteFile("pool-stats.json", b, 0o644)
			root.Close()
		}
	}
	if err != nil {
		slog.Default().Debug("write pool stats", "err", err)
	}
}

// suiteEnv is the context every hook and worker of a suite gets.
func suiteEnv(su api.Suite, nodeID string) []string {
	return []string{
		"NODEMGR_SUITE_ID=" + su.ID,
		"NODEMGR_SUITE_NAME=" + su.Name,
		"NODEMGR_WORKER_COUNT=" + strconv.Itoa(su.WorkerSchedule.WorkerCount),
		"NODEMGR_NODE_ID=" + nodeID,
		"NODEMGR_GROUP=" + su.Group,
	}
}

// prepare checks the binding fits this machine, and runs the prepare
// hook in the work dir.
func (r *runner) prepare(ctx context.Context, su api.Suite, workDir string, as *runas.User) error {
	if b := su.WorkerSchedule.CPUBinding; b != nil {
		cores := r.env.books.machine().Cores
		for i, c := range b.Cores {
			if cores > 0 && c >= cores {
				return errdefs.Field(fmt.Sprintf("worker_schedule.cpu_binding.cores[%d]", i), "core %d does not exist on this node (cores 0-%d)", c, cores-1)
			}
		}
	}
	return r.runHook(ctx, su, workDir, "prepare", su.Hooks.Prepare, as)
}

// runHook downloads a hook's resources and runs its command in the work
// dir, as the suite's user (as; nil: the agent's own), with the suite's
// context in its environment and its output in <workdir>/<name>.log.
//
// The work dir is the suite's user's: the agent writes there only through
// an os.Root, and reads the hook's output back from the file it opened,
// so that a link the suite's code left there cannot make it write or read
// anything outside.
func (r *runner) runHook(ctx context.Context, su api.Suite, workDir, name string, h *api.Hook, as *runas.User) error {
	if h == nil {
		return nil
	}
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(h.Timeout))
		defer cancel()
	}
	work, err := os.OpenRoot(workDir)
	if err != nil {
		return fmt.Errorf("%s hook: %w", name, err)
	}
	defer work.Close()
	for _, res := range h.Resources {
		if err := download(ctx, work, res.URL, filepath.FromSlash(res.Path), as); err != nil {
			return &hookError{name: name, command: h.Command, exit: -1, reason: err.Error(), cause: err}
		}
	}
	logPath := filepath.Join(workDir, name+".log")
	work.Remove(name + ".log") // a fresh file of the agent's, whatever was there
	logFile, err := work.OpenFile(name+".log", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("%s hook: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(h.Command[0], h.Command[1:]...)
	cmd.Dir = workDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A clean environment: the agent's holds its secrets.
	cmd.Env = append(procenv.Clean(), suiteEnv(su, r.env.node.NodeID())...)
	cmd.Env = append(cmd.Env, "NODEMGR_SUITE_DIR="+workDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if as != nil {
		cmd.SysProcAttr.Credential = as.Credential()
		cmd.Env = append(cmd.Env, "HOME="+workDir) // the agent's HOME is not theirs
	}
	for k, v := range h.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s hook: %w", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	fail := func(exit int, reason string, cause error) error {
		return &hookError{name: name, command: h.Command, log: logPath, exit: exit, reason: reason, cause: cause,
			tail: outputTail(logFile, api.MaxProblemOutput, api.MaxProblemLines)}
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fail(ee.ExitCode(), ee.Error(), err)
		}
		if err != nil {
			return fail(-1, err.Error(), err)
		}
		return nil
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fail(-1, fmt.Sprintf("timed out after %s", time.Duration(h.Timeout)), ctx.Err())
		}
		return fail(-1, ctx.Err().Error(), ctx.Err())
	}
}

// hookError is a hook command that failed: its exit code, why, and where
// its output is, so the agent can tell the server more than one line.
type hookError struct {
	name, log string // log: "" when the command never ran
	command   []string
	exit      int // -1: it did not exit by itself
	reason    string
	cause     error
	tail      string // the end of its output
}

func (e *hookError) Error() string {
	if e.log == "" { // it failed before the command ran
		return fmt.Sprintf("%s hook %v: %s", e.name, e.command, e.reason)
	}
	return fmt.Sprintf("%s hook %v: %s (output in %s)", e.name, e.command, e.reason, e.log)
}

func (e *hookError) Unwrap() error { return e.cause }

// problemOf turns a failure to take a suite up (or to clean up after it)
// into what the server keeps and shows: a hook's exit code, reason and the
// end of its output, or for any other error (a download, the binding
// check, the worker pool) its text with exit code -1.
func problemOf(stage string, err error) api.SuiteProblem {
	p := api.SuiteProblem{Stage: stage, ExitCode: -1, Reason: err.Error()}
	var he *hookError
	if errors.As(err, &he) {
		p.ExitCode, p.Reason = he.exit, he.reason
		p.OutputTail = he.tail
	}
	if len(p.Reason) > api.MaxProblemReason {
		p.Reason = p.Reason[:api.MaxProblemReason]
	}
	return p
}

// outputTail is the last lines of f, at most maxLines lines and maxBytes
// bytes (a partial first line is dropped); "" if unreadable.
func outputTail(f *os.File, maxBytes int64, maxLines int) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-maxBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return ""
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, nil))
}

// download fetches url into path in root with 3 tries (0 s, 1 s, 3 s
// apart), and gives it to as (nil: the agent's own user), with the
// directories it is in; a partial file never takes the final name.
func download(ctx context.Context, root *os.Root, url, path string, as *runas.User) error {
	var err error
	for _, wait := range []time.Duration{0, time.Second, 3 * time.Second} {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if err = downloadOnce(ctx, root, url, path); err == nil {
			return giveTo(root, path, as)
		}
	}
	return fmt.Errorf("download %s: %w", url, err)
}

// giveTo makes path, and the directories it is in below root, as's.
func giveTo(root *os.Root, path string, as *runas.User) error {
	if as == nil {
		return nil
	}
	for p := path; p != "." && p != string(filepath.Separator); p = filepath.Dir(p) {
		if err := root.Lchown(p, int(as.UID), int(as.GID)); err != nil {
			return fmt.Errorf("give %s to %s: %w", p, as, err)
		}
	}
	return nil
}

func downloadOnce(ctx context.Context, root *os.Root, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	if err := root.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".part"
	root.Remove(tmp)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		root.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Rename(tmp, path)
}

// leaveUnprepared leaves a suite the agent could not take up. A failure
// of the suite's own (its hook, its binding) goes to the server with its
// details; one because the suite was cancelled or the agent is stopping
// while it prepared (ctx ended) is not the suite's fault and is no problem.
func (r *runner) leaveUnprepared(parent, ctx context.Context, suiteID, stage string, err error) {
	if ctx.Err() != nil {
		r.mu.Lock()
		stoppedHere := r.run != nil && r.run.stoppedHere
		r.mu.Unlock()
		if stoppedHere {
			r.leaveWith(parent, api.SuiteLeave{SuiteID: suiteID, Reason: "stopped on this node by hand (allocation stop)", Stopped: true})
			return
		}
		r.leave(parent, suiteID, "cancelled while preparing")
		return
	}
	p := problemOf(stage, err)
	r.leaveWith(parent, api.SuiteLeave{SuiteID: suiteID, Reason: "prepare-failed: " + err.Error(), Problem: &p})
}

// leave tells the server the agent is done with the suite; it retries
// until the server hears it or the agent stops.
func (r *runner) leave(ctx context.Context, suiteID, reason string) {
	r.leaveWith(ctx, api.SuiteLeave{SuiteID: suiteID, Reason: reason})
}

func (r *runner) leaveWith(ctx context.Context, msg api.SuiteLeave) {
	for attempt := 0; attempt < 5; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.env.server.call(cctx, api.MethodSuiteLeave, msg, nil)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(time.Second)
	}
}

// stopSuiteHere stops the suite's pool on this node for good: running
// tasks are stopped (they go back to the queue, not counted as failures),
// buffered ones are returned, and the server is told to keep the suite
// off this node until it is assigned here again. The channel closes once
// the suite is left; nil if the suite does not run here.
func (r *runner) stopSuiteHere(suiteID string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil || r.run.suite.ID != suiteID {
		return nil
	}
	r.run.stoppedHere = true
	if r.run.pool != nil {
		r.run.pool.Stop(false)
	} else {
		r.run.cancel() // still preparing
	}
	return r.run.left
}

// cancelSuite stops the suite at once if it is the one running.
func (r *runner) cancelSuite(suiteID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil || r.run.suite.ID != suiteID {
		return
	}
	r.run.cancelled = true
	if r.run.pool != nil {
		r.run.pool.Stop(false)
	} else {
		r.run.cancel() // still preparing
	}
}

// holding lists the tasks this agent answers for: the pool's, and those
// whose reports wait for the server.
func (r *runner) holding() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil {
		return nil
	}
	var ids []string
	if r.run.pool != nil {
		ids = r.run.pool.Holding()
	}
	if r.run.src != nil {
		ids = append(ids, r.run.src.pendingIDs()...)
	}
	if r.run.files != nil {
		ids = append(ids, r.run.files.uploadingIDs()...)
	}
	return ids
}

// revoke drops the tasks the server gave to other nodes while this one
// was out of touch: buffered ones unstarted, running ones stopped.
func (r *runner) revoke(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != nil && r.run.pool != nil {
		n := r.run.pool.Revoke(ids)
		if r.run.src != nil {
			r.run.src.forget(n)
		}
	}
}

// resume lets the pool start the tasks it holds again, once the agent is
// back in touch with the server.
func (r *runner) resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != nil && r.run.pool != nil {
		r.run.pool.Resume()
	}
}

// cancelTask kills that attempt of a task (0: whichever attempt) if one
// of this agent's workers runs it.
func (r *runner) cancelTask(taskID string, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run != nil && r.run.pool != nil {
		r.run.pool.Cancel(taskID, attempt)
	}
}

// shutdown stops taking suites. Graceful lets running tasks finish within
// grace, then stops the rest; force stops them now. It returns when the
// current suite, if any, has been left.
func (r *runner) shutdown(mode string, grace time.Duration) {
	r.mu.Lock()
	r.stopping = mode
	run := r.run
	r.mu.Unlock()
	r.poke()
	switch {
	case run == nil:
	case run.pool != nil:
		run.pool.Stop(mode == api.ShutdownGraceful)
	case mode == api.ShutdownForce:
		run.cancel() // still preparing: stop that too
	}
	if mode == api.ShutdownGraceful {
		select {
		case <-r.stopped:
			return
		case <-time.After(grace):
			r.env.log.Warn("graceful shutdown grace expired; stopping workers", "grace", grace)
			r.mu.Lock()
			if r.run != nil && r.run.pool != nil {
				r.run.pool.Stop(false)
			}
			r.mu.Unlock()
		}
	}
	<-r.stopped
}
