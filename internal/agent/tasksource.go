package agent

import (
	"context"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// maxReportBatch bounds one tasks.report call.
const maxReportBatch = 512

// reportLinger is how long the first report of a batch waits for company.
// Each tasks.report costs the server a request and a store transaction
// whatever its size, so waiting longer buys fewer, larger batches; 10 ms
// against 2 ms cut the server's CPU per task by a tenth (in-process) to a
// third (command workers) in nodemgr bench dispatch, while a result still
// reaches the store within milliseconds.
const reportLinger = 10 * time.Millisecond

// taskSource connects a worker pool to the server: it claims tasks with
// tasks.fetch and sends reports in batches. The first report of a batch
// waits reportLinger for others, and while one call is in flight the next
// batch accumulates, so batches grow with the load while a quiet suite
// still reports within milliseconds. Reports wait out a lost connection;
// none is dropped while the agent lives.
type taskSource struct {
	a       *Agent
	suiteID string

	mu      sync.Mutex
	pending []api.TaskReport
	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}
}

func newTaskSource(a *Agent, suiteID string) *taskSource {
	s := &taskSource{a: a, suiteID: suiteID, kick: make(chan struct{}, 1),
		closing: make(chan struct{}), done: make(chan struct{})}
	go s.flushLoop()
	return s
}

// Fetch claims up to max tasks. done is true once the suite will give no
// more: it ended, or it is closed with nothing left to claim.
func (s *taskSource) Fetch(ctx context.Context, max int) ([]api.Task, bool, error) {
	var resp api.TasksFetched
	if err := s.a.call(ctx, api.MethodTasksFetch, api.TasksFetch{SuiteID: s.suiteID, Max: max}, &resp); err != nil {
		return nil, false, err
	}
	return resp.Tasks, resp.Done && len(resp.Tasks) == 0, nil
}

// Report queues one attempt's result.
func (s *taskSource) Report(r api.TaskReport) {
	s.mu.Lock()
	s.pending = append(s.pending, r)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
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

// Return gives unstarted tasks back to the queue.
func (s *taskSource) Return(ids []string) {
	if len(ids) == 0 {
		return
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.a.call(ctx, api.MethodTasksReturn, api.TasksReturn{TaskIDs: ids}, nil)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-s.a.stopCtx.Done():
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
		batch := append([]api.TaskReport(nil), s.pending[:n]...)
		s.mu.Unlock()
		if n == 0 {
			select {
			case <-s.kick:
				// Linger a moment so a busy pool's reports share one call
				// (one store transaction) instead of trickling one by one.
				s.linger()
				continue
			case <-s.closing:
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.a.call(ctx, api.MethodTasksReport, api.TasksReport{Reports: batch}, nil)
		cancel()
		if err != nil {
			s.a.log.Debug("report tasks; will retry", "count", n, "err", err)
			select {
			case <-s.a.stopCtx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
			continue
		}
		wait = 50 * time.Millisecond
		s.mu.Lock()
		s.pending = s.pending[n:]
		s.mu.Unlock()
	}
}

// close waits until every queued report has reached the server (or ctx ends).
func (s *taskSource) close(ctx context.Context) {
	for {
		s.mu.Lock()
		left := len(s.pending)
		s.mu.Unlock()
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			close(s.closing)
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(s.closing)
	<-s.done
}

// linger waits up to reportLinger, or less if a full batch is queued or
// the source is closing.
func (s *taskSource) linger() {
	deadline := time.NewTimer(reportLinger)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		full := len(s.pending) >= maxReportBatch
		s.mu.Unlock()
		if full {
			return
		}
		select {
		case <-deadline.C:
			return
		case <-s.closing:
			return
		case <-s.kick:
		}
	}
}
