package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Leadership. Replicas of the server share one store; the loops that must
// run once for all of them (the singleton loops: the orchestrator,
// liveness, suite closing, ensemble restores, drift, and blob collection
// when the blob store is shared) run on the replica holding the store's
// lease "leader", one term at a time. The leader renews the lease every
// third of its TTL and runs the loops with a context that ends when the
// lease is lost (another replica took it, or a renewal has failed until
// the lease ran out), and that is fenced by the term (store.WithFence):
// if the leader is paused past its lease and another takes over, what its
// loops write after the takeover is refused with store.ErrNotLeader. When
// the lease is lost the loops are stopped and waited for, and the replica
// campaigns again. A server that shuts down releases the lease, so another
// replica leads at once.
//
// No session advisory lock is involved, so it works through PgBouncer in
// transaction mode. With SQLite there is one replica, which leads at once:
// its renewal is one small write transaction every third of the TTL.

// LeaderLease is the lease the replicas elect their leader with.
const LeaderLease = "leader"

// releaseTimeout bounds the release of the lease at shutdown.
const releaseTimeout = 5 * time.Second

// leadership is what this replica knows of its own leadership.
type leadership struct {
	mu    sync.Mutex
	lease store.Lease // the term this replica leads; Term 0 when it does not
	seen  string      // the last other leader logged, so each is logged once
}

func (l *leadership) set(lease store.Lease) {
	l.mu.Lock()
	l.lease = lease
	l.mu.Unlock()
}

// Leads returns the term this replica leads, and whether it leads.
func (h *Hub) Leads() (store.Lease, bool) {
	h.leading.mu.Lock()
	defer h.leading.mu.Unlock()
	return h.leading.lease, h.leading.lease.Term != 0
}

// singletons are the loops that run on the leader only, each with the
// term's fenced context: the server's and the hub's liveness loops.
func (h *Hub) singletons() []func(context.Context) {
	return append(h.hooks.Singletons(), h.livenessLoop, h.deadReplicaLoop)
}

// leaderLoop campaigns for the leader lease until ctx ends, and runs the
// singleton loops through each term it wins.
func (h *Hub) leaderLoop(ctx context.Context) {
	h.takeOverSole(ctx)
	for {
		sent := time.Now()
		lease, err := h.store.AcquireLease(ctx, LeaderLease, h.instance, h.cfg.LeaderLease)
		switch {
		case err == nil:
			h.lead(ctx, lease, sent)
		case ctx.Err() != nil:
		case errors.Is(err, errdefs.ErrConflict):
			h.follow(ctx)
		default:
			h.log.Warn("acquire the leader lease; retrying", "replica", h.cfg.ReplicaID, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.renewEvery()):
		}
	}
}

// renewEvery is how often the lease is renewed, and a follower tries it.
func (h *Hub) renewEvery() time.Duration { return h.cfg.LeaderLease / 3 }

// follow logs, once per leader, which replica leads.
func (h *Hub) follow(ctx context.Context) {
	l, err := h.store.GetLease(ctx, LeaderLease)
	if err != nil {
		return
	}
	h.leading.mu.Lock()
	news := h.leading.seen != l.Holder
	h.leading.seen = l.Holder
	h.leading.mu.Unlock()
	if news {
		h.log.Info("following the leader", "replica", h.cfg.ReplicaID, "leader", l.Holder, "term", l.Term)
	}
}

// takeOverSole frees a leader lease that a store serving one server holds
// for another replica: a previous run of this server that stopped without
// releasing it. Waiting for it to expire would only delay the loops.
func (h *Hub) takeOverSole(ctx context.Context) {
	if !h.cfg.Sole {
		return
	}
	l, err := h.store.GetLease(ctx, LeaderLease)
	if err != nil || l.Holder == "" || l.Holder == h.instance {
		return
	}
	if err := h.store.ReleaseLease(ctx, LeaderLease, l.Holder); err == nil {
		h.log.Info("took over the leader lease a previous run left", "previous", l.Holder, "term", l.Term)
	}
}

// lead runs the singleton loops through one term: until the lease is lost
// or ctx ends. The lease was acquired at sent (the request's start), so it
// is good until sent+TTL as far as this replica can tell.
func (h *Hub) lead(ctx context.Context, lease store.Lease, sent time.Time) {
	termCtx, cancel := context.WithCancel(ctx)
	fenced := store.WithFence(termCtx, lease)
	var wg sync.WaitGroup
	h.leading.set(lease)
	h.log.Info("leading: running the singleton loops", "replica", h.cfg.ReplicaID, "term", lease.Term)
	for _, loop := range h.singletons() {
		wg.Go(func() { loop(fenced) })
	}

	why := h.holdLease(ctx, lease, sent.Add(h.cfg.LeaderLease))
	cancel()
	wg.Wait()
	h.leading.set(store.Lease{})
	if ctx.Err() != nil {
		h.releaseLeader(lease)
		return
	}
	h.log.Warn("no longer leading: singleton loops stopped; campaigning again", "replica", h.cfg.ReplicaID, "term", lease.Term, "why", why)
}

// holdLease renews the lease every third of its TTL until it is lost or
// ctx ends, and says why it stopped. A renewal that fails for another
// reason than a takeover is tried again while the lease lasts; the term
// ends when it would run out (valid) unrenewed, since another replica may
// take it then.
func (h *Hub) holdLease(ctx context.Context, lease store.Lease, valid time.Time) string {
	tick := time.NewTicker(h.renewEvery())
	defer tick.Stop()
	expiry := time.NewTimer(time.Until(valid))
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			return "shutting down"
		case <-expiry.C:
			return fmt.Sprintf("the lease ran out unrenewed (%s)", h.cfg.LeaderLease)
		case <-tick.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, valid)
		l, err := h.store.AcquireLease(rctx, LeaderLease, h.instance, h.cfg.LeaderLease)
		cancel()
		switch {
		case err == nil && l.Term == lease.Term:
			valid = sent.Add(h.cfg.LeaderLease)
			expiry.Reset(time.Until(valid))
		case err == nil:
			// It ran out and this replica took it again: a new term,
			// whose loops start afresh.
			return fmt.Sprintf("the lease ran out and was taken again at term %d", l.Term)
		case errors.Is(err, errdefs.ErrConflict):
			return errdefs.Message(err)
		case ctx.Err() != nil:
			return "shutting down"
		case !time.Now().Before(valid):
			return fmt.Sprintf("could not renew the lease before it ran out: %v", err)
		default:
			h.log.Warn("renew the leader lease; retrying while it lasts", "term", lease.Term,
				"left", time.Until(valid).Round(time.Millisecond), "err", err)
		}
	}
}

// releaseLeader gives the lease up at shutdown, once the loops stopped,
// so that another replica leads at once instead of after the TTL.
func (h *Hub) releaseLeader(lease store.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := h.store.ReleaseLease(ctx, LeaderLease, h.instance); err != nil {
		h.log.Warn("release the leader lease; another replica leads once it runs out", "term", lease.Term, "ttl", h.cfg.LeaderLease, "err", err)
		return
	}
	h.log.Info("released the leader lease", "replica", h.cfg.ReplicaID, "term", lease.Term)
}
