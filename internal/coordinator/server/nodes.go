package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func withPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func (s *Server) handleWhoami(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	u, err := s.store.GetUser(r.Context(), p.User)
	if err != nil {
		return err
	}
	out := u.Wire()
	if !p.TokenExpires.IsZero() {
		out.TokenExpiresAt = &p.TokenExpires
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleListNodes(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	var f store.NodeFilter
	if st := r.URL.Query().Get("status"); st != "" {
		var err error
		if f.Status, err = validate.OneOf("status", st, api.StatusOnline, api.StatusSuspect, api.StatusOffline); err != nil {
			return err
		}
	}
	pg, err := paging.Read(r.URL.Query(), "nodes", f.Status)
	if err != nil {
		return err
	}
	if !p.Admin {
		for g := range p.Groups {
			f.Groups = append(f.Groups, g)
		}
		if len(f.Groups) == 0 {
			httpapi.WriteJSON(w, http.StatusOK, api.NodeList{Nodes: []api.Node{}})
			return nil
		}
	}
	nodes, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Node, error) {
		f.Page = sp
		return s.store.ListNodes(r.Context(), f)
	}, store.Node.Cursor, nil)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	out := api.NodeList{Nodes: make([]api.Node, 0, len(nodes)), Next: next}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, s.hub.Node(n))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// resolveNode finds a node by ID, by name, or by a unique ID prefix, and
// checks the principal holds role on it.
func (s *Server) resolveNode(ctx context.Context, ref, role string) (store.Node, error) {
	p := principalFrom(ctx)
	// Do not tell outsiders a node exists, not even in an ambiguity.
	n, err := store.FindNode(ctx, s.store, ref, func(n store.Node) bool { return p.Can(api.RoleRead, n.Groups) })
	if err != nil {
		return store.Node{}, err
	}
	if err := p.Require(role, n.Groups, "node "+n.Name); err != nil {
		return store.Node{}, err
	}
	return n, nil
}

func (s *Server) handleGetNode(w http.ResponseWriter, r *http.Request) error {
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleRead)
	if err != nil {
		return err
	}
	out := s.hub.Node(n)
	s.hub.ShowNotices(r.Context(), &out)
	if ds, err := s.store.ListDeployments(r.Context(), store.DeploymentFilter{NodeID: n.ID, Page: store.Page{Limit: 1}}); err == nil && len(ds) > 0 {
		out.Deployment = ds[0].ID
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handlePatchNode(w http.ResponseWriter, r *http.Request) error {
	var patch api.NodePatch
	if err := decodeJSON(r, &patch); err != nil {
		return err
	}
	if err := hub.ValidatePatch(patch); err != nil {
		return err
	}
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleWrite)
	if err != nil {
		return err
	}
	if patch.SetGroups != nil {
		// Moving a node between groups changes who controls it.
		if err := principalFrom(r.Context()).RequireAdmin("change the groups of node " + n.Name); err != nil {
			return err
		}
	}
	if n, err = s.hub.Patch(r.Context(), n.ID, patch); err != nil {
		return err
	}
	s.dispatcher.NodeChanged(n.ID)
	httpapi.WriteJSON(w, http.StatusOK, s.hub.Node(n))
	return nil
}

func (s *Server) handleDeleteNode(w http.ResponseWriter, r *http.Request) error {
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleAdmin)
	if err != nil {
		return err
	}
	if s.hub.Get(n.ID) != nil {
		return errdefs.Conflict("node %s is connected; shut it down first (nodemgr node shutdown %s)", n.Name, n.ID)
	}
	// Its running tasks go back to the queue, or they would never end.
	if err := s.hub.Forget(r.Context(), n.ID, "node removed"); err != nil {
		return fmt.Errorf("delete node: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handleShutdownNode(w http.ResponseWriter, r *http.Request) error {
	var req api.ShutdownRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Mode != api.ShutdownGraceful && req.Mode != api.ShutdownForce {
		return errdefs.Field("mode", "must be graceful or force, got %q", req.Mode)
	}
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleAdmin)
	if err != nil {
		return err
	}
	if s.hub.Get(n.ID) == nil {
		// A queued shutdown would fire whenever the agent next starts.
		return errdefs.Conflict("node %s is not connected; nothing was sent (start its agent first, or remove it with nodemgr node rm)", n.Name)
	}
	body, _ := json.Marshal(req)
	if err := s.hub.Notify(r.Context(), n.ID, api.NotifyShutdown, body); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusAccepted, s.hub.Node(n))
	return nil
}
