package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/imds"
	"github.com/nodemgr/nodemgr/internal/base/proto"
)

// Notices from the machine's provider (EC2's instance metadata service):
// a spot interruption makes the agent drain — it takes no new suite or
// task, returns the tasks it has not started, lets the running ones go
// on until just before the machine goes — and tell the server, whose
// orchestrator replaces the machine; a rebalance recommendation is only
// told. The server hears the notices at once (node.notices) and with
// every hello, so a reconnect or another replica loses none.

// stopMargin is how long before an interruption's time the tasks still
// running are stopped (they go back to the queue, not counted as
// failures), so that their reports reach the server before the machine
// is gone: EC2 gives two minutes, and a report takes well under a second.
const stopMargin = 15 * time.Second

// notices is what the agent heard from the metadata service.
type notices struct {
	mu      sync.Mutex
	current []api.Notice
	version int         // counts changes of current, to know the server has the last
	drain   *api.Notice // the interruption the agent drains for; set once
	changed chan struct{}
}

func newNotices() *notices { return &notices{changed: make(chan struct{}, 1)} }

// now returns the notices the agent hears now and their version.
func (n *notices) now() ([]api.Notice, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.current), n.version
}

// draining returns the interruption the agent drains for, if any.
func (n *notices) draining() *api.Notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.drain
}

// watchIMDS polls the metadata service until ctx ends.
func (a *Agent) watchIMDS(ctx context.Context) {
	log := a.log.With("subsystem", "imds")
	log.Info("watching the instance metadata service for spot notices", "endpoint", a.cfg.IMDS, "every", a.cfg.IMDSInterval)
	imds.Watch(ctx, imds.New(a.cfg.IMDS), a.cfg.IMDSInterval, log, a.heard)
}

// heard takes the notices the metadata service gives now. The first
// interruption starts the drain, which is not undone: the pool's buffered
// tasks are already back on the queue, and a notice that goes away again
// is a machine being stopped, whose agent starts afresh.
func (a *Agent) heard(ns []api.Notice) {
	n := a.notices
	n.mu.Lock()
	n.current = slices.Clone(ns)
	n.version++
	var start *api.Notice
	for _, x := range ns {
		if x.Kind == api.NoticeInterruption && n.drain == nil {
			n.drain, start = &x, &x
		}
		if x.Kind == api.NoticeRebalance {
			a.log.Info("the provider recommends rebalancing this machine: it is at raised risk of interruption; working on", "notice", x.Message())
		}
	}
	n.mu.Unlock()
	select {
	case n.changed <- struct{}{}:
	default:
	}
	if start != nil {
		a.log.Warn("spot interruption notice: draining (no new work; unstarted tasks go back; running ones go on until shortly before the machine goes)",
			"notice", start.Message())
		go a.drainFor(*start)
	}
}

// drainFor drains the runner for an interruption: no new suites, the
// pool stopped gracefully (its buffered tasks returned at once), and at
// stopMargin before the machine goes, the tasks still running stopped.
func (a *Agent) drainFor(n api.Notice) {
	a.runner.drain(n.Message())
	a.workChangedNow() // the server sees Draining with the next beat, now
	wait := time.Until(n.Time.Add(-stopMargin))
	select {
	case <-a.stopCtx.Done():
		return
	case <-time.After(max(0, wait)):
	}
	if a.runner.stopRunning() {
		a.log.Warn("the machine goes soon: stopping the tasks still running; they go back to the queue", "notice", n.Message())
	}
}

// sendNotices tells the server the notices heard now, if it does not
// have them yet; sent is the version it has, updated on success.
func (a *Agent) sendNotices(ctx context.Context, peer *proto.Peer, sent *int) {
	ns, v := a.notices.now()
	if v == *sent {
		return
	}
	if ns == nil {
		ns = []api.Notice{}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := peer.Call(ctx, api.MethodNotices, api.Notices{Notices: ns}, nil); err != nil {
		a.log.Warn("tell the server the provider's notices; retrying with the next heartbeat", "err", err)
		return
	}
	*sent = v
}

// drain makes the runner take no new suite and stops the pool of the one
// it runs gracefully: no task starts, the buffered ones go back to the
// queue, the running ones finish.
func (r *runner) drain(why string) {
	r.mu.Lock()
	r.draining = why
	run := r.run
	r.mu.Unlock()
	r.poke()
	if run != nil && run.pool != nil {
		run.pool.Stop(true)
	}
}

// drainingFor says why the runner drains; "" when it does not.
func (r *runner) drainingFor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.draining
}

// stopRunning stops the tasks the pool still runs; false when none runs.
func (r *runner) stopRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil || r.run.pool == nil {
		return false
	}
	r.run.pool.Stop(false)
	return true
}
