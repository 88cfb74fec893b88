package workerpool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// Source is where a pool's tasks come from and where their results go: the
// agent's link to the server.
//
// Fetch is called from one goroutine at a time. Report and Return are
// called in order from one delivery goroutine, never with the pool's lock
// held and never after Run has returned; they may run while Fetch does.
type Source interface {
	// Fetch claims up to max tasks. done means the suite will have no more
	// tasks: the pool stops asking. drained means no other task was
	// Ready: as after a fetch that claimed none, the pool asks again after
	// a growing wait (50ms to 2s) or on Wake, not at once to fill its
	// buffer.
	Fetch(ctx context.Context, max int) (tasks []api.Task, done, drained bool, err error)
	// Report delivers one attempt's result. It should not block for long.
	Report(r api.TaskReport)
	// Return gives back tasks that were fetched but never started.
	Return(ids []string)
}

// Config describes a pool.
type Config struct {
	SuiteID, SuiteName, NodeID string

	Workers  int             // 1..256
	Binding  *api.CPUBinding // nil: no pinning
	Prefetch int             // tasks buffered ahead; 0: every worker fetch asks the Source for one
	Command  []string        // the worker program and its arguments
	Env      []string        // environment for workers, over PATH, HOME, LANG and TZ (procenv); the pool adds NODEMGR_*
	// Dir is the workers' working directory, and where the pool's socket
	// lives unless SocketDir says otherwise: keep it short, a socket path
	// has at most 107 bytes.
	Dir string
	// SocketDir holds the pool's socket; empty: Dir. Where the suite's
	// code runs as another user, give a directory of the agent's that
	// this user cannot change (Dir is that user's): the pool sets the
	// socket's owner and mode there by path.
	SocketDir string
	Logger    *slog.Logger // nil: discard

	// RunAs is the user the suite's code runs as; nil: the pool's own.
	// The command worker (CommandWorker) then stays the pool's user,
	// which it needs to track and kill its tasks' processes, and starts
	// each task as RunAs (workerproto.EnvRunAs); any other worker program
	// runs the suite's code in its own process, so it is started as
	// RunAs, and its socket is given to RunAs to connect to.
	RunAs *runas.User
	// CommandWorker says Command is `nodemgr worker` (package worker's
	// RunCommandWorker), which starts tasks as RunAs by itself.
	CommandWorker bool

	// KillGrace is how long a worker asked to abandon its task (timeout,
	// Cancel) or to stop at once (Stop(false)) has before it is killed, on
	// top of the task's own kill_grace (api.DefaultKillGrace if unset),
	// which its processes get between SIGTERM and SIGKILL; 0 means 2s.
	KillGrace time.Duration
	// StopGrace is how long an idle worker has between SIGTERM and SIGKILL
	// when the pool winds down; 0 means 5s.
	StopGrace time.Duration
	// MayStart, when set, is asked before a buffered task goes to a
	// worker; while it says no, tasks stay buffered (call Resume once it
	// would say yes). The agent closes it while it is out of touch with
	// the server long enough that its tasks may have been given to others.
	MayStart func() bool
}

// Limits and timings.
const (
	MaxWorkers  = 256
	MaxPrefetch = 4096 // the server's bound on one fetch

	defaultKillGrace = 2 * time.Second
	defaultStopGrace = 5 * time.Second
	// doneWait is how long workers told Done get to exit by themselves
	// before the pool sends SIGTERM.
	doneWait = time.Second
	// lostConnGrace is how long a worker that closed its connection gets to
	// exit before it is dropped: a crash closes the socket a moment before
	// Wait reports the signal, and the crash must win.
	lostConnGrace = time.Second
	// connDrainWait bounds how long the end of a worker's process waits
	// for its connection to be read to the end. The process is gone, so
	// its socket is closed and the wait is short; only a child that
	// inherited the socket against CLOEXEC could hold it open.
	connDrainWait = time.Second
	helloTimeout  = 10 * time.Second
	// connectTimeout is how long a new worker has to say hello: a program
	// that is not a worker (a plain script named as worker_command) would
	// otherwise sit on its slot forever. Generous, for slow interpreters.
	connectTimeout = 60 * time.Second
	// maxSilentDeaths consecutive exits of a worker before it says hello
	// end Run with an error: the command is broken, not the task.
	maxSilentDeaths = 5
	// Respawn delays for workers that die within healthyLife of starting.
	respawnMin  = 100 * time.Millisecond
	respawnMax  = 5 * time.Second
	healthyLife = time.Second
	// maxFetchPerWorker bounds the tasks one worker takes in one fetch.
	maxFetchPerWorker = 16
	// leanAfterRelease is how long workers take one task per fetch after
	// a Release that wanted tasks they held queued: the server asks again
	// within a second or two while another node still lacks tasks.
	leanAfterRelease = 10 * time.Second
	// Waits between fetches that found nothing.
	fetchMinWait = 50 * time.Millisecond
	fetchMaxWait = 2 * time.Second
	// maxTail bounds each output tail in a report, as the server does.
	maxTail = 64 << 10
)

type stopMode int

const (
	stopNone     stopMode = iota
	stopGraceful          // no new tasks; running ones finish
	stopForce             // workers are being killed
)

// Pool runs one suite's workers. Create it with New, then call Run once.
type Pool struct {
	cfg  Config
	src  Source
	log  *slog.Logger
	sock string

	connectTimeout time.Duration // the constant, but tests shorten it

	wake    chan struct{} // Wake: fetch now
	need    chan struct{} // the fetcher may have work
	starved chan struct{} // a worker waits and nothing is buffered
	kick    chan struct{} // Run re-checks whether it is done
	outKick chan struct{} // the delivery goroutine has work
	stopCh  chan struct{} // closed when stopping begins

	slotWG sync.WaitGroup // slot loops
	connWG sync.WaitGroup // accept loop and connection readers
	bgWG   sync.WaitGroup // fetcher

	mu      sync.Mutex
	started bool
	closed  bool // Run has returned
	stop    stopMode
	fatal   error
	done    bool // the source has no more tasks
	// drained: the last fetch saw no other task Ready. Until a backoff
	// ends or Wake, the buffer is not refilled; a worker left with
	// nothing to run still fetches.
	drained   bool
	wakes     int // Wake calls so far: one during a fetch makes its answer old
	slots     []*slot
	buf       []api.Task       // fetched, not started, in order
	inflight  int              // tasks asked for by fetches still on their way
	waiting   []*slot          // workers with a fetch the buffer could not answer
	held      map[string]*slot // task ID → the worker running it
	conns     map[*workerproto.Conn]bool
	outbox    []delivery
	outClosed bool
	// leanUntil: until then a worker's fetch takes one task, not a
	// batch (Release).
	leanUntil time.Time
	respawns  int
	dropped   int
	reported  int
	lat       latencies
}

type delivery struct {
	report *api.TaskReport
	ret    []string
}

// New checks cfg, including that the cores it binds to exist here.
func New(cfg Config, src Source) (*Pool, error) {
	if src == nil {
		return nil, errors.New("worker pool: no task source")
	}
	if cfg.Workers < 1 || cfg.Workers > MaxWorkers {
		return nil, fmt.Errorf("worker pool: %w", errdefs.Field("workers", "must be 1..%d, got %d", MaxWorkers, cfg.Workers))
	}
	if cfg.Prefetch < 0 || cfg.Prefetch > MaxPrefetch {
		return nil, fmt.Errorf("worker pool: %w", errdefs.Field("prefetch", "must be 0..%d, got %d", MaxPrefetch, cfg.Prefetch))
	}
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, fmt.Errorf("worker pool: %w", errdefs.Field("command", "is empty"))
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("worker pool: %w", errdefs.Field("dir", "is empty"))
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("worker pool: dir %s: %w", cfg.Dir, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("worker pool: %w", errdefs.Field("dir", "%s is not a directory", dir))
	}
	cfg.Dir = dir
	plan, err := planCPUs(cfg.Binding, cfg.Workers)
	if err != nil {
		return nil, fmt.Errorf("worker pool: %w", errors.Join(errdefs.ErrInvalid, err))
	}
	if cfg.Binding != nil {
		if err := checkCores(cfg.Binding.Cores); err != nil {
			return nil, fmt.Errorf("worker pool: %w", errors.Join(errdefs.ErrInvalid, err))
		}
	}
	if cfg.RunAs != nil && !canRunAs {
		return nil, fmt.Errorf("worker pool: run as %s: %w", cfg.RunAs, errors.ErrUnsupported)
	}
	sockDir := dir
	if cfg.SocketDir != "" {
		if sockDir, err = filepath.Abs(cfg.SocketDir); err != nil {
			return nil, fmt.Errorf("worker pool: socket dir %s: %w", cfg.SocketDir, err)
		}
	}
	sock, err := socketPath(sockDir, cfg.RunAs != nil && !cfg.CommandWorker)
	if err != nil {
		return nil, fmt.Errorf("worker pool: %w", err)
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = defaultKillGrace
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = defaultStopGrace
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		cfg: cfg, src: src, log: log, sock: sock,
		wake: make(chan struct{}, 1), need: make(chan struct{}, 1), starved: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		outKick: make(chan struct{}, 1), stopCh: make(chan struct{}),
		held: map[string]*slot{}, conns: map[*workerproto.Conn]bool{},
		connectTimeout: connectTimeout,
	}
	for i := range cfg.Workers {
		p.slots = append(p.slots, &slot{id: i, cpus: plan[i]})
	}
	return p, nil
}

// Run starts the workers and serves them until the source is done and no
// task is in flight, or until Stop or ctx ends it; then it stops the
// workers (Done, SIGTERM, SIGKILL after StopGrace) and waits for them.
// Tasks still buffered are returned to the source. Stopping is not an
// error: Run returns nil then, and an error only when the workers cannot
// run (socket, command, a worker that dies before it ever connects).
//
// Run after Stop returns nil at once.
func (p *Pool) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return errors.New("worker pool: Run called twice")
	}
	p.started = true
	if p.stop != stopNone {
		p.closed = true
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()

	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		return fmt.Errorf("worker pool: listen on %s: %w", p.sock, err)
	}
	// Only the workers' user may connect and play worker: this user's, or
	// RunAs for a worker program that runs as RunAs.
	if err := p.ownSocket(); err != nil {
		ln.Close()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		return fmt.Errorf("worker pool: socket %s: %w", p.sock, err)
	}
	delivered := make(chan struct{})
	go p.deliverLoop(delivered)
	p.connWG.Add(1)
	go p.acceptLoop(ln)

	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	for _, s := range p.slots {
		cmd, err := p.spawn(s)
		if err != nil {
			if !errors.Is(err, errStopping) {
				p.mu.Lock()
				p.fatal = err
				p.mu.Unlock()
			}
			break
		}
		p.slotWG.Add(1)
		go p.slotLoop(s, cmd)
	}
	p.mu.Lock()
	if p.fatal == nil {
		for range fetchers {
			p.bgWG.Add(1)
			go p.fetchLoop(fctx)
		}
	}
	p.mu.Unlock()
	p.log.Info("workers started", "workers", p.cfg.Workers, "prefetch", p.cfg.Prefetch, "socket", p.sock)

	var mode stopMode
	for {
		p.mu.Lock()
		m, end := p.endLocked()
		p.mu.Unlock()
		if end {
			mode = m
			break
		}
		select {
		case <-p.kick:
		case <-ctx.Done():
			p.Stop(false)
		}
	}

	// Wind down. Fetch first, so that nothing new arrives. A graceful end
	// lets a fetch on its way finish: the server may have claimed tasks
	// for it already, and cancelling it would leave them Running here
	// with nobody to run or return them. What it brings goes straight
	// back (addLocked, now that the pool stops). The fetchers leave by
	// themselves once the pool stops; a forced end does not wait.
	if mode == stopGraceful {
		fetched := make(chan struct{})
		go func() { p.bgWG.Wait(); close(fetched) }()
		select {
		case <-fetched:
		case <-time.After(fetchDrainWait):
		}
	}
	fcancel()
	p.bgWG.Wait()
	exited := make(chan struct{})
	go func() { p.slotWG.Wait(); close(exited) }()
	grace := p.cfg.KillGrace
	if mode == stopGraceful {
		grace = p.cfg.StopGrace
		select { // workers told Done leave by themselves
		case <-exited:
		case <-time.After(doneWait):
		}
	}
	p.mu.Lock()
	for _, s := range p.slots {
		p.terminateLocked(s, grace)
	}
	p.mu.Unlock()
	<-exited

	ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.connWG.Wait()

	p.mu.Lock()
	p.closed = true
	p.outClosed = true
	err = p.fatal
	p.mu.Unlock()
	p.signal(p.outKick)
	<-delivered
	if err != nil {
		p.log.Error("worker pool failed", "err", err)
	} else {
		p.log.Info("workers stopped")
	}
	return err
}

// endLocked says whether Run should wind down, and how.
func (p *Pool) endLocked() (stopMode, bool) {
	switch {
	case p.fatal != nil:
		p.beginStopLocked(stopForce)
		return stopForce, true
	case p.stop == stopForce:
		return stopForce, true
	case p.stop == stopGraceful && len(p.held) == 0:
		return stopGraceful, true
	case p.stop == stopNone && p.done && len(p.buf) == 0 && len(p.held) == 0:
		p.beginStopLocked(stopGraceful)
		return stopGraceful, true
	}
	return stopNone, false
}

// Stop ends the pool. Graceful: no new tasks start, buffered ones are
// returned, running ones finish, then Run returns. Not graceful: workers are
// sent SIGTERM and killed after KillGrace; their tasks are reported
// stopped unless they report first. A forced Stop may follow a graceful
// one. Stop does not wait; Run's return says the pool is done.
func (p *Pool) Stop(graceful bool) {
	mode := stopForce
	if graceful {
		mode = stopGraceful
	}
	p.mu.Lock()
	p.beginStopLocked(mode)
	p.mu.Unlock()
}

func (p *Pool) beginStopLocked(mode stopMode) {
	if p.closed || mode <= p.stop {
		return
	}
	first := p.stop == stopNone
	p.stop = mode
	if first {
		close(p.stopCh)
		ids := make([]string, len(p.buf))
		for i, t := range p.buf {
			ids[i] = t.ID
		}
		p.buf = nil
		p.returnLocked(ids)
		p.dispatchLocked() // idle workers get Done
	}
	if mode == stopForce {
		for _, s := range p.slots {
			p.terminateLocked(s, p.cfg.KillGrace)
		}
	}
	p.signal(p.kick)
}

// Cancel abandons one attempt of a task if this pool has it: a running
// task's worker is asked to drop it and killed if it has not within the
// task's kill grace (plus a margin); a buffered task is taken out. Either
// way the task is reported failed with reason "cancelled". Attempt 0
// means whichever attempt the pool holds; another attempt than the one
// held is left alone, so a cancel meant for an attempt already reported
// never hits the task's retry. It returns whether the pool had the
// attempt.
func (p *Pool) Cancel(taskID string, attempt int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if s := p.held[taskID]; s != nil {
		j := s.holding(taskID)
		if j == nil || (attempt != 0 && j.task.Attempt != attempt) {
			return false
		}
		if j.verdict == "" {
			p.abandonLocked(s, j, "cancelled")
		}
		return true
	}
	for i, t := range p.buf {
		if t.ID == taskID && (attempt == 0 || t.Attempt == attempt) {
			p.buf = slices.Delete(p.buf, i, i+1)
			p.reportLocked(api.TaskReport{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeFailed,
				Reason: "cancelled", Result: api.TaskResult{ExitCode: -1}})
			p.needFetchLocked()
			return true
		}
	}
	return false
}

// Release gives back up to n tasks that no worker has started, through
// the source's Return, and returns how many it gives or asked workers for.
// The server asks for this when another node of the suite has nothing to
// run while this one holds more than its share.
//
// Buffered tasks go first, the last fetched first (those the pool would
// have run last). Then tasks workers hold queued behind the one they run
// (a batch), the last queued first, from the workers that hold the most:
// the pool cannot know a worker has not started one (it starts the next
// the moment it has sent the last one's report), so it asks the worker
// (workerproto.Release), which gives back only those it has not taken up,
// and returns them when the answer comes (releasedLocked). Workers too old
// to answer keep theirs; the pool then hands out one task per fetch for
// leanAfterRelease, so that what it holds unstarted stays in the buffer,
// where the next ask finds it.
func (p *Pool) Release(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.stop != stopNone || n <= 0 {
		return 0
	}
	got := p.releaseBufferedLocked(n)
	got += p.releaseQueuedLocked(n - got)
	if got < n && p.unreleasableLocked() > 0 {
		p.leanUntil = time.Now().Add(leanAfterRelease)
	}
	// No fetch now: the server would cap it at the share this pool holds.
	return got
}

// releaseBufferedLocked returns up to n buffered tasks, the last first.
func (p *Pool) releaseBufferedLocked(n int) int {
	n = min(n, len(p.buf))
	if n == 0 {
		return 0
	}
	keep := len(p.buf) - n
	ids := make([]string, n)
	for i, t := range p.buf[keep:] {
		ids[i] = t.ID
	}
	clear(p.buf[keep:])
	p.buf = p.buf[:keep]
	p.returnLocked(ids)
	return n
}

// releaseQueuedLocked asks workers for up to n of the tasks they hold
// queued, each from the worker with the most left to ask for, the last of
// its queue first, and returns how many it asked for.
func (p *Pool) releaseQueuedLocked(n int) int {
	asks := map[*slot][]string{}
	for range n {
		var from *slot
		var pick *job
		most := 0
		for _, s := range p.slots {
			if c, last := releasable(s); c > most {
				from, pick, most = s, last, c
			}
		}
		if from == nil {
			break
		}
		pick.releasing = true
		asks[from] = append(asks[from], pick.task.ID)
	}
	asked := 0
	for s, ids := range asks {
		err := s.conn.Write(workerproto.Frame{Op: workerproto.OpRelease, Release: &workerproto.Release{TaskIDs: ids}})
		if err != nil { // the connection is failing: its end requeues them
			continue
		}
		asked += len(ids)
	}
	return asked
}

// releasable counts the queued tasks s's worker may be asked to give
// back, and returns the last of them: not asked already, not cancelled,
// and the worker connected and able to answer.
func releasable(s *slot) (int, *job) {
	if s.conn == nil || !s.releases || s.retired {
		return 0, nil
	}
	n := 0
	var last *job
	for i := len(s.queued) - 1; i >= 0; i-- {
		if j := s.queued[i]; !j.releasing && j.verdict == "" {
			if last == nil {
				last = j
			}
			n++
		}
	}
	return n, last
}

// unreleasableLocked counts the tasks workers hold queued that the pool
// cannot ask back: their workers do not answer Release.
func (p *Pool) unreleasableLocked() int {
	n := 0
	for _, s := range p.slots {
		if !s.releases {
			n += len(s.queued)
		}
	}
	return n
}

// releasedLocked takes back the tasks s's worker gave up unstarted when
// asked (Release) and returns them to the source; one the pool meanwhile
// decided to end (cancelled, revoked) is reported so, as the worker would
// have when its turn came. The first may be the one the pool took to run
// since: the answer crossed the report of the task before it, and the
// worker then runs the next it kept. It says false, having dropped the
// worker, if the worker names a task it does not hold queued or was not
// asked for.
func (p *Pool) releasedLocked(s *slot, ids []string) bool {
	for _, id := range ids {
		if j := s.holding(id); j == nil || !j.releasing {
			p.dropLocked(s, fmt.Errorf("released task %q it was not asked for", id))
			return false
		}
	}
	var back []string
	promote := false
	for _, id := range ids {
		j := s.holding(id)
		if j == nil { // named twice
			continue
		}
		if s.job == j {
			s.job, promote = nil, true
		} else {
			s.queued = slices.DeleteFunc(s.queued, func(q *job) bool { return q == j })
		}
		p.releaseLocked(j)
		if j.verdict != "" {
			p.reportLocked(api.TaskReport{TaskID: id, Attempt: j.task.Attempt, Outcome: api.OutcomeFailed,
				Reason: j.verdict, Result: api.TaskResult{ExitCode: -1}})
			continue
		}
		back = append(back, id)
	}
	if promote {
		p.promoteLocked(s)
	}
	if len(back) > 0 {
		p.log.Debug("workers gave back unstarted tasks", "worker", s.id, "tasks", len(back))
	}
	p.returnLocked(back)
	return true
}

// Resume hands buffered tasks to waiting workers again after MayStart
// said no.
func (p *Pool) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.dispatchLocked()
	}
}

// Revoke forgets tasks that are no longer this pool's to run (the server
// gave them to another node while this one was out of touch): buffered
// ones are dropped without a report or a return, and a worker that holds
// one is asked to drop it, as for Cancel, with reason "revoked". It
// returns how many it dropped from the buffer.
func (p *Pool) Revoke(ids []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(ids) == 0 {
		return 0
	}
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
		if s := p.held[id]; s != nil {
			if j := s.holding(id); j != nil && j.verdict == "" {
				p.abandonLocked(s, j, revokedReason)
			}
		}
	}
	n := len(p.buf)
	p.buf = slices.DeleteFunc(p.buf, func(t api.Task) bool { return gone[t.ID] })
	dropped := n - len(p.buf)
	if dropped > 0 {
		p.log.Info("dropped buffered tasks the server gave to others", "tasks", dropped)
		p.needFetchLocked()
	}
	return dropped
}

// revokedReason ends an attempt the server took back while the node was
// out of touch; the server counts no report of it.
const revokedReason = "revoked: the server gave this task to another node while this one was out of touch"

// mayStartLocked says whether buffered tasks may go to workers now.
func (p *Pool) mayStartLocked() bool { return p.cfg.MayStart == nil || p.cfg.MayStart() }

// Wake makes the pool ask its source for tasks now, cutting short the wait
// after a fetch that found none. Call it when the server says tasks arrived.
func (p *Pool) Wake() {
	p.mu.Lock()
	p.drained = false
	p.wakes++
	p.mu.Unlock()
	p.signal(p.wake)
}

// Unstarted is how many tasks the pool holds that no worker has started:
// buffered, or queued in a worker's batch behind the task it runs.
func (p *Pool) Unstarted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := 0
	for _, s := range p.slots {
		if s.job != nil {
			busy++
		}
	}
	return len(p.buf) + max(0, len(p.held)-busy)
}

// Stats returns a snapshot of the pool.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Stats{Workers: p.cfg.Workers, Buffered: len(p.buf), Respawns: p.respawns,
		Dropped: p.dropped, Reported: p.reported, FetchLatency: p.lat.summary()}
	for _, s := range p.slots {
		w := WorkerStats{ID: s.id, CPUs: slices.Clone(s.cpus)}
		if s.proc != nil {
			st.Alive++
			w.PID = s.proc.Pid
		}
		if s.conn != nil && !s.retired {
			st.Connected++
		}
		if s.job != nil {
			st.Busy++
			w.TaskID = s.job.task.ID
		}
		st.PerWorker = append(st.PerWorker, w)
	}
	return st
}

// reportLocked queues a report for the source.
func (p *Pool) reportLocked(r api.TaskReport) {
	r.Result.NodeID = p.cfg.NodeID
	if r.Result.FinishedAt.IsZero() {
		r.Result.FinishedAt = time.Now().UTC()
	}
	r.Result.Stdout, r.Result.Stderr = tail(r.Result.Stdout), tail(r.Result.Stderr)
	p.reported++
	p.outbox = append(p.outbox, delivery{report: &r})
	p.signal(p.outKick)
}

// returnLocked queues unstarted tasks to go back to the source.
func (p *Pool) returnLocked(ids []string) {
	if len(ids) == 0 {
		return
	}
	p.outbox = append(p.outbox, delivery{ret: ids})
	p.signal(p.outKick)
}

// deliverLoop calls the source's Report and Return outside the lock, in
// order, until Run closes the outbox and it is empty.
func (p *Pool) deliverLoop(delivered chan<- struct{}) {
	defer close(delivered)
	for {
		p.mu.Lock()
		batch, closed := p.outbox, p.outClosed
		p.outbox = nil
		p.mu.Unlock()
		for _, d := range batch {
			if d.report != nil {
				p.src.Report(*d.report)
			} else {
				p.src.Return(d.ret)
			}
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-p.outKick
	}
}

// signal wakes whoever waits on c without blocking.
func (p *Pool) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func tail(s string) string {
	if len(s) <= maxTail {
		return s
	}
	return s[len(s)-maxTail:]
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Holding lists the tasks the pool is responsible for: buffered, running,
// or finished with a report not yet handed to the source. An agent that
// reconnects tells the server these, so it reclaims only the others.
func (p *Pool) Holding() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.buf)+len(p.held)+len(p.outbox))
	for _, t := range p.buf {
		ids = append(ids, t.ID)
	}
	for id := range p.held {
		ids = append(ids, id)
	}
	for _, d := range p.outbox {
		if d.report != nil {
			ids = append(ids, d.report.TaskID)
		}
	}
	return ids
}

// workersSwitch says whether the worker processes themselves run as
// another user than the pool's.
func (p *Pool) workersSwitch() bool { return p.cfg.RunAs != nil && !p.cfg.CommandWorker }

// ownSocket makes the socket the workers' alone: mode 0600, owned by the
// user the worker processes run as. Lchown: the socket's directory is the
// agent's (SocketDir), and a link there is not followed.
func (p *Pool) ownSocket() error {
	if err := os.Chmod(p.sock, 0o600); err != nil {
		return err
	}
	if p.workersSwitch() {
		return os.Lchown(p.sock, int(p.cfg.RunAs.UID), int(p.cfg.RunAs.GID))
	}
	return nil
}

// maxSocketPath is the longest path a unix socket may have (sun_path).
const maxSocketPath = 107

// socketPath is where the pool's socket goes: in dir, or, when dir's path
// is too long for a unix socket (a deep data dir), in a private directory
// of this user's under the system's temp dir (passable, not listable, by
// others when the workers run as another user: passThrough). Either way
// only the workers' user may connect, and a worker must still show its
// token.
func socketPath(dir string, passThrough bool) (string, error) {
	name := "w-" + randHex(6) + ".sock"
	if sock := filepath.Join(dir, name); len(sock) <= maxSocketPath {
		return sock, nil
	}
	short := filepath.Join(os.TempDir(), fmt.Sprintf("nodemgr-%d", os.Getuid()))
	if err := privateDir(short); err != nil {
		return "", fmt.Errorf("%s is too long for a unix socket, and the short fallback: %w", dir, err)
	}
	if passThrough {
		if err := os.Chmod(short, 0o711); err != nil {
			return "", fmt.Errorf("%s is too long for a unix socket, and the short fallback: %w", dir, err)
		}
	}
	sock := filepath.Join(short, name)
	if len(sock) > maxSocketPath {
		return "", errdefs.Field("dir", "socket path %s is %d bytes, more than a unix socket allows (%d), and so is %s: set TMPDIR to a shorter directory",
			filepath.Join(dir, name), len(filepath.Join(dir, name)), maxSocketPath, sock)
	}
	return sock, nil
}

// privateDir makes dir, or checks the one there: a directory (not a link)
// of this user's that no one else may list or write to (0700, or 0711),
// so that no one else can put a socket in our way.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); !fi.IsDir() || (perm != 0o700 && perm != 0o711) || !ownedByMe(fi) {
		return fmt.Errorf("%s is not a private directory of this user's (mode %v): remove it, or set TMPDIR elsewhere", dir, fi.Mode())
	}
	return nil
}
