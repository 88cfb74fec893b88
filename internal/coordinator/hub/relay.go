package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// A call to an agent's local API (services, artifacts, books, containers,
// ensembles) made on a server the agent is not connected to is relayed
// through the store to the server that holds its session:
//
//  1. the caller stores the request as a document (relayCallKind) and
//     signals "call ID NODE" on relayChannel;
//  2. the server holding NODE's session makes the call, stores the answer
//     (relayAnswerKind) and signals "done ID";
//  3. the caller, woken by the signal (or finding the answer when it looks
//     every relayPoll, should a signal be lost), reads the answer and
//     deletes both documents.
//
// No server holding the session answers within the call's timeout: the
// node is as good as disconnected, and the caller says so.
const (
	relayChannel    = "nodemgr_relay"
	relayCallKind   = "relay-call"
	relayAnswerKind = "relay-answer"
	relayPoll       = 250 * time.Millisecond
)

// relayAnswer is what the server holding the session stores.
type relayAnswer struct {
	Response api.LocalResponse `json:"response"`
	Error    *api.Error        `json:"error,omitempty"`
}

// relayWaiters are the callers waiting here for their answers.
type relayWaiters struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

func (w *relayWaiters) add(id string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]chan struct{}{}
	}
	ch := make(chan struct{}, 1)
	w.m[id] = ch
	return ch
}

func (w *relayWaiters) remove(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, id)
}

func (w *relayWaiters) done(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.m[id]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Relayed reports whether calls to agents elsewhere can be relayed: the
// store is shared by several servers.
func (h *Hub) Relayed() bool { return h.signals.sig != nil }

// RelayCall makes req on node n's agent through the server holding its
// session.
func (h *Hub) RelayCall(ctx context.Context, n store.Node, req api.LocalRequest, timeout time.Duration) (api.LocalResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id := auth.NewID("rc-")
	body, err := json.Marshal(req)
	if err != nil {
		return api.LocalResponse{}, err
	}
	if _, err := h.store.PutDocument(ctx, store.Document{Kind: relayCallKind, Name: id, Body: body}); err != nil {
		return api.LocalResponse{}, fmt.Errorf("node %s: relay the call: %w", n.Name, err)
	}
	done := h.relayWait.add(id)
	defer func() {
		h.relayWait.remove(id)
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		h.store.DeleteDocument(dctx, relayCallKind, id)
		h.store.DeleteDocument(dctx, relayAnswerKind, id)
	}()
	h.signals.send(relayChannel, "call "+id+" "+n.ID)
	poll := time.NewTicker(relayPoll)
	defer poll.Stop()
	for {
		if d, err := h.store.GetDocument(ctx, relayAnswerKind, id); err == nil {
			return readAnswer(n, d.Body)
		} else if !errdefs.IsNotFound(err) && ctx.Err() == nil {
			return api.LocalResponse{}, fmt.Errorf("node %s: read the relayed answer: %w", n.Name, err)
		}
		select {
		case <-ctx.Done():
			return api.LocalResponse{}, fmt.Errorf("node %s is not connected to this server, and no other server answered for it within %v (%s); wait for its agent to reconnect: %w",
				n.Name, timeout, n.Status, errdefs.ErrUnavailable)
		case <-done:
		case <-poll.C:
		}
	}
}

// readAnswer turns a stored answer into the call's result.
func readAnswer(n store.Node, b []byte) (api.LocalResponse, error) {
	var a relayAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return api.LocalResponse{}, fmt.Errorf("node %s: a relayed answer: %w", n.Name, err)
	}
	if a.Error != nil {
		return api.LocalResponse{}, errdefs.FromAPI(*a.Error)
	}
	return a.Response, nil
}

// heardRelay acts on a relay signal: a call for an agent connected here,
// or the answer to a call made here.
func (h *Hub) heardRelay(payload string) {
	verb, rest, _ := strings.Cut(payload, " ")
	switch verb {
	case "call":
		id, nodeID, _ := strings.Cut(rest, " ")
		sess := h.Get(nodeID)
		if sess == nil {
			return // not here: the server holding it answers
		}
		go h.answerRelay(id, nodeID)
	case "done":
		h.relayWait.done(rest)
	}
}

// answerRelay makes a relayed call on the agent connected here and stores
// the answer.
func (h *Hub) answerRelay(id, nodeID string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.CallTimeout)
	defer cancel()
	d, err := h.store.GetDocument(ctx, relayCallKind, id)
	if err != nil {
		return // the caller gave up
	}
	var req api.LocalRequest
	if err := json.Unmarshal(d.Body, &req); err != nil {
		return
	}
	n, err := h.store.GetNode(ctx, nodeID)
	var a relayAnswer
	if err == nil {
		a.Response, err = h.CallLocal(ctx, n, req, h.cfg.CallTimeout)
	}
	if err != nil {
		e := errdefs.ToAPI(err)
		a.Error = &e
	}
	body, _ := json.Marshal(a)
	if _, err := h.store.PutDocument(ctx, store.Document{Kind: relayAnswerKind, Name: id, Body: body}); err != nil {
		if !errors.Is(err, context.Canceled) {
			h.log.Warn("store a relayed answer", "call", id, "node", nodeID, "err", err)
		}
		return
	}
	h.signals.send(relayChannel, "done "+id)
}
