package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/proto"
	"github.com/nodemgr/nodemgr/internal/store"
)

// livenessLoop finds nodes whose heartbeats are overdue, marks them suspect,
// and confirms each one before declaring it offline: a connected agent is
// pinged; a disconnected one is given ConfirmTimeout to come back. Only
// then is it offline — a slow store or a busy agent does not cost a node.
func (s *Server) livenessLoop(ctx context.Context) {
	every := min(s.cfg.OfflineAfter/4, 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	var confirming sync.Map // node ID → struct{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		cutoff := now.Add(-s.cfg.OfflineAfter)
		stale, err := s.store.StaleNodes(ctx, cutoff, api.StatusOnline, api.StatusSuspect)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("find stale nodes", "err", err)
			}
			continue
		}
		for _, n := range stale {
			if sess := s.hub.get(n.ID); sess != nil {
				if sess.heartbeat().After(cutoff) {
					continue // beat arrived; not flushed yet
				}
			}
			if _, busy := confirming.LoadOrStore(n.ID, struct{}{}); busy {
				continue
			}
			if n.Status == api.StatusOnline {
				reason := fmt.Sprintf("no heartbeat for %s; confirming", now.Sub(n.LastHeartbeat).Round(time.Second))
				if changed, err := s.store.SetNodeStatus(ctx, n.ID, api.StatusSuspect, reason, api.StatusOnline); err != nil || !changed {
					confirming.Delete(n.ID)
					continue
				}
			}
			wg.Add(1)
			go func(n store.Node) {
				defer wg.Done()
				defer confirming.Delete(n.ID)
				s.confirm(ctx, n)
			}(n)
		}
	}
}

// confirm decides a suspect node's fate.
func (s *Server) confirm(ctx context.Context, n store.Node) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConfirmTimeout)
	defer cancel()
	var lastErr error
	for {
		sess := s.hub.waitSession(cctx, n.ID)
		if sess == nil {
			break
		}
		err := sess.peer.Call(cctx, api.MethodPing, struct{}{}, nil)
		if err == nil {
			now := time.Now().UTC()
			state, suite := sess.work()
			sess.beat(now, state, suite)
			s.hub.recordBeat(store.Heartbeat{NodeID: n.ID, At: now, AgentState: state, SuiteID: suite})
			if changed, _ := s.store.SetNodeStatus(ctx, n.ID, api.StatusOnline, "", api.StatusSuspect); changed {
				s.metrics.confirmedAlive.Inc()
				s.log.Info("suspect node answered; online", "node", n.ID, "name", n.Name)
			}
			return
		}
		lastErr = err
		sess.conn.Close(proto.CloseGoingAway, "did not answer the liveness check")
		s.hub.remove(sess)
		if cctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return // server shutting down: decide nothing
	}
	s.hub.forgetBeat(n.ID)
	reason := fmt.Sprintf("no heartbeat since %s and not reachable within %s", n.LastHeartbeat.Format(time.RFC3339), s.cfg.ConfirmTimeout)
	if lastErr != nil {
		reason += fmt.Sprintf(" (ping: %v)", lastErr)
	}
	if changed, err := s.store.SetNodeStatus(ctx, n.ID, api.StatusOffline, reason, api.StatusSuspect); err == nil && changed {
		s.metrics.markedOffline.Inc()
		s.log.Warn("node offline", "node", n.ID, "name", n.Name, "reason", reason)
		s.reclaim(ctx, n.ID, "node offline")
	}
}
