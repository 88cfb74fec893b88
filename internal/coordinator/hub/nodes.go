package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Node is n's wire form, with what only the live connection knows: whether
// the agent is connected (here or to another server), what it publishes,
// and a heartbeat not yet written to the store.
func (h *Hub) Node(n store.Node) api.Node {
	out := api.Node{
		ID: n.ID, Name: n.Name, MachineID: n.MachineID, DataDir: n.DataDir,
		Tags: n.Tags, Labels: n.Labels, Groups: n.Groups, Hardware: n.Hardware,
		Status: n.Status, StatusReason: n.StatusReason, AgentState: n.AgentState,
		AgentVersion: n.AgentVersion, CurrentSuite: n.CurrentSuite, RegisteredAt: n.RegisteredAt, UpdatedAt: n.UpdatedAt,
	}
	if sess := h.Get(n.ID); sess != nil {
		out.Connected = true
		out.Presence = sess.Presence()
		if hb := sess.Heartbeat(); hb.After(n.LastHeartbeat) {
			n.LastHeartbeat = hb // not yet flushed to the store
			out.AgentState, out.CurrentSuite = sess.Work()
		}
	} else if h.ConnectedElsewhere(n) {
		out.Connected = true // to another server on the store
	}
	if !n.LastHeartbeat.IsZero() {
		t := n.LastHeartbeat
		out.LastHeartbeat = &t
	}
	return out
}

// CallLocal sends req to node n's agent's local API: over its session, or
// relayed through the server that holds it.
func (h *Hub) CallLocal(ctx context.Context, n store.Node, req api.LocalRequest, timeout time.Duration) (api.LocalResponse, error) {
	sess := h.Get(n.ID)
	if sess == nil && h.Relayed() && n.Status != api.StatusOffline {
		return h.RelayCall(ctx, n, req, timeout) // its agent may be connected to another server
	}
	if sess == nil {
		return api.LocalResponse{}, fmt.Errorf("node %s is not connected (%s); start its agent, or wait for it to reconnect: %w", n.Name, n.Status, errdefs.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var resp api.LocalResponse
	if err := sess.Peer.Call(ctx, api.MethodLocalAPI, req, &resp); err != nil {
		return resp, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return resp, nil
}

// The server keeps a copy of each node's books (the agent reports them
// when they change, and every live answer refreshes it), so that `node
// resources` still answers, with the books' age, while the agent is away.
const booksKind = "node-resources"

// KeepBooks stores a node's books as the server's copy.
func (h *Hub) KeepBooks(ctx context.Context, nodeID string, nr api.NodeResources) error {
	nr.AsOf = nil
	b, err := json.Marshal(nr)
	if err != nil {
		return err
	}
	if _, err := h.store.PutDocument(ctx, store.Document{Kind: booksKind, Name: nodeID, Body: b}); err != nil {
		return fmt.Errorf("keep the books of node %s: %w", nodeID, err)
	}
	return nil
}

// Books returns the server's copy of a node's books, AsOf when they were
// kept; ok is false when there is none.
func (h *Hub) Books(ctx context.Context, nodeID string) (nr api.NodeResources, ok bool) {
	d, err := h.store.GetDocument(ctx, booksKind, nodeID)
	if err != nil || json.Unmarshal(d.Body, &nr) != nil {
		return api.NodeResources{}, false
	}
	asOf := d.UpdatedAt
	nr.AsOf = &asOf
	return nr, true
}

// Forget removes a node whose machine is gone or that an admin deleted:
// its session is closed, its running tasks go back to their queues, and
// what the server kept of it (books, notices, usage) goes with it.
func (h *Hub) Forget(ctx context.Context, nodeID, reason string) error {
	if sess := h.Get(nodeID); sess != nil {
		sess.Conn.Close(proto.CloseGoingAway, reason)
	}
	h.hooks.Reclaim(ctx, nodeID, reason)
	if err := h.store.DeleteNode(ctx, nodeID); err != nil {
		return fmt.Errorf("forget node %s: %w", nodeID, err)
	}
	h.Usage.Forget(nodeID)
	if err := h.store.DeleteDocument(ctx, booksKind, nodeID); err != nil && !errdefs.IsNotFound(err) {
		h.log.Warn("forget a removed node's books", "node", nodeID, "err", err)
	}
	if err := h.ForgetNotices(ctx, nodeID); err != nil {
		h.log.Warn("forget a removed node's notices", "node", nodeID, "err", err)
	}
	h.log.Info("node removed", "node", nodeID, "reason", reason)
	return nil
}
