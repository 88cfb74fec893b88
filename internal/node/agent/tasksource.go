package agent

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// maxReportBatch bounds one tasks.report call. The server applies a batch
// in one transaction on the store's single writer, where the next claim of
// tasks waits for it: 512 reports held the writer for 3-6 ms, longer than a
// busy pool takes to run its prefetch buffer dry. With 128, in-process
// workers ran 2.8% faster and the agent's p99 fetch fell from 2.7 to 1.9 ms.
const maxReportBatch = 128

// reportLinger is how long the first report of a batch waits for company
// under load. Each tasks.report costs the server a request and a store
// transaction whatever its size, so waiting longer buys fewer, larger
// batches; 10 ms against 2 ms cut the server's CPU per task by a tenth
// (in-process) to a third (command workers) in nodemgr bench dispatch.
// Lingering only pays when company comes, though. A report leaves at once
// when it follows the previous one by reportLinger or more (the pool is
// quiet), or when nothing else is in flight: the pool holds no other task
// and its last fetch found none Ready, so no report can follow before this
// one is stored (a dependency a chain waits on, the last task of a suite).
// A lone task is thus stored without the wait (bench latency), while a
// pool that merely runs its buffer dry between fetches still batches.
const reportLinger = 10 * time.Millisecond

// taskSource connects a worker pool to the server: it claims tasks with
// tasks.fetch and sends reports in batches. Under load a batch leaves once
// its first report has waited reportLinger (or it is full), also while a
// previous call was in flight, so batches grow with the load; a quiet pool
// reports at once. Reports wait out a lost connection; none is dropped
// while the agent lives.
type taskSource struct {
	call    func(ctx context.Context, method string, req, resp any) error
	stopped <-chan struct{} // the agent stops: give up retrying
	log     *slog.Logger
	suiteID string

	mu      sync.Mutex
	yield   string // why the server sent this node away from the suite
	pending []api.TaskReport
	since   time.Time // when the oldest pending report was queued, or before
	// urgent: the pending reports should leave without lingering.
	urgent bool
	// held counts the tasks fetched and neither reported nor returned:
	// buffered or running in the pool.
	held       int
	drained    bool      // the last fetch found nothing Ready
	lastReport time.Time // when the previous report was queued
	kick       chan struct{}
	closing    chan struct{}
	done       chan struct{}

	// unstarted counts the tasks the pool holds and has not started; the
	// server shows them apart from those that run (countUnstarted).
	unstarted atomic.Pointer[func() (int, bool)]
	// parks says the server may hold a fetch that finds nothing until
	// tasks are Ready (Welcome.ParksFetch); nil: it may not.
	parks func() bool
}

// fetchWait is how long a fetch that finds nothing may wait on the server
// for tasks to become Ready (api.TasksFetch.WaitMS). A graceful end of
// the pool waits for a fetch on its way (the server may have claimed
// tasks for it), so this also bounds what parking adds to one.
const fetchWait = time.Second

// countUnstarted makes fetches and reports say how many tasks f counts as
// held and not started, while f says the server takes it.
func (s *taskSource) countUnstarted(f func() (n int, ok bool)) { s.unstarted.Store(&f) }

// heldUnstarted is what the next call says of the tasks held and not
// started, or nil.
func (s *taskSource) heldUnstarted() *int {
	f := s.unstarted.Load()
	if f == nil {
		return nil
	}
	n, ok := (*f)()
	if !ok {
		return nil
	}
	return &n
}

func startTaskSource(call func(ctx context.Context, method string, req, resp any) error,
	stopped <-chan struct{}, log *slog.Logger, suiteID string) *taskSource {
	s := &taskSource{call: call, stopped: stopped, log: log, suiteID: suiteID, kick: make(chan struct{}, 1),
		closing: make(chan struct{}), done: make(chan struct{})}
	go s.flushLoop()
	return s
}

// Fetch claims up to max tasks. Done is true once the suite will give no
// more: it ended, or it is closed with nothing left to claim, or the
// server sends this node elsewhere (yielded says why). Drained says the
// server saw no other task Ready.
func (s *taskSource) Fetch(ctx context.Context, max int) (tasks []api.Task, done, drained bool, err error) {
	req := api.TasksFetch{SuiteID: s.suiteID, Max: max, Held: s.heldUnstarted()}
	if s.parks != nil && s.parks() {
		req.WaitMS = int(fetchWait / time.Millisecond)
	}
	var resp api.TasksFetched
	if err := s.call(ctx, api.MethodTasksFetch, req, &resp); err != nil {
		return nil, false, false, err
	}
	if resp.Yield != "" {
		s.mu.Lock()
		s.yield = resp.Yield
		s.mu.Unlock()
		s.log.Info("leaving the suite when the tasks at hand are done", "why", resp.Yield)
		return nil, true, false, nil
	}
	// Remaining is -1 when the fetch got all it asked for: more may wait.
	drained = len(resp.Tasks) == 0 || resp.Remaining == 0
	s.mu.Lock()
	s.held += len(resp.Tasks)
	s.drained = drained
	// Reports waiting for company that cannot come go now.
	kick := s.drained && s.held == 0 && len(s.pending) > 0 && !s.urgent
	if kick {
		s.urgent = true
	}
	s.mu.Unlock()
	if kick {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return resp.Tasks, resp.Done && len(resp.Tasks) == 0, drained, nil
}

// yielded says why the server sent the node away from the suite, if it did.
func (s *taskSource) yielded() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.yield
}

// Report queues one attempt's result.
func (s *taskSource) Report(r api.TaskReport) {
	now := time.Now()
	s.mu.Lock()
	s.held = max(0, s.held-1)
	if len(s.pending) == 0 {
		s.since = now
		// The first report in a while: the pool is quiet, so company is
		// not likely to come within the linger.
		s.urgent = now.Sub(s.lastReport) >= reportLinger
	}
	s.lastReport = now
	if s.held == 0 && s.drained {
		s.urgent = true // nothing else is in flight: no company will come
	}
	s.pending = append(s.pending, r)
	// The flusher waits for a first report, or for a full or urgent batch
	// while it lingers; waking it for the others would only cost a switch
	// each.
	wake := len(s.pending) == 1 || len(s.pending) >= maxReportBatch || s.urgent
	s.mu.Unlock()
	if wake {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// pendingIDs lists the tasks whose reports have not reached the server.
func (s *taskSource) pendingIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.pending))
	for i, r := range s.pending {
		ids[i] = r.TaskID
	}
	return ids
}

// forget stops counting n fetched tasks the pool dropped unstarted, as
// the server took them back: they are neither reported nor returned.
func (s *taskSource) forget(n int) {
	s.mu.Lock()
	s.held = max(0, s.held-n)
	s.mu.Unlock()
}

// Return gives unstarted tasks back to the queue.
func (s *taskSource) Return(ids []string) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	s.held = max(0, s.held-len(ids))
	s.mu.Unlock()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.call(ctx, api.MethodTasksReturn, api.TasksReturn{TaskIDs: ids}, nil)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-s.stopped:
			return // the server reclaims them when this node goes offline
		case <-time.After(wait):
		}
	}
}

func (s *taskSource) flushLoop() {
	defer close(s.done)
	wait := 50 * time.Millisecond
	for {
		s.mu.Lock()
		n := min(len(s.pending), maxReportBatch)
		age := time.Since(s.since)
		urgent := s.urgent
		s.mu.Unlock()
		if n == 0 {
			select {
			case <-s.kick:
				continue
			case <-s.closing:
				return
			}
		}
		// Linger so a busy pool's reports share one call (one store
		// transaction) instead of trickling in small batches.
		if n < maxReportBatch && age < reportLinger && !urgent && s.linger(reportLinger-age) {
			continue
		}
		s.mu.Lock()
		n = min(len(s.pending), maxReportBatch)
		batch := append([]api.TaskReport(nil), s.pending[:n]...)
		sent := time.Now()
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.call(ctx, api.MethodTasksReport, api.TasksReport{Reports: batch, SuiteID: s.suiteID, Held: s.heldUnstarted()}, nil)
		cancel()
		if err != nil {
			s.log.Debug("report tasks; will retry", "count", n, "err", err)
			select {
			case <-s.stopped:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
			continue
		}
		wait = 50 * time.Millisecond
		s.mu.Lock()
		s.pending = s.pending[n:]
		// Those left came in during the call: none waited longer, and
		// they came under load, so they linger unless nothing else is
		// in flight.
		s.since = sent
		s.urgent = len(s.pending) > 0 && s.held == 0 && s.drained
		s.mu.Unlock()
	}
}

// close sends the reports still queued at once, without lingering, and
// returns when they have reached the server, or when ctx ends (the flusher
// then keeps trying until the agent stops). No report may come after it.
func (s *taskSource) close(ctx context.Context) {
	close(s.closing)
	select {
	case <-s.done:
	case <-ctx.Done():
	}
}

// linger waits up to d, or less if a full or urgent batch is queued; it returns
// false at once if the source is closing, so that the last reports leave
// without delay.
func (s *taskSource) linger(d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		enough := len(s.pending) >= maxReportBatch || s.urgent
		s.mu.Unlock()
		if enough {
			return true
		}
		select {
		case <-deadline.C:
			return true
		case <-s.closing:
			return false
		case <-s.kick:
		}
	}
}

// giveBack answers the server's tasks.giveback: the pool running the suite
// returns up to count of its unstarted tasks (buffered, or queued to its
// workers: Pool.Release), for another node of the suite that has run out.
// The tasks go back through tasks.return.
func (r *runner) giveBack(req api.TasksGiveback) api.TasksGivenBack {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil || r.run.pool == nil || r.run.suite.ID != req.SuiteID {
		return api.TasksGivenBack{}
	}
	n := r.run.pool.Release(req.Count)
	if n > 0 {
		r.env.log.Debug("giving unstarted tasks back for other nodes", "suite", req.SuiteID, "asked", req.Count, "returned", n)
	}
	return api.TasksGivenBack{Returned: n}
}
