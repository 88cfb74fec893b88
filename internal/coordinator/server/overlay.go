package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// overlayAgents are this server's sessions as the overlay reaches them.
type overlayAgents struct{ hub *hub.Hub }

func (a overlayAgents) Local() []string {
	all := a.hub.All()
	ids := make([]string, 0, len(all))
	for _, sess := range all {
		ids = append(ids, sess.NodeID)
	}
	return ids
}

func (a overlayAgents) Send(ctx context.Context, nodeID string, st api.OverlayState) error {
	sess := a.hub.Get(nodeID)
	if sess == nil {
		return errdefs.Class(fmt.Errorf("node %s is not connected here", nodeID), errdefs.ErrUnavailable)
	}
	return sess.Call(ctx, api.MethodOverlayState, st, nil)
}

// overlayJoin answers overlay.join: the node's place on the overlay.
func (h *agentHandler) overlayJoin(ctx context.Context, body json.RawMessage) (any, error) {
	var j api.OverlayJoin
	if err := httpapi.DecodeStrict(body, &j); err != nil {
		return nil, err
	}
	return h.s.overlay.Join(ctx, h.sess.NodeID, h.sess.Addr, j)
}

// handleListNetwork lists the nodes on the overlay that the caller may read.
func (s *Server) handleListNetwork(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	out, err := s.overlay.List(r.Context(), func(n store.Node) bool { return p.Can(api.RoleRead, n.Groups) })
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}
