package hub

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Activity is what the server knows of a node's agent now: the
// orchestrator decides from it whether an idle machine may go (its
// NodeState has the same fields).
type Activity struct {
	Connected bool
	Busy      bool      // a suite, a service or a container
	LastWork  time.Time // when it last had a suite, even one shorter than a round
	// Notices are what its machine's provider announced (a spot
	// interruption, a rebalance recommendation), as its agent heard them.
	Notices []api.Notice
}

// Activity says whether a node is connected (here or to another replica),
// whether it has work (a suite, a service or a container in its books, or
// a live container report), and when it last had a suite.
func (h *Hub) Activity(ctx context.Context, nodeID string) (Activity, error) {
	var a Activity
	n, err := h.store.GetNode(ctx, nodeID)
	if err != nil {
		return a, err
	}
	if a.Notices, err = h.NodeNotices(ctx, nodeID); err != nil {
		return a, err
	}
	if sess := h.Get(nodeID); sess != nil {
		a.Connected = true
		a.LastWork = sess.LastWork()
		if state, cur := sess.Work(); cur != "" && state != api.AgentIdle {
			a.Busy = true
			return a, nil
		}
	} else if h.ConnectedElsewhere(n) {
		// Its heartbeats, written by the server holding its session, say
		// what it does (a flush late).
		a.Connected = true
		if n.CurrentSuite != "" && n.AgentState != api.AgentIdle {
			h.remoteWork.Store(nodeID, n.LastHeartbeat)
			a.Busy = true
			return a, nil
		}
		if t, ok := h.remoteWork.Load(nodeID); ok {
			a.LastWork = t.(time.Time)
		}
	} else {
		return a, nil
	}
	if cs, err := h.store.ListContainers(ctx, store.ContainerFilter{NodeID: nodeID, Live: true, Page: store.Page{Limit: 1}}); err == nil && len(cs) > 0 {
		a.Busy = true
		return a, nil
	}
	if nr, ok := h.Books(ctx, nodeID); ok {
		for _, al := range nr.Allocations {
			if al.Kind != api.AllocationPool {
				a.Busy = true
			}
		}
	}
	return a, nil
}
