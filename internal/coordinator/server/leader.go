package server

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

// leaderLease is the lease the replicas elect their leader with.
const leaderLease = "leader"

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

// current returns the term this replica leads, and whether it leads.
func (l *leadership) current() (store.Lease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease, l.lease.Term != 0
}

// soleServer is a store that serves one server process (store/sqlite): a
// leader lease it holds for another replica was left by a server that
// stopped without releasing it.
type soleServer interface {
	SoleServer() bool
}

// singletons are the loops that run on the leader only, each with the
// term's fenced context.
func (s *Server) singletons() []func(context.Context) {
	loops := []func(context.Context){
		s.runOrchestrator,
		s.livenessLoop, s.deadReplicaLoop, s.suiteLoop, s.ensembles.Loop, s.catalog.DriftLoop,
	}
	if s.blobsShared() {
		loops = append(loops, s.blobLoop)
	}
	return loops
}

// blobsShared reports whether the blob store is one the replicas share
// (configured, such as S3), where one replica collects for all; a data
// dir's own blobs are collected by their replica.
func (s *Server) blobsShared() bool { return s.cfg.Blobs != nil }

// leaderLoop campaigns for the leader lease until ctx ends, and runs the
// singleton loops through each term it wins.
func (s *Server) leaderLoop(ctx context.Context) {
	s.takeOverSole(ctx)
	for {
		sent := time.Now()
		lease, err := s.store.AcquireLease(ctx, leaderLease, s.instance, s.cfg.LeaderLease)
		switch {
		case err == nil:
			s.lead(ctx, lease, sent)
		case ctx.Err() != nil:
		case errors.Is(err, errdefs.ErrConflict):
			s.follow(ctx)
		default:
			s.log.Warn("acquire the leader lease; retrying", "replica", s.cfg.ReplicaID, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.renewEvery()):
		}
	}
}

// renewEvery is how often the lease is renewed, and a follower tries it.
func (s *Server) renewEvery() time.Duration { return s.cfg.LeaderLease / 3 }

// follow logs, once per leader, which replica leads.
func (s *Server) follow(ctx context.Context) {
	l, err := s.store.GetLease(ctx, leaderLease)
	if err != nil {
		return
	}
	s.leading.mu.Lock()
	news := s.leading.seen != l.Holder
	s.leading.seen = l.Holder
	s.leading.mu.Unlock()
	if news {
		s.log.Info("following the leader", "replica", s.cfg.ReplicaID, "leader", l.Holder, "term", l.Term)
	}
}

// takeOverSole frees a leader lease that a store serving one server holds
// for another replica: a previous run of this server that stopped without
// releasing it. Waiting for it to expire would only delay the loops.
func (s *Server) takeOverSole(ctx context.Context) {
	if st, ok := s.backend.(soleServer); !ok || !st.SoleServer() {
		return
	}
	l, err := s.store.GetLease(ctx, leaderLease)
	if err != nil || l.Holder == "" || l.Holder == s.instance {
		return
	}
	if err := s.store.ReleaseLease(ctx, leaderLease, l.Holder); err == nil {
		s.log.Info("took over the leader lease a previous run left", "previous", l.Holder, "term", l.Term)
	}
}

// lead runs the singleton loops through one term: until the lease is lost
// or ctx ends. The lease was acquired at sent (the request's start), so it
// is good until sent+TTL as far as this replica can tell.
func (s *Server) lead(ctx context.Context, lease store.Lease, sent time.Time) {
	termCtx, cancel := context.WithCancel(ctx)
	fenced := store.WithFence(termCtx, lease)
	var wg sync.WaitGroup
	s.leading.set(lease)
	s.log.Info("leading: running the singleton loops", "replica", s.cfg.ReplicaID, "term", lease.Term)
	for _, loop := range s.singletons() {
		wg.Go(func() { loop(fenced) })
	}

	why := s.holdLease(ctx, lease, sent.Add(s.cfg.LeaderLease))
	cancel()
	wg.Wait()
	s.leading.set(store.Lease{})
	if ctx.Err() != nil {
		s.releaseLeader(lease)
		return
	}
	s.log.Warn("no longer leading: singleton loops stopped; campaigning again", "replica", s.cfg.ReplicaID, "term", lease.Term, "why", why)
}

// holdLease renews the lease every third of its TTL until it is lost or
// ctx ends, and says why it stopped. A renewal that fails for another
// reason than a takeover is tried again while the lease lasts; the term
// ends when it would run out (valid) unrenewed, since another replica may
// take it then.
func (s *Server) holdLease(ctx context.Context, lease store.Lease, valid time.Time) string {
	tick := time.NewTicker(s.renewEvery())
	defer tick.Stop()
	expiry := time.NewTimer(time.Until(valid))
	defer expiry.Stop()
	for {
		select {
		case <-ctx.Done():
			return "shutting down"
		case <-expiry.C:
			return fmt.Sprintf("the lease ran out unrenewed (%s)", s.cfg.LeaderLease)
		case <-tick.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, valid)
		l, err := s.store.AcquireLease(rctx, leaderLease, s.instance, s.cfg.LeaderLease)
		cancel()
		switch {
		case err == nil && l.Term == lease.Term:
			valid = sent.Add(s.cfg.LeaderLease)
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
			s.log.Warn("renew the leader lease; retrying while it lasts", "term", lease.Term,
				"left", time.Until(valid).Round(time.Millisecond), "err", err)
		}
	}
}

// releaseLeader gives the lease up at shutdown, once the loops stopped,
// so that another replica leads at once instead of after the TTL.
func (s *Server) releaseLeader(lease store.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := s.store.ReleaseLease(ctx, leaderLease, s.instance); err != nil {
		s.log.Warn("release the leader lease; another replica leads once it runs out", "term", lease.Term, "ttl", s.cfg.LeaderLease, "err", err)
		return
	}
	s.log.Info("released the leader lease", "replica", s.cfg.ReplicaID, "term", lease.Term)
}

// sharesLoop forgets, every SuiteTick, the fair-share members that left
// without saying so. Each replica's dispatcher keeps its own shares, so
// this runs on every replica, leader or not.
func (s *Server) sharesLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SuiteTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.dispatch.shares.Prune(s.hub.get)
		}
	}
}
