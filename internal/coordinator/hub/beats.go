package hub

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Heartbeat takes an agent's heartbeat: the session's state, the batch
// the store gets next, the node's usage chart. It returns the time it
// counts the beat at.
func (h *Hub) Heartbeat(sess *Session, hb api.Heartbeat) time.Time {
	now := time.Now().UTC()
	sess.Beat(now, hb.State, hb.SuiteID)
	h.RecordBeat(store.Heartbeat{NodeID: sess.NodeID, At: now, AgentState: hb.State, SuiteID: hb.SuiteID,
		Held: sess.Held(hb.SuiteID)})
	h.Usage.Record(sess.NodeID, now, hb.Usage)
	if hb.Overlay != nil {
		sess.overlayLinks.Store(&hb.Overlay)
	}
	return now
}

// Goodbye takes an agent's leaving on purpose: its node is offline at
// once, and its running tasks go back to their queues.
func (h *Hub) Goodbye(ctx context.Context, sess *Session, why string) error {
	h.ForgetBeat(sess.NodeID)
	reason := "agent shut down"
	if why != "" {
		reason += ": " + why
	}
	if _, err := h.store.SetNodeStatus(ctx, sess.NodeID, api.StatusOffline, reason); err != nil {
		return err
	}
	h.hooks.Reclaim(ctx, sess.NodeID, reason)
	return nil
}

// RecordBeat buffers a heartbeat for the next batched write.
func (h *Hub) RecordBeat(hb store.Heartbeat) {
	h.bufMu.Lock()
	h.heartbeat[hb.NodeID] = hb
	h.bufMu.Unlock()
	h.metrics.heartbeats.Inc()
}

// NoteHeld takes an agent's count of the suite's tasks it holds and has
// not started (with its fetches and reports), for the store's next
// heartbeat batch. It changes nothing else a heartbeat does: the beat
// keeps the time, state and suite it had.
func (h *Hub) NoteHeld(sess *Session, suite string, n int) {
	if old := sess.held.Load(); old != nil && *old == (heldCount{suite, n}) {
		return
	}
	state, current := sess.Work()
	if current != suite {
		return // its beat saying it works on suite is on its way: count then
	}
	h.bufMu.Lock()
	hb, ok := h.heartbeat[sess.NodeID]
	if !ok {
		hb = store.Heartbeat{NodeID: sess.NodeID, At: sess.Heartbeat(), AgentState: state, SuiteID: current}
	}
	if hb.SuiteID == suite && !hb.At.IsZero() {
		hb.Held = n
		h.heartbeat[sess.NodeID] = hb
		sess.held.Store(&heldCount{suite, n})
	}
	h.bufMu.Unlock()
}

// ForgetBeat drops a buffered heartbeat, so that a node just declared
// offline is not flipped back by a write of an older beat.
func (h *Hub) ForgetBeat(nodeID string) {
	h.bufMu.Lock()
	delete(h.heartbeat, nodeID)
	h.bufMu.Unlock()
}

// TouchToken buffers a use of token id, written with the heartbeats.
func (h *Hub) TouchToken(id string) {
	h.bufMu.Lock()
	h.tokenUse[id] = time.Now().UTC()
	h.bufMu.Unlock()
}

// flushLoop writes buffered heartbeats and token uses every FlushInterval:
// one transaction for thousands of agents instead of one per beat.
func (h *Hub) flushLoop(ctx context.Context) {
	tick.Every(ctx, h.cfg.FlushInterval, func() { h.Flush(ctx) })
}

// Flush writes the buffered heartbeats and token uses now.
func (h *Hub) Flush(ctx context.Context) {
	h.bufMu.Lock()
	beats, uses := h.heartbeat, h.tokenUse
	h.heartbeat, h.tokenUse = map[string]store.Heartbeat{}, map[string]time.Time{}
	h.bufMu.Unlock()

	if len(beats) > 0 {
		batch := make([]store.Heartbeat, 0, len(beats))
		for _, hb := range beats {
			batch = append(batch, hb)
		}
		start := time.Now()
		if err := h.store.RecordHeartbeats(ctx, batch); err != nil {
			h.requeue(beats)
			if ctx.Err() == nil {
				h.log.Error("write heartbeats; will retry", "count", len(batch), "err", err)
			}
		}
		h.metrics.heartbeatFlush.Observe(time.Since(start).Seconds())
	}
	if len(uses) > 0 {
		if err := h.store.TouchTokens(ctx, uses); err != nil && ctx.Err() == nil {
			h.log.Warn("record token use", "err", err)
		}
	}
}

// requeue puts back beats a failed write did not store, unless a newer
// beat of the same node arrived meanwhile.
func (h *Hub) requeue(beats map[string]store.Heartbeat) {
	h.bufMu.Lock()
	defer h.bufMu.Unlock()
	for id, hb := range beats {
		if _, newer := h.heartbeat[id]; !newer {
			h.heartbeat[id] = hb
		}
	}
}

// Notify appends a notification to the node's durable outbox and wakes its
// sender if the node is connected here. Delivery happens in seq order from
// the outbox, so live pushes and replays never overtake each other.
func (h *Hub) Notify(ctx context.Context, nodeID, method string, body []byte) error {
	if _, err := h.store.Enqueue(ctx, nodeID, method, body); err != nil {
		return err
	}
	if sess := h.Get(nodeID); sess != nil {
		sess.wake()
	} else {
		h.signals.send(outboxChannel, nodeID) // its session may be on another server
	}
	return nil
}

// sendLoop pushes the node's outbox to its agent, starting after the
// agent's last handled seq, until ctx ends.
func (h *Hub) sendLoop(ctx context.Context, sess *Session, after uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.kick:
		}
		pending, err := h.store.Pending(ctx, sess.NodeID, after)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error("read outbox", "node", sess.NodeID, "err", err)
			}
			continue
		}
		for _, n := range pending {
			if err := sess.Peer.Notify(ctx, n.Seq, n.Method, n.Body); err != nil {
				return // the connection is gone; the next one replays
			}
			after = n.Seq
			h.metrics.notifySent.Inc()
		}
	}
}
