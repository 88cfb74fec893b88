package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// hub holds the live agent sessions of this server, buffers their heartbeats
// for batched writes, and pushes notifications from the durable outbox.
type hub struct {
	s *Server

	mu       sync.Mutex
	sessions map[string]*session
	arrived  chan struct{} // closed and replaced whenever a session registers

	bufMu     sync.Mutex
	heartbeat map[string]store.Heartbeat
	tokenUse  map[string]time.Time
}

func newHub(s *Server) *hub {
	return &hub{
		s:         s,
		sessions:  map[string]*session{},
		arrived:   make(chan struct{}),
		heartbeat: map[string]store.Heartbeat{},
		tokenUse:  map[string]time.Time{},
	}
}

// session is one agent's live connection.
type session struct {
	nodeID string
	addr   string // the host the agent connected from: where its workloads answer
	peer   *proto.Peer
	conn   proto.Conn
	kick   chan struct{} // wakes the notification sender; capacity 1
	// heard is when the agent was last heard from on this connection (a
	// frame or a ping); keepalive is how often it said it pings, 0 for an
	// agent that does not (set by hello, before the session is in the hub).
	heard     *proto.Heard
	keepalive time.Duration

	lastBeat atomic.Int64 // unix nanos
	// lastWork is when the agent last had work (a suite handed to it, one
	// it reported working on or left), unix nanos: the pools' idle clock,
	// which a suite shorter than a round must reset too.
	lastWork atomic.Int64
	doing    atomic.Pointer[work]
	presence atomic.Pointer[api.Presence] // nil until the agent publishes one
}

// work is what an agent last said it was doing.
type work struct{ state, suite string }

func newSession(nodeID string, conn proto.Conn, heard *proto.Heard) *session {
	return &session{nodeID: nodeID, conn: conn, heard: heard, kick: make(chan struct{}, 1)}
}

// silentFor says how long a pinging agent has not been heard from, once
// that is three of its keepalive periods or more: it is frozen, or the
// network dropped its connection without a word. Zero otherwise.
func (s *session) silentFor(now time.Time) time.Duration {
	if s.keepalive <= 0 || s.heard == nil {
		return 0
	}
	if d := now.Sub(s.heard.Time()); d >= silentPeriods*s.keepalive {
		return d
	}
	return 0
}

// silentPeriods is how many keepalive periods of silence count as a lost
// connection: one ping lost is weather, three are not.
const silentPeriods = 3

func (s *session) beat(at time.Time, state, suite string) {
	s.lastBeat.Store(at.UnixNano())
	s.doing.Store(&work{state, suite})
	if suite != "" && state != api.AgentIdle {
		s.worked(at)
	}
}

// worked records that the agent had work at t.
func (s *session) worked(t time.Time) {
	n := t.UnixNano()
	for {
		old := s.lastWork.Load()
		if old >= n || s.lastWork.CompareAndSwap(old, n) {
			return
		}
	}
}

// heartbeat returns the last heartbeat this connection saw.
func (s *session) heartbeat() time.Time {
	n := s.lastBeat.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// work returns the agent's last reported state and suite.
func (s *session) work() (state, suite string) {
	if w := s.doing.Load(); w != nil {
		return w.state, w.suite
	}
	return "", ""
}

func (s *session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (h *hub) get(nodeID string) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[nodeID]
}

// all returns the live sessions.
func (h *hub) all() []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// add makes sess the node's session, closing one it replaces.
func (h *hub) add(sess *session) {
	h.mu.Lock()
	old := h.sessions[sess.nodeID]
	h.sessions[sess.nodeID] = sess
	close(h.arrived)
	h.arrived = make(chan struct{})
	h.mu.Unlock()
	if old != nil && old != sess {
		old.conn.Close(proto.CloseGoingAway, "replaced by a newer connection of the same node")
	}
}

// remove drops sess if it is still the node's session, and says whether it
// was.
func (h *hub) remove(sess *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[sess.nodeID] == sess {
		delete(h.sessions, sess.nodeID)
		return true
	}
	return false
}

// waitSession waits until the node has a session or ctx ends.
func (h *hub) waitSession(ctx context.Context, nodeID string) *session {
	for {
		h.mu.Lock()
		sess, arrived := h.sessions[nodeID], h.arrived
		h.mu.Unlock()
		if sess != nil {
			return sess
		}
		select {
		case <-ctx.Done():
			return nil
		case <-arrived:
		}
	}
}

func (h *hub) closeAll(reason string) {
	for _, s := range h.all() {
		s.conn.Close(proto.CloseGoingAway, reason)
	}
}

// recordBeat buffers a heartbeat for the next batched write.
func (h *hub) recordBeat(hb store.Heartbeat) {
	h.bufMu.Lock()
	h.heartbeat[hb.NodeID] = hb
	h.bufMu.Unlock()
	h.s.metrics.heartbeats.Inc()
}

// forgetBeat drops a buffered heartbeat, so that a node just declared
// offline is not flipped back by a write of an older beat.
func (h *hub) forgetBeat(nodeID string) {
	h.bufMu.Lock()
	delete(h.heartbeat, nodeID)
	h.bufMu.Unlock()
}

func (h *hub) touchToken(id string) {
	h.bufMu.Lock()
	h.tokenUse[id] = time.Now().UTC()
	h.bufMu.Unlock()
}

// flushLoop writes buffered heartbeats and token uses every FlushInterval:
// one transaction for thousands of agents instead of one per beat.
func (h *hub) flushLoop(ctx context.Context) {
	t := time.NewTicker(h.s.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.flush(ctx)
		}
	}
}

func (h *hub) flush(ctx context.Context) {
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
		if err := h.s.store.RecordHeartbeats(ctx, batch); err != nil {
			h.requeue(beats)
			if ctx.Err() == nil {
				h.s.log.Error("write heartbeats; will retry", "count", len(batch), "err", err)
			}
		}
		h.s.metrics.heartbeatFlush.Observe(time.Since(start).Seconds())
	}
	if len(uses) > 0 {
		if err := h.s.store.TouchTokens(ctx, uses); err != nil && ctx.Err() == nil {
			h.s.log.Warn("record token use", "err", err)
		}
	}
}

// requeue puts back beats a failed write did not store, unless a newer
// beat of the same node arrived meanwhile.
func (h *hub) requeue(beats map[string]store.Heartbeat) {
	h.bufMu.Lock()
	defer h.bufMu.Unlock()
	for id, hb := range beats {
		if _, newer := h.heartbeat[id]; !newer {
			h.heartbeat[id] = hb
		}
	}
}

// notify appends a notification to the node's durable outbox and wakes its
// sender if the node is connected here. Delivery happens in seq order from
// the outbox, so live pushes and replays never overtake each other.
func (h *hub) notify(ctx context.Context, nodeID, method string, body []byte) error {
	if _, err := h.s.store.Enqueue(ctx, nodeID, method, body); err != nil {
		return err
	}
	if sess := h.get(nodeID); sess != nil {
		sess.wake()
	} else {
		h.s.signalOutbox(nodeID) // its session may be on another server
	}
	return nil
}

// sendLoop pushes the node's outbox to its agent, starting after the
// agent's last handled seq, until ctx ends.
func (h *hub) sendLoop(ctx context.Context, sess *session, after uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sess.kick:
		}
		pending, err := h.s.store.Pending(ctx, sess.nodeID, after)
		if err != nil {
			if ctx.Err() == nil {
				h.s.log.Error("read outbox", "node", sess.nodeID, "err", err)
			}
			continue
		}
		for _, n := range pending {
			if err := sess.peer.Notify(ctx, n.Seq, n.Method, n.Body); err != nil {
				return // the connection is gone; the next one replays
			}
			after = n.Seq
			h.s.metrics.notifySent.Inc()
		}
	}
}
