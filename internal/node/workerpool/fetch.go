package workerpool

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// fetchers is how many fetches may be on their way at once. With one, a
// pool whose workers drain more than half the buffer during one round trip
// to the server starves; a second lets the next refill start while the
// first is still travelling. Both count what they asked for (inflight), so
// together they never ask for more than the buffer holds.
const fetchers = 2

// fetchDrainWait bounds how long a graceful end waits for a fetch already
// on its way to come back with what the server claimed for it.
const fetchDrainWait = 10 * time.Second

// fetchLoop keeps the buffer filled from the source: with Prefetch n, it
// tops the buffer up to n whenever it falls to n/2; with Prefetch 0 it
// fetches one task for each worker waiting (in one call when several wait).
// A fetch that finds nothing, or that takes the last Ready tasks (Drained),
// is followed by a wait that doubles from 50ms to 2s, cut short by Wake,
// or by a worker gone idle since with nothing buffered: the server may
// have held the fetch to this node's fair share of the suite, and never
// holds back the tasks an idle worker needs. A lone task thus costs one
// fetch, not a second that finds nothing while it runs.
func (p *Pool) fetchLoop(ctx context.Context) {
	defer p.bgWG.Done()
	wait := fetchMinWait
	for {
		p.mu.Lock()
		n := p.wantLocked()
		p.inflight += n
		wakes := p.wakes
		p.mu.Unlock()
		if n == 0 {
			select {
			case <-p.need:
			case <-p.wake:
			case <-p.stopCh:
				return
			case <-ctx.Done():
				return
			}
			continue
		}

		tasks, done, drained, err := p.src.Fetch(ctx, n)
		p.mu.Lock()
		p.inflight -= n
		// Woken meanwhile: what the fetch saw may be old.
		drained = drained && p.wakes == wakes
		if err == nil {
			p.drained = drained || (len(tasks) == 0 && p.wakes == wakes)
		}
		p.addLocked(tasks)
		if done {
			p.done = true
			p.dispatchLocked() // waiting workers get Done
			p.signal(p.kick)
		}
		idle := len(p.waiting)
		p.mu.Unlock()
		switch {
		case done:
			return
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			p.log.Warn("fetch tasks", "max", n, "err", err)
		case len(tasks) > 0:
			wait = fetchMinWait
			if !drained {
				continue
			}
		}

		woken, ok := p.backOff(ctx, wait, idle)
		p.mu.Lock()
		p.drained = false // time to look again
		p.mu.Unlock()
		switch {
		case !ok:
			return
		case woken:
			wait = fetchMinWait
		default:
			wait = min(2*wait, fetchMaxWait)
		}
	}
}

// backOff waits d after a fetch that found nothing, less if woken or if
// more workers wait than the idle that did when it came back. ok is false
// if the pool stops.
func (p *Pool) backOff(ctx context.Context, d time.Duration, idle int) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return false, true
		case <-p.wake:
			return true, true
		case <-p.starved:
			p.mu.Lock()
			more := len(p.waiting) > idle
			p.mu.Unlock()
			if more {
				return true, true
			}
		case <-p.stopCh:
			return false, false
		case <-ctx.Done():
			return false, false
		}
	}
}

// wantLocked is how many tasks to fetch now; 0 means none.
func (p *Pool) wantLocked() int {
	switch {
	case p.stop != stopNone || p.done:
		return 0
	case p.cfg.Prefetch == 0:
		// No buffer: exactly one task for each worker waiting right now.
		return max(0, len(p.waiting)-len(p.buf)-p.inflight)
	case p.drained && (len(p.waiting) == 0 || len(p.buf)+p.inflight > 0):
		return 0 // nothing else is Ready, and no worker lacks a task
	case len(p.buf)+p.inflight <= p.cfg.Prefetch/2:
		return p.cfg.Prefetch - len(p.buf) - p.inflight
	}
	return 0
}

// addLocked takes fetched tasks into the buffer and serves waiting workers;
// if the pool is stopping they go straight back.
func (p *Pool) addLocked(tasks []api.Task) {
	if len(tasks) == 0 {
		return
	}
	if p.stop != stopNone {
		ids := make([]string, len(tasks))
		for i, t := range tasks {
			ids[i] = t.ID
		}
		p.returnLocked(ids)
		return
	}
	for _, t := range tasks {
		if p.held[t.ID] != nil {
			p.log.Warn("source gave a task the pool already runs; ignoring it", "task", t.ID)
			continue
		}
		p.buf = append(p.buf, t)
	}
	p.dispatchLocked()
}

// needFetchLocked tells the fetcher the buffer or the waiting line changed.
func (p *Pool) needFetchLocked() {
	if p.wantLocked() > 0 {
		p.signal(p.need)
		if len(p.waiting) > 0 && len(p.buf) == 0 {
			p.signal(p.starved)
		}
	}
}
