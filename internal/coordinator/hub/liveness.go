package hub

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/base/tick"
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
	confirming map[string]bool      // node ID → a check runs
	lost       map[string]time.Time // node ID → its connection ended during a running check, at
	closed     bool                 // the server stops: no new checks
	wg         sync.WaitGroup
}

// noteLost records that the node's connection ended while a check of it
// runs, so that check gives it the reconnect grace and not less.
func (l *liveness) noteLost(nodeID string, since time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.confirming[nodeID] {
		if l.lost == nil {
			l.lost = map[string]time.Time{}
		}
		l.lost[nodeID] = since
	}
}

// lostSince says when the node's connection ended during its check, if it
// did.
func (l *liveness) lostSince(nodeID string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since, ok := l.lost[nodeID]
	return since, ok
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
			delete(l.lost, nodeID)
			l.mu.Unlock()
		}()
		check()
	}()
	return true
}

// livenessLoop finds nodes whose heartbeats are overdue and checks them.
func (h *Hub) livenessLoop(ctx context.Context) {
	every := min(h.cfg.OfflineAfter/4, 5*time.Second)
	tick.Every(ctx, every, func() {
		now := time.Now()
		cutoff := now.Add(-h.cfg.OfflineAfter)
		if h.started.After(cutoff) {
			return // the server's start is everyone's last heartbeat
		}
		stale, err := h.store.StaleNodes(ctx, cutoff, api.StatusOnline, api.StatusSuspect)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error("find stale nodes", "err", err)
			}
			return
		}
		for _, n := range stale {
			if sess := h.Get(n.ID); sess != nil && sess.Heartbeat().After(cutoff) {
				continue // beat arrived; not flushed yet
			}
			since := n.LastHeartbeat
			if h.started.After(since) {
				since = h.started
			}
			reason := fmt.Sprintf("no heartbeat for %s; confirming", now.Sub(since).Round(time.Second))
			h.live.startCheck(n.ID, func() {
				if h.suspect(ctx, n, reason) {
					h.confirm(ctx, n, n.LastHeartbeat, h.cfg.ConfirmTimeout, fmt.Sprintf("no heartbeat since %s", since.Format(time.RFC3339)))
				}
			})
		}
	})
}

// silenceLoop finds the sessions of this server whose agents stopped
// pinging (frozen, or cut off with the connection still open) and treats
// each as a lost connection: the node goes the way of a dropped one,
// offline ReconnectGrace after it was last heard from. Every replica runs
// it for its own sessions.
func (h *Hub) silenceLoop(ctx context.Context) {
	tick.Every(ctx, silenceTick, func() {
		now := time.Now()
		for _, sess := range h.All() {
			silent := sess.silentFor(now)
			if silent == 0 || !h.Remove(sess) {
				continue
			}
			h.metrics.silentAgents.Inc()
			h.log.Warn("agent stopped answering on an open connection (frozen or cut off); treating it as lost",
				"node", sess.NodeID, "silent", silent.Round(time.Millisecond))
			// A frozen agent would not answer a close either.
			sess.Conn.CloseNow()
			// Its grace counts from when it was last heard: what it heard
			// then is what it still acts on.
			h.ConnectionLost(ctx, sess.NodeID, sess.Heartbeat(), sess.heard.Time())
		}
	})
}

// silenceTick is how often silenceLoop looks.
const silenceTick = 500 * time.Millisecond

// ConnectionLost starts the check of a node whose connection ended without
// a goodbye (since: when the server saw it end), or went silent (since:
// when the agent was last heard): it has until ReconnectGrace after since
// to come back. heard is the last beat the lost
// connection carried.
func (h *Hub) ConnectionLost(ctx context.Context, nodeID string, heard, since time.Time) {
	started := h.live.startCheck(nodeID, func() {
		n, err := h.getNodeRetrying(ctx, nodeID)
		if err != nil {
			if !errdefs.IsNotFound(err) && ctx.Err() == nil {
				h.log.Error("check a node whose connection was lost; the heartbeat timeout will", "node", nodeID, "err", err)
			}
			return
		}
		if n.LastHeartbeat.After(heard) {
			// It said hello to another replica before this one saw its
			// connection here end.
			return
		}
		wait := max(0, time.Until(since.Add(h.cfg.ReconnectGrace)))
		reason := fmt.Sprintf("connection lost; waiting %s for the agent to reconnect", wait.Round(time.Millisecond))
		h.log.Info("agent connection lost; waiting for it to reconnect", "node", n.ID, "name", n.Name, "grace", wait.Round(time.Millisecond))
		if h.suspect(ctx, n, reason) {
			h.confirm(ctx, n, heard, wait, lostReason(since))
		}
	})
	if !started {
		// A check runs already (its heartbeats were overdue): it must not
		// give up on the node before the reconnect grace is over.
		h.live.noteLost(nodeID, since)
	}
}

// lostReason is why a node whose connection ended at since is offline.
func lostReason(since time.Time) string {
	return "connection lost; last heard from at " + since.UTC().Format(time.RFC3339)
}

// getNodeRetrying reads a node, trying again for a few seconds if the
// store fails: a busy store must not cost a check.
func (h *Hub) getNodeRetrying(ctx context.Context, nodeID string) (store.Node, error) {
	wait := 50 * time.Millisecond
	for {
		n, err := h.store.GetNode(ctx, nodeID)
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
func (h *Hub) suspect(ctx context.Context, n store.Node, reason string) bool {
	if n.Status == api.StatusSuspect {
		return true
	}
	changed, err := h.store.SetNodeStatus(ctx, n.ID, api.StatusSuspect, reason, api.StatusOnline)
	if err != nil && ctx.Err() == nil {
		h.log.Error("mark node suspect; the next liveness round tries again", "node", n.ID, "err", err)
	}
	return err == nil && changed
}

// confirm decides a suspect node's fate: it waits up to wait for the node
// to have a session, and a session it finds must answer a ping within
// ConfirmTimeout. A node that does neither is offline, unless it never had
// a session here and the store heard from it after heard (what this
// replica last heard): its agent is connected to another replica.
func (h *Hub) confirm(ctx context.Context, n store.Node, heard time.Time, wait time.Duration, why string) {
	start := time.Now()
	deadline := start.Add(wait)
	if h.Get(n.ID) == nil {
		// Its agent may be connected to another server: that one pings it
		// and writes the answer as a heartbeat, which heardElsewhere finds.
		h.signals.send(pingChannel, n.ID)
	}
	var lastErr error
	sawSession := false
	for {
		wctx, cancel := context.WithDeadline(ctx, deadline)
		sess := h.waitSession(wctx, n.ID)
		cancel()
		if sess == nil {
			// Its connection ended while it was checked: it has the
			// reconnect grace, counted from then, to come back.
			if since, ok := h.live.lostSince(n.ID); ok && since.Add(h.cfg.ReconnectGrace).After(deadline) {
				deadline = since.Add(h.cfg.ReconnectGrace)
				wait, why = deadline.Sub(start).Round(time.Millisecond), lostReason(since)
				continue
			}
			break
		}
		sawSession = true
		if err := h.ping(ctx, sess); err == nil {
			if changed, _ := h.store.SetNodeStatus(ctx, n.ID, api.StatusOnline, "", api.StatusSuspect); changed {
				h.metrics.confirmedAlive.Inc()
				h.log.Info("suspect node answered; online", "node", n.ID, "name", n.Name)
			}
			return
		} else {
			lastErr = err
		}
		// Closing waits for the peer's answer, which an unreachable peer
		// never sends: do not make the verdict wait for it.
		h.Remove(sess)
		go sess.Conn.Close(proto.CloseGoingAway, "did not answer the liveness check")
		if time.Now().After(deadline) {
			if _, ok := h.live.lostSince(n.ID); !ok {
				break
			}
		}
	}
	if ctx.Err() != nil {
		return // server shutting down: decide nothing
	}
	if !sawSession && h.heardElsewhere(ctx, n, heard) {
		return
	}
	h.ForgetBeat(n.ID)
	if since, ok := h.live.lostSince(n.ID); ok && !sawSession {
		// Its connection ended during the check, its grace over before
		// the check's end: that is what happened to it, not the late
		// heartbeats that began the check.
		why = lostReason(since)
	}
	reason := fmt.Sprintf("%s; not back within %s", why, wait)
	if lastErr != nil {
		reason += fmt.Sprintf(" (ping: %v)", lastErr)
	}
	if changed, err := h.store.SetNodeStatus(ctx, n.ID, api.StatusOffline, reason, api.StatusSuspect); err == nil && changed {
		h.metrics.markedOffline.Inc()
		h.log.Warn("node offline", "node", n.ID, "name", n.Name, "reason", reason)
		h.hooks.Reclaim(ctx, n.ID, "node offline")
	}
}

// heardElsewhere reports whether the store heard from the node after
// heard, through another replica (this one holds no session for it: its
// hub sees only its own agents), and then puts it back online if it is
// still suspect. Its heartbeats reach the store, not this hub.
func (h *Hub) heardElsewhere(ctx context.Context, n store.Node, heard time.Time) bool {
	cur, err := h.store.GetNode(ctx, n.ID)
	if err != nil || !cur.LastHeartbeat.After(heard) {
		return false
	}
	if changed, _ := h.store.SetNodeStatus(ctx, n.ID, api.StatusOnline, "", api.StatusSuspect); changed {
		h.log.Info("suspect node is heard from through another replica; online", "node", n.ID, "name", n.Name,
			"last_heartbeat", cur.LastHeartbeat)
	}
	return true
}

// ping asks a session's agent to answer within ConfirmTimeout, and counts
// an answer as a heartbeat.
func (h *Hub) ping(ctx context.Context, sess *Session) error {
	pctx, cancel := context.WithTimeout(ctx, h.cfg.ConfirmTimeout)
	defer cancel()
	if err := sess.Peer.Call(pctx, api.MethodPing, struct{}{}, nil); err != nil {
		return err
	}
	now := time.Now().UTC()
	state, suite := sess.Work()
	sess.Beat(now, state, suite)
	h.RecordBeat(store.Heartbeat{NodeID: sess.NodeID, At: now, AgentState: state, SuiteID: suite})
	return nil
}
