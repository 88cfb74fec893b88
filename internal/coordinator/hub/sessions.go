package hub

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Session is one agent's live connection.
type Session struct {
	NodeID string
	Addr   string // the host the agent connected from: where its workloads answer
	Peer   *proto.Peer
	Conn   proto.Conn
	// Keepalive is how often the agent said it pings, 0 for an agent that
	// does not (set by its hello, before the session is attached).
	Keepalive time.Duration

	kick chan struct{} // wakes the notification sender; capacity 1
	// heard is when the agent was last heard from on this connection (a
	// frame or a ping).
	heard *proto.Heard

	lastBeat atomic.Int64 // unix nanos
	// lastWork is when the agent last had work (a suite handed to it, one
	// it reported working on or left), unix nanos: the pools' idle clock,
	// which a suite shorter than a round must reset too.
	lastWork atomic.Int64
	doing    atomic.Pointer[work]
	presence atomic.Pointer[api.Presence] // nil until the agent publishes one
	// held is the agent's last count of its suite's tasks held unstarted
	// that reached the heartbeat batch.
	held atomic.Pointer[heldCount]
	// parking holds the agent's parked tasks.fetch, if any (parking.go).
	parking parking
	// overlayLinks are the node's overlay links as its last heartbeat
	// said, for the per-peer metrics; nil before one.
	overlayLinks atomic.Pointer[[]api.OverlayLink]
}

// OverlayLinks are the node's overlay links as its last heartbeat said.
func (s *Session) OverlayLinks() []api.OverlayLink {
	if l := s.overlayLinks.Load(); l != nil {
		return *l
	}
	return nil
}

// heldCount is how many of a suite's tasks an agent holds unstarted.
type heldCount struct {
	suite string
	n     int
}

// Held is the agent's last count of suite's tasks it holds unstarted.
func (s *Session) Held(suite string) int {
	if h := s.held.Load(); h != nil && h.suite == suite {
		return h.n
	}
	return 0
}

// work is what an agent last said it was doing.
type work struct{ state, suite string }

// NewSession makes the session of nodeID's connection; heard is the
// connection's clock of when the agent was last heard from (nil: never
// silent, as in tests).
func NewSession(nodeID string, conn proto.Conn, heard *proto.Heard) *Session {
	return &Session{NodeID: nodeID, Conn: conn, heard: heard, kick: make(chan struct{}, 1)}
}

// silentFor says how long a pinging agent has not been heard from, once
// that is three of its keepalive periods or more: it is frozen, or the
// network dropped its connection without a word. Zero otherwise.
func (s *Session) silentFor(now time.Time) time.Duration {
	if s.Keepalive <= 0 || s.heard == nil {
		return 0
	}
	if d := now.Sub(s.heard.Time()); d >= silentPeriods*s.Keepalive {
		return d
	}
	return 0
}

// silentPeriods is how many keepalive periods of silence count as a lost
// connection: one ping lost is weather, three are not.
const silentPeriods = 3

// The keepalive periods an agent may ask for: pings more often than
// minKeepalive would cost a server of many agents for nothing, and one
// rarer than maxKeepalive finds nothing the heartbeats would not.
const (
	minKeepalive = 100 * time.Millisecond
	maxKeepalive = 5 * time.Minute
)

// CheckKeepalive checks the keepalive period an agent's hello asks for
// (0: it does not ping).
func CheckKeepalive(k time.Duration) error {
	if k != 0 && (k < minKeepalive || k > maxKeepalive) {
		return errdefs.Field("keepalive", "must be between %s and %s, got %s", minKeepalive, maxKeepalive, k)
	}
	return nil
}

// Beat records a heartbeat at at, and what the agent said it does.
func (s *Session) Beat(at time.Time, state, suite string) {
	s.lastBeat.Store(at.UnixNano())
	s.doing.Store(&work{state, suite})
	if suite != "" && state != api.AgentIdle {
		s.Worked(at)
	}
}

// Worked records that the agent had work at t.
func (s *Session) Worked(t time.Time) {
	n := t.UnixNano()
	for {
		old := s.lastWork.Load()
		if old >= n || s.lastWork.CompareAndSwap(old, n) {
			return
		}
	}
}

// LastWork is when the agent last had work; zero if never on this
// connection.
func (s *Session) LastWork() time.Time {
	if n := s.lastWork.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Heartbeat returns the last heartbeat this connection saw.
func (s *Session) Heartbeat() time.Time {
	n := s.lastBeat.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Work returns the agent's last reported state and suite.
func (s *Session) Work() (state, suite string) {
	if w := s.doing.Load(); w != nil {
		return w.state, w.suite
	}
	return "", ""
}

// Draining says whether a connected node takes no new work: its agent
// drains for an interruption.
func (s *Session) Draining() bool {
	state, _ := s.Work()
	return state == api.AgentDraining
}

// Node is the session's node ID.
func (s *Session) Node() string { return s.NodeID }

// Call makes a request of the agent and waits for its answer.
func (s *Session) Call(ctx context.Context, method string, params, result any) error {
	return s.Peer.Call(ctx, method, params, result)
}

// Presence is what the agent last published of itself; nil until it does.
func (s *Session) Presence() *api.Presence { return s.presence.Load() }

// SetPresence keeps what the agent published of itself.
func (s *Session) SetPresence(p *api.Presence) { s.presence.Store(p) }

// wake makes the sender look at the node's outbox.
func (s *Session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Get returns the node's session on this server; nil if it has none here.
func (h *Hub) Get(nodeID string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[nodeID]
}

// All returns the live sessions.
func (h *Hub) All() []*Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

// Count is how many agents are connected here.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Hello brings the node of sess online for the agent's hello: the store
// takes what it says of itself and the server it said it to, and what it
// handled of its outbox; the session takes its keepalive, state and
// notices (those it has now replace those kept: a machine stopped and
// started again has none).
func (h *Hub) Hello(ctx context.Context, sess *Session, hello api.Hello) (store.Node, error) {
	now := time.Now().UTC()
	n, err := h.store.UpdateNode(ctx, sess.NodeID, func(n *store.Node) error {
		if hello.Name != "" {
			n.Name = hello.Name
		}
		n.Hardware = hello.Hardware
		n.AgentVersion = hello.AgentVersion
		n.AgentState = hello.State
		n.CurrentSuite = hello.SuiteID
		n.Status, n.StatusReason = api.StatusOnline, ""
		n.LastHeartbeat = now
		n.Replica = h.instance
		return nil
	})
	if err != nil {
		return store.Node{}, err
	}
	// Everything up to LastSeq was handled; an ack may have been lost.
	if err := h.store.Ack(ctx, n.ID, hello.LastSeq); err != nil {
		return store.Node{}, err
	}
	sess.Keepalive = time.Duration(hello.Keepalive)
	sess.Beat(now, hello.State, hello.SuiteID)
	return n, h.KeepNotices(ctx, sess, hello.Notices)
}

// Attach makes sess the node's session, once its hello is done, and
// pushes its outbox from after (the last seq the agent handled) until
// connCtx, the connection's life, ends.
func (h *Hub) Attach(connCtx context.Context, sess *Session, after uint64) {
	h.Add(sess)
	go h.sendLoop(connCtx, sess, after)
	sess.wake() // replay what is pending
}

// Add makes sess the node's session, closing one it replaces.
func (h *Hub) Add(sess *Session) {
	h.mu.Lock()
	old := h.sessions[sess.NodeID]
	h.sessions[sess.NodeID] = sess
	close(h.arrived)
	h.arrived = make(chan struct{})
	h.mu.Unlock()
	if old != nil && old != sess {
		old.Conn.Close(proto.CloseGoingAway, "replaced by a newer connection of the same node")
	}
}

// Remove drops sess if it is still the node's session, and says whether it
// was.
func (h *Hub) Remove(sess *Session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[sess.NodeID] == sess {
		delete(h.sessions, sess.NodeID)
		return true
	}
	return false
}

// waitSession waits until the node has a session or ctx ends.
func (h *Hub) waitSession(ctx context.Context, nodeID string) *Session {
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

// CloseAll closes every session, telling each agent why.
func (h *Hub) CloseAll(reason string) {
	for _, s := range h.All() {
		s.Conn.Close(proto.CloseGoingAway, reason)
	}
}
