package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Notices: what a node's machine heard from its provider (a spot
// interruption, a rebalance recommendation), as its agent tells it. They
// are kept in the store as a document per node, so that every replica,
// the orchestrator and `node show` see them. A node with an interruption
// drains: it gets no suite and no task (its agent says Draining), and its
// pool machine is replaced.

// noticesKind is the kind of the documents holding nodes' notices.
const noticesKind = "node-notices"

// maxNotices bounds a notices body: EC2 has two kinds.
const maxNotices = 8

// ValidateNotices checks the notices an agent tells.
func ValidateNotices(ns []api.Notice) error {
	if len(ns) > maxNotices {
		return errdefs.Field("notices", "at most %d, got %d", maxNotices, len(ns))
	}
	for i, n := range ns {
		field := fmt.Sprintf("notices[%d]", i)
		switch {
		case n.Kind != api.NoticeInterruption && n.Kind != api.NoticeRebalance:
			return errdefs.Field(field+".kind", "must be %s or %s, got %q", api.NoticeInterruption, api.NoticeRebalance, n.Kind)
		case n.Kind == api.NoticeInterruption && n.Action != "terminate" && n.Action != "stop" && n.Action != "hibernate":
			return errdefs.Field(field+".action", "must be terminate, stop or hibernate, got %q", n.Action)
		case n.Kind == api.NoticeRebalance && n.Action != "":
			return errdefs.Field(field+".action", "a rebalance recommendation has none")
		case n.Time.IsZero():
			return errdefs.Field(field+".time", "required")
		}
	}
	return nil
}

// interruption is the interruption among ns, if there is one.
func interruption(ns []api.Notice) *api.Notice {
	for _, n := range ns {
		if n.Kind == api.NoticeInterruption {
			return &n
		}
	}
	return nil
}

// KeepNotices stores a node's notices (none: forgets them) when they
// changed, and acts on a new one: an interrupted node drains at once,
// before its next heartbeat says so, and the orchestrator looks.
func (h *Hub) KeepNotices(ctx context.Context, sess *Session, ns []api.Notice) error {
	if n := interruption(ns); n != nil {
		_, suite := sess.Work()
		sess.doing.Store(&work{api.AgentDraining, suite})
	}
	old, err := h.NodeNotices(ctx, sess.NodeID)
	if err != nil {
		return err
	}
	if slices.EqualFunc(old, ns, api.Notice.Equal) {
		return nil
	}
	if len(ns) == 0 {
		return h.ForgetNotices(ctx, sess.NodeID)
	}
	b, _ := json.Marshal(ns)
	if _, err := h.store.PutDocument(ctx, store.Document{Kind: noticesKind, Name: sess.NodeID, Body: b}); err != nil {
		return fmt.Errorf("keep node %s's notices: %w", sess.NodeID, err)
	}
	for _, n := range ns {
		h.log.Warn("the provider gave notice about a node's machine", "node", sess.NodeID, "notice", n.Message())
	}
	h.WakeOrchestrator()
	return nil
}

// ForgetNotices forgets a node's notices.
func (h *Hub) ForgetNotices(ctx context.Context, nodeID string) error {
	if err := h.store.DeleteDocument(ctx, noticesKind, nodeID); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("forget node %s's notices: %w", nodeID, err)
	}
	return nil
}

// NodeNotices reads a node's notices; none when it has none.
func (h *Hub) NodeNotices(ctx context.Context, nodeID string) ([]api.Notice, error) {
	doc, err := h.store.GetDocument(ctx, noticesKind, nodeID)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read node %s's notices: %w", nodeID, err)
	}
	var ns []api.Notice
	if err := json.Unmarshal(doc.Body, &ns); err != nil {
		return nil, fmt.Errorf("read node %s's notices: %w", nodeID, err)
	}
	return ns, nil
}

// ShowNotices adds a node's notices to its wire form: an online node
// with an interruption says so as its status reason.
func (h *Hub) ShowNotices(ctx context.Context, out *api.Node) {
	ns, err := h.NodeNotices(ctx, out.ID)
	if err != nil || len(ns) == 0 {
		return
	}
	out.Notices = ns
	if n := interruption(ns); n != nil && out.Status == api.StatusOnline && out.StatusReason == "" {
		out.StatusReason = n.Message()
		if time.Now().After(n.Time) {
			out.StatusReason += " (past)"
		}
	}
}
