package hub

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/backoff"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Servers that share a store (PostgreSQL) each hold the sessions of the
// agents connected to them. What one server does for an agent connected
// to another travels as a signal (store.Signals):
//
//   - outboxChannel, payload a node ID: a notification was enqueued for
//     that node; the server holding its session sends its outbox;
//   - wakeChannel, payload "SENDER SUITE": tasks of the suite may be
//     taken; every other server wakes its agents that are idle or run it
//     (SUITE empty: its idle agents), as the sender did its own;
//   - cancelChannel, payload "SENDER SUITE": the suite was cancelled;
//     every other server tells its agents that run it to stop (the
//     store's note of what a node runs lags by a heartbeat flush);
//   - relayChannel: calls to an agent's local API made elsewhere
//     (relay.go);
//   - pingChannel, payload a node ID: the leader's liveness check of a
//     node whose heartbeats are overdue; the server holding its session
//     pings it, and an answer is a heartbeat, written to the store;
//   - store.AuthChannel: tokens, users or memberships changed (the
//     database signals it); the store empties its cache of them.
//
// A server that starts listening, or listens again after its connection
// dropped, may have missed signals: it sends every outbox it holds and
// wakes its idle agents. A store without Signals (SQLite) has one server,
// and none of this runs.
const (
	outboxChannel = "nodemgr_outbox"
	wakeChannel   = "nodemgr_wake"
	cancelChannel = "nodemgr_cancel"
	pingChannel   = "nodemgr_ping"
	// orchestrateChannel asks the leader for an orchestrator round now: a
	// pool or demand changed through another server.
	orchestrateChannel = "nodemgr_orchestrate"
)

// signaller sends signals and hears other servers'.
type signaller struct {
	sig store.Signals // nil with one server
	id  string        // this server's replica ID, to skip its own signals

	mu     sync.Mutex
	recent map[string]time.Time // channel+payload → last sent (debounce)
}

// signalDebounce drops a signal equal to one sent this recently: a burst
// of submissions to one suite wakes the other servers once.
const signalDebounce = 50 * time.Millisecond

func newSignaller(sig store.Signals, replicaID string) *signaller {
	return &signaller{sig: sig, id: replicaID, recent: map[string]time.Time{}}
}

// send signals in the background, unless the same went out just now.
func (g *signaller) send(channel, payload string) {
	if g.sig == nil {
		return
	}
	key := channel + "\x00" + payload
	now := time.Now()
	g.mu.Lock()
	if now.Sub(g.recent[key]) < signalDebounce {
		g.mu.Unlock()
		return
	}
	g.recent[key] = now
	if len(g.recent) > 10_000 {
		clear(g.recent)
	}
	g.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.sig.Signal(ctx, channel, payload) // a hint: a lost one is made good by the next
	}()
}

// sendFrom signals payload with this server's id before it, so that the
// others act on it and this one skips its own.
func (g *signaller) sendFrom(channel, payload string) { g.send(channel, g.id+" "+payload) }

// SignalWake tells the other servers to wake their agents for the suite.
func (h *Hub) SignalWake(suiteID string) { h.signals.sendFrom(wakeChannel, suiteID) }

// SignalCancel tells the other servers that the suite was cancelled.
func (h *Hub) SignalCancel(suiteID string) { h.signals.sendFrom(cancelChannel, suiteID) }

// WakeOrchestrator asks for an orchestrator round soon: demand or nodes
// changed. The orchestrator runs on the leader: another server asks it by
// a signal.
func (h *Hub) WakeOrchestrator() {
	if _, leads := h.Leads(); leads {
		h.hooks.WakeOrchestrator()
		return
	}
	h.signals.send(orchestrateChannel, "")
}

// signalLoop hears other servers' signals until ctx ends.
func (h *Hub) signalLoop(ctx context.Context) {
	if h.signals.sig == nil {
		return
	}
	bo := &backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := h.signals.sig.Listen(ctx, []string{outboxChannel, wakeChannel, cancelChannel, relayChannel, pingChannel, orchestrateChannel, store.AuthChannel}, h.heard)
		if ctx.Err() != nil {
			return
		}
		// Deaf until it listens again: a revoke made meanwhile must not
		// stay cached (listening again empties the cache once more).
		h.authChanged()
		d := bo.Next()
		h.log.Warn("listening for other servers' signals failed; listening again", "err", err, "in", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// heard acts on one signal.
func (h *Hub) heard(channel, payload string) {
	switch channel {
	case outboxChannel:
		if payload == "" { // maybe missed some: send every outbox held here
			for _, sess := range h.All() {
				sess.wake()
			}
			return
		}
		if sess := h.Get(payload); sess != nil {
			sess.wake()
		}
	case wakeChannel:
		from, suite, _ := strings.Cut(payload, " ")
		if payload != "" && from == h.signals.id {
			return // its own: its agents were woken when it was sent
		}
		h.WakeLocal(suite, "")
	case relayChannel:
		h.heardRelay(payload)
	case store.AuthChannel:
		h.authChanged()
	case orchestrateChannel:
		if _, leads := h.Leads(); leads {
			h.hooks.WakeOrchestrator()
		}
	case pingChannel:
		if sess := h.Get(payload); sess != nil {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*h.cfg.ConfirmTimeout)
				defer cancel()
				// An answer is a heartbeat, written at once: the leader
				// reads it within its confirm timeout. None, and it decides.
				if h.ping(ctx, sess) == nil {
					h.Flush(ctx)
				}
			}()
		}
	case cancelChannel:
		from, suite, _ := strings.Cut(payload, " ")
		if payload == "" || from == h.signals.id {
			return // a missed cancel shows at the agent's next fetch, which is refused
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.hooks.SuiteCancelled(ctx, suite)
	}
}

// authChanged empties the store's cache of tokens and users, if it keeps
// one.
func (h *Hub) authChanged() {
	if c, ok := h.signals.sig.(store.AuthCaching); ok {
		c.AuthChanged()
	}
}

// WakeLocal wakes the agents connected here, but the one of node except,
// that are idle or run the suite (any suite: only the idle ones), and the
// fetches parked on the suite (any suite: all of them).
func (h *Hub) WakeLocal(suiteID, except string) {
	for _, sess := range h.All() {
		if sess.NodeID == except {
			continue
		}
		if sess.wakeParked(suiteID) {
			continue // its parked fetch claims now
		}
		state, suite := sess.Work()
		if state != api.AgentIdle && (suiteID == "" || suite != suiteID) {
			continue
		}
		go func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sess.Peer.Call(cctx, api.MethodWake, api.SuiteRef{SuiteID: suiteID}, nil)
		}()
	}
}

// ConnectedElsewhere reports whether a node this server holds no session
// for is online with its agent connected to another server on the store:
// the server process it said hello to still renews its replica lease.
func (h *Hub) ConnectedElsewhere(n store.Node) bool {
	if !h.Relayed() || n.Status != api.StatusOnline {
		return false
	}
	if n.Replica == "" || n.Replica == h.instance {
		// Not said hello since replicas were watched; or here, where
		// the hub knows.
		return n.Replica == "" && time.Since(n.LastHeartbeat) < h.cfg.OfflineAfter+2*h.cfg.FlushInterval
	}
	life, err := h.replicaLife(h.lifeCtx(), n.Replica)
	return err == nil && life.alive
}

// Connected reports whether the node's agent is connected to this server
// or to another on the store.
func (h *Hub) Connected(n store.Node) bool {
	return h.Get(n.ID) != nil || h.ConnectedElsewhere(n)
}
