package workerpool

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// acceptLoop takes workers' connections until the listener closes.
func (p *Pool) acceptLoop(ln net.Listener) {
	defer p.connWG.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Error("accept worker connection", "err", err)
			}
			return
		}
		wc := workerproto.NewConn(c)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[wc] = true
		p.mu.Unlock()
		p.connWG.Add(1)
		go p.serveConn(wc)
	}
}

// serveConn reads one worker's frames: hello first, then fetches and
// reports, each handled as it arrives.
func (p *Pool) serveConn(c *workerproto.Conn) {
	defer p.connWG.Done()
	defer func() {
		c.Close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	f, err := c.Read()
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	defer close(done)
	s, gen := p.hello(c, f, done)
	if s == nil {
		return
	}
	for {
		f, err := c.Read()
		at := time.Now()
		if err != nil {
			p.connEnded(s, gen, c, err)
			return
		}
		if !p.frame(s, gen, c, f, at) {
			return
		}
	}
}

// hello binds a connection to the worker slot its hello names, if the token
// proves it is that slot's current process.
func (p *Pool) hello(c *workerproto.Conn, f workerproto.Frame, done chan struct{}) (*slot, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := f.Hello
	if f.Op != workerproto.OpHello || h == nil || h.WorkerID < 0 || h.WorkerID >= len(p.slots) {
		p.log.Warn("worker connection without a valid hello; closing it", "op", f.Op)
		return nil, 0
	}
	s := p.slots[h.WorkerID]
	if s.token == "" || subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.token)) != 1 || s.helloed {
		p.log.Warn("worker hello with a stale or wrong token; closing it", "worker", h.WorkerID, "pid", h.PID)
		return nil, 0
	}
	if h.Version != workerproto.Version {
		s.lastErr = fmt.Errorf("worker speaks protocol version %d, this agent %d", h.Version, workerproto.Version)
		p.log.Error("worker protocol version mismatch", "worker", s.id, "err", s.lastErr)
		return nil, 0
	}
	// The worker was pinned before it could run (startPinned), so it may
	// take tasks as soon as it hears back.
	if err := c.Write(workerproto.Frame{Op: workerproto.OpAck, Ack: &workerproto.Ack{WorkerID: s.id}}); err != nil {
		return nil, 0
	}
	s.conn, s.connDone, s.helloed, s.silent = c, done, true, 0
	s.releases = h.Release
	return s, s.gen
}

// frame handles one frame from a registered worker and says whether to
// keep reading.
func (p *Pool) frame(s *slot, gen int, c *workerproto.Conn, f workerproto.Frame, at time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.gen != gen || s.conn != c {
		return false // a connection the pool has let go of
	}
	switch f.Op {
	case workerproto.OpFetch:
		switch {
		case s.job != nil:
			p.dropLocked(s, fmt.Errorf("fetch while holding task %s", s.job.task.ID))
			return false
		case !s.fetchAt.IsZero():
			p.dropLocked(s, errors.New("fetch while a fetch is pending"))
			return false
		case s.retired:
			p.retireLocked(s) // told Done already; tell it again
			return true
		}
		s.fetchAt, s.fetchN = at, 1
		if f.Fetch != nil && f.Fetch.Max > 1 {
			s.fetchN = min(f.Fetch.Max, maxFetchPerWorker)
		}
		p.serveLocked(s)
	case workerproto.OpReport:
		r := f.Report
		switch {
		case r == nil:
			p.dropLocked(s, errors.New("report frame without a report"))
			return false
		case s.job == nil:
			p.dropLocked(s, fmt.Errorf("report for task %q while holding none", r.TaskID))
			return false
		case r.TaskID != s.job.task.ID:
			p.dropLocked(s, fmt.Errorf("report for task %q while holding %s", r.TaskID, s.job.task.ID))
			return false
		case r.Outcome != api.OutcomeSucceeded && r.Outcome != api.OutcomeFailed && r.Outcome != api.OutcomeStopped:
			p.dropLocked(s, fmt.Errorf("report with unknown outcome %q", r.Outcome))
			return false
		}
		p.finishLocked(s, r.TaskReport)
	case workerproto.OpReleased:
		if f.Released == nil {
			p.dropLocked(s, errors.New("released frame without task IDs"))
			return false
		}
		return p.releasedLocked(s, f.Released.TaskIDs)
	default:
		p.dropLocked(s, fmt.Errorf("unexpected %q frame", f.Op))
		return false
	}
	return true
}

// connEnded handles a read error on a registered worker's connection.
func (p *Pool) connEnded(s *slot, gen int, c *workerproto.Conn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.gen != gen || s.conn != c {
		return
	}
	if errors.Is(err, workerproto.ErrMalformed) {
		p.dropLocked(s, err)
		return
	}
	p.forgetConnLocked(s)
	if s.retired || s.proc == nil {
		return // leaving as told, or already gone
	}
	// Most likely the process is dying and Wait will say how; if it lingers
	// without its connection it is of no use.
	time.AfterFunc(lostConnGrace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if s.gen == gen && s.proc != nil && !s.dropped {
			p.dropLocked(s, fmt.Errorf("closed its connection (%v) but did not exit", err))
		}
	})
}

// finishLocked reports the attempt s's worker says its task ended with,
// unless the pool has already decided (timeout, cancel).
func (p *Pool) finishLocked(s *slot, r api.TaskReport) {
	j := s.job
	s.job = nil
	p.releaseLocked(j)
	r.TaskID, r.Attempt, r.Crash = j.task.ID, j.task.Attempt, false
	if j.verdict != "" {
		r.Outcome, r.Reason = api.OutcomeFailed, j.verdict
	}
	if r.Result.DurationMS == 0 {
		r.Result.DurationMS = time.Since(j.start).Milliseconds()
	}
	r.Result.FinishedAt = time.Time{} // the pool's clock, not the worker's
	p.reportLocked(r)
	p.promoteLocked(s)
}

// promoteLocked makes the next task s holds the one it runs: the worker
// starts it as soon as it has reported the last.
func (p *Pool) promoteLocked(s *slot) {
	if len(s.queued) == 0 {
		return
	}
	j := s.queued[0]
	s.queued[0] = nil
	s.queued = s.queued[1:]
	s.job = j
	j.start = time.Now()
	p.armLocked(s, j)
	if j.verdict != "" {
		p.killLaterLocked(s, j, j.verdict) // told to skip it while it waited
	}
}

// serveLocked answers s's pending fetch: a buffered task, Done when no
// more will come, or a place in the queue for the next fetched task.
func (p *Pool) serveLocked(s *slot) {
	switch {
	case len(p.buf) > 0 && p.mayStartLocked():
		// A worker taking several gets at most its share of the buffer,
		// and one while a giveback wants tasks kept in the buffer.
		n := min(s.fetchN, max(1, len(p.buf)/len(p.slots)))
		if time.Now().Before(p.leanUntil) {
			n = 1
		}
		tasks := slices.Clone(p.buf[:n])
		clear(p.buf[:n])
		p.buf = p.buf[n:]
		p.assignLocked(s, tasks[0], tasks[1:]...)
		p.needFetchLocked()
	case len(p.buf) == 0 && (p.stop != stopNone || p.done):
		p.retireLocked(s)
	default:
		p.waiting = append(p.waiting, s)
		p.needFetchLocked()
	}
}

// dispatchLocked hands buffered tasks to waiting workers, and Done to the
// waiting ones when no more tasks will come.
func (p *Pool) dispatchLocked() {
	for len(p.waiting) > 0 && len(p.buf) > 0 && p.mayStartLocked() {
		s := p.waiting[0]
		p.waiting = p.waiting[1:]
		t := p.buf[0]
		p.buf[0] = api.Task{}
		p.buf = p.buf[1:]
		p.assignLocked(s, t)
	}
	// Buffered tasks that may not start yet are still to run, unless the
	// pool stops.
	if p.stop != stopNone || (p.done && len(p.buf) == 0) {
		for len(p.waiting) > 0 {
			s := p.waiting[0]
			p.waiting = p.waiting[1:]
			p.retireLocked(s)
		}
	}
	p.needFetchLocked()
}

// assignLocked gives t, and more to run after it, to s, whose fetch is
// pending.
func (p *Pool) assignLocked(s *slot, t api.Task, more ...api.Task) {
	at := s.fetchAt
	s.fetchAt = time.Time{}
	j := &job{task: t, start: time.Now()}
	s.job = j
	p.held[t.ID] = s
	tf := &workerproto.TaskFrame{Task: &t}
	for i := range more {
		s.queued = append(s.queued, &job{task: more[i]})
		p.held[more[i].ID] = s
		tf.More = append(tf.More, &more[i])
	}
	if err := s.conn.Write(workerproto.Frame{Op: workerproto.OpTask, Task: tf}); err != nil {
		p.dropLocked(s, err) // the tasks go back to the buffer
		return
	}
	j.start = time.Now()
	p.lat.add(j.start.Sub(at))
	p.armLocked(s, j)
}

// armLocked starts the timeout of the task s now runs.
func (p *Pool) armLocked(s *slot, j *job) {
	if d := time.Duration(j.task.Timeout); d > 0 {
		j.timeout = time.AfterFunc(d, func() { p.expire(s, j) })
	}
}

// retireLocked answers s's fetch with Done: it should exit.
func (p *Pool) retireLocked(s *slot) {
	s.fetchAt = time.Time{}
	s.retired = true
	if s.conn != nil {
		s.conn.Write(workerproto.Frame{Op: workerproto.OpTask, Task: &workerproto.TaskFrame{Done: true}})
	}
}

// requeueLocked puts an unstarted task back at the front of the buffer, or
// returns it to the source if the pool is stopping.
func (p *Pool) requeueLocked(t api.Task) {
	if p.stop != stopNone {
		p.returnLocked([]string{t.ID})
		return
	}
	p.buf = append([]api.Task{t}, p.buf...)
}
