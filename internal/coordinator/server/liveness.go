package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// liveness decides when a node is gone. Two things start a check:
//
//   - its heartbeats are overdue (OfflineAfter): a connected agent is
//     pinged, a disconnected one gets ConfirmTimeout to come back;
//   - its connection ended without a goodbye: the agent gets
//     ReconnectGrace to come back (a crashed agent's tasks should not wait
//     for the heartbeat timeout when the server saw the connection end).
//
// Only then is the node offline and its running tasks reclaimed. A slow
// store or a busy agent does not cost a node, and neither does a server
// restart: the server's start counts as every node's last heartbeat, so
// agents backing off after the outage have OfflineAfter to reconnect.
type liveness struct {
	mu         sync.Mutex
	confirming map[string]bool // node ID → a check runs
	closed     bool            // the server stops: no new checks
	wg         sync.WaitGroup
}

// close refuses new checks and waits for those running. Add and Wait of
// wg must not overlap, so closed is set under mu, where checks are added.
func (l *liveness) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
}

// startCheck runs check for the node unless one runs already.
func (l *liveness) startCheck(nodeID string, check func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.confirming == nil {
		l.confirming = map[string]bool{}
	}
	if l.confirming[nodeID] || l.closed {
		return false
	}
	l.confirming[nodeID] = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() {
			l.mu.Lock()
			delete(l.confirming, nodeID)
			l.mu.Unlock()
		}()
		check()
	}()
	return true
}

// livenessLoop finds nodes whose heartbeats are overdue and checks them.
func (s *Server) livenessLoop(ctx context.Context) {
	every := min(s.cfg.OfflineAfter/4, 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		cutoff := now.Add(-s.cfg.OfflineAfter)
		if s.started.After(cutoff) {
			continue // the server's start is everyone's last heartbeat
		}
		stale, err := s.store.StaleNodes(ctx, cutoff, api.StatusOnline, api.StatusSuspect)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("find stale nodes", "err", err)
			}
			continue
		}
		for _, n := range stale {
			if sess := s.hub.get(n.ID); sess != nil && sess.heartbeat().After(cutoff) {
				continue // beat arrived; not flushed yet
			}
			since := n.LastHeartbeat
			if s.started.After(since) {
				since = s.started
			}
			reason := fmt.Sprintf("no heartbeat for %s; confirming", now.Sub(since).Round(time.Second))
			s.live.startCheck(n.ID, func() {
				if s.suspect(ctx, n, reason) {
					s.confirm(ctx, n, n.LastHeartbeat, s.cfg.ConfirmTimeout, fmt.Sprintf("no heartbeat since %s", since.Format(time.RFC3339)))
				}
			})
		}
	}
}

// The keepalive periods an agent may ask for: pings more often than
// minKeepalive would cost a server of many agents for nothing, and one
// rarer than maxKeepalive finds nothing the heartbeats would not.
const (
	minKeepalive = 100 * time.Millisecond
	maxKeepalive = 5 * time.Minute
)

// silenceLoop finds the sessions of this server whose agents stopped
// pinging (frozen, or cut off with the connection still open) and treats
// each as a lost connection: the node goes the way of a dropped one,
// offline ReconnectGrace after it was last heard from. Every replica runs
// it for its own sessions.
func (s *Server) silenceLoop(ctx context.Context) {
	t := time.NewTicker(silenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, sess := range s.hub.all() {
			silent := sess.silentFor(now)
			if silent == 0 || !s.hub.remove(sess) {
				continue
			}
			s.metrics.silentAgents.Inc()
			s.log.Warn("agent stopped answering on an open connection (frozen or cut off); treating it as lost",
				"node", sess.nodeID, "silent", silent.Round(time.Millisecond))
			// A frozen agent would not answer a close either.
			sess.conn.CloseNow()
			// Its grace counts from when it was last heard: what it heard
			// then is what it still acts on.
			s.connectionLost(ctx, sess.nodeID, sess.heartbeat(), sess.heard.Time())
		}
	}
}

// silenceTick is how often silenceLoop looks.
const silenceTick = 500 * time.Millisecond

// connectionLost starts the check of a node whose connection ended without
// a goodbye (since: when the server saw it end), or went silent (since:
// when the agent was last heard): it has until ReconnectGrace after since
// to come back. heard is the last beat the lost
// connection carried.
func (s *Server) connectionLost(ctx context.Context, nodeID string, heard, since time.Time) {
	s.live.startCheck(nodeID, func() {
		n, err := s.getNodeRetrying(ctx, nodeID)
		if err != nil {
			if !errdefs.IsNotFound(err) && ctx.Err() == nil {
				s.log.Error("check a node whose connection was lost; the heartbeat timeout will", "node", nodeID, "err", err)
			}
			return
		}
		if n.LastHeartbeat.After(heard) {
			// It said hello to another replica before this one saw its
			// connection here end.
			return
		}
		wait := max(0, time.Until(since.Add(s.cfg.ReconnectGrace)))
		reason := fmt.Sprintf("connection lost; waiting %s for the agent to reconnect", wait.Round(time.Millisecond))
		s.log.Info("agent connection lost; waiting for it to reconnect", "node", n.ID, "name", n.Name, "grace", wait.Round(time.Millisecond))
		if s.suspect(ctx, n, reason) {
			s.confirm(ctx, n, heard, wait, "connection lost; last heard from at "+since.UTC().Format(time.RFC3339))
		}
	})
}

// getNodeRetrying reads a node, trying again for a few seconds if the
// store fails: a busy store must not cost a check.
func (s *Server) getNodeRetrying(ctx context.Context, nodeID string) (store.Node, error) {
	wait := 50 * time.Millisecond
	for {
		n, err := s.store.GetNode(ctx, nodeID)
		if err == nil || errdefs.IsNotFound(err) || wait > 2*time.Second {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// suspect marks an online node suspect and says whether to go on checking
// it (it was online, or suspect already).
func (s *Server) suspect(ctx context.Context, n store.Node, reason string) bool {
	if n.Status == api.StatusSuspect {
		return true
	}
	changed, err := s.store.SetNodeStatus(ctx, n.ID, api.StatusSuspect, reason, api.StatusOnline)
	if err != nil && ctx.Err() == nil {
		s.log.Error("mark node suspect; the next liveness round tries again", "node", n.ID, "err", err)
	}
	return err == nil && changed
}

// confirm decides a suspect node's fate: it waits up to wait for the node
// to have a session, and a session it finds must answer a ping within
// ConfirmTimeout. A node that does neither is offline, unless it never had
// a session here and the store heard from it after heard (what this
// replica last heard): its agent is connected to another replica.
func (s *Server) confirm(ctx context.Context, n store.Node, heard time.Time, wait time.Duration, why string) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.hub.get(n.ID) == nil {
		// Its agent may be connected to another server: that one pings it
		// and writes the answer as a heartbeat, which heardElsewhere finds.
		s.signals.send(pingChannel, n.ID)
	}
	var lastErr error
	sawSession := false
	for {
		sess := s.hub.waitSession(wctx, n.ID)
		if sess == nil {
			break
		}
		sawSession = true
		if err := s.ping(ctx, sess); err == nil {
			if changed, _ := s.store.SetNodeStatus(ctx, n.ID, api.StatusOnline, "", api.StatusSuspect); changed {
				s.metrics.confirmedAlive.Inc()
				s.log.Info("suspect node answered; online", "node", n.ID, "name", n.Name)
			}
			return
		} else {
			lastErr = err
		}
		// Closing waits for the peer's answer, which an unreachable peer
		// never sends: do not make the verdict wait for it.
		s.hub.remove(sess)
		go sess.conn.Close(proto.CloseGoingAway, "did not answer the liveness check")
		if wctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return // server shutting down: decide nothing
	}
	if !sawSession && s.heardElsewhere(ctx, n, heard) {
		return
	}
	s.hub.forgetBeat(n.ID)
	reason := fmt.Sprintf("%s; not back within %s", why, wait)
	if lastErr != nil {
		reason += fmt.Sprintf(" (ping: %v)", lastErr)
	}
	if changed, err := s.store.SetNodeStatus(ctx, n.ID, api.StatusOffline, reason, api.StatusSuspect); err == nil && changed {
		s.metrics.markedOffline.Inc()
		s.log.Warn("node offline", "node", n.ID, "name", n.Name, "reason", reason)
		s.reclaim(ctx, n.ID, "node offline")
	}
}

// heardElsewhere reports whether the store heard from the node after
// heard, through another replica (this one holds no session for it: its
// hub sees only its own agents), and then puts it back online if it is
// still suspect. Its heartbeats reach the store, not this hub.
func (s *Server) heardElsewhere(ctx context.Context, n store.Node, heard time.Time) bool {
	cur, err := s.store.GetNode(ctx, n.ID)
	if err != nil || !cur.LastHeartbeat.After(heard) {
		return false
	}
	if changed, _ := s.store.SetNodeStatus(ctx, n.ID, api.StatusOnline, "", api.StatusSuspect); changed {
		s.log.Info("suspect node is heard from through another replica; online", "node", n.ID, "name", n.Name,
			"last_heartbeat", cur.LastHeartbeat)
	}
	return true
}

// ping asks a session's agent to answer within ConfirmTimeout, and counts
// an answer as a heartbeat.
func (s *Server) ping(ctx context.Context, sess *session) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	if err := sess.peer.Call(pctx, api.MethodPing, struct{}{}, nil); err != nil {
		return err
	}
	now := time.Now().UTC()
	state, suite := sess.work()
	sess.beat(now, state, suite)
	s.hub.recordBeat(store.Heartbeat{NodeID: sess.nodeID, At: now, AgentState: state, SuiteID: suite})
	return nil
}

// revoked returns the tasks among held (what a reconnecting agent holds)
// that are not running on the node by the store, after the welcome took
// back what it held at the attempt it lost: they were given to another
// node, or ended, while it was away. Its agent must not start them, and
// stops those it runs.
func (s *Server) revoked(ctx context.Context, nodeID string, held []string) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	running, err := s.store.ListTasks(ctx, store.TaskFilter{NodeID: nodeID, States: []string{api.TaskRunning}})
	if err != nil {
		return nil, fmt.Errorf("list the tasks running on node %s: %w", nodeID, err)
	}
	mine := make(map[string]bool, len(running))
	for _, t := range running {
		mine[t.ID] = true
	}
	var out []string
	for _, id := range held {
		if !mine[id] {
			out = append(out, id)
		}
	}
	return out, nil
}
