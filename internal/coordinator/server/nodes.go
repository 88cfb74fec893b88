package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/validate"
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
	f := store.NodeFilter{Status: r.URL.Query().Get("status")}
	switch f.Status {
	case "", api.StatusOnline, api.StatusSuspect, api.StatusOffline:
	default:
		return errdefs.Field("status", "must be online, suspect or offline, got %q", f.Status)
	}
	pg, err := readPage(r.URL.Query(), "nodes", f.Status)
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
	nodes, next, err := fillPage(pg, func(sp store.Page) ([]store.Node, error) {
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
	n, err := s.findNode(ctx, ref, func(n store.Node) bool { return p.Can(api.RoleRead, n.Groups) })
	if err != nil {
		return store.Node{}, err
	}
	if err := p.Require(role, n.Groups, "node "+n.Name); err != nil {
		return store.Node{}, err
	}
	return n, nil
}

// findNode finds a node by ID, name or unique ID prefix among the nodes
// visible (nil: all).
func (s *Server) findNode(ctx context.Context, ref string, visible func(store.Node) bool) (store.Node, error) {
	if visible == nil {
		visible = func(store.Node) bool { return true }
	}
	n, err := s.store.GetNode(ctx, ref)
	if err == nil && visible(n) {
		return n, nil
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return store.Node{}, err
	}
	all, err := s.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return store.Node{}, err
	}
	var byName, byPrefix []store.Node
	for _, n := range all {
		if !visible(n) {
			continue
		}
		if n.Name == ref {
			byName = append(byName, n)
		}
		if strings.HasPrefix(n.ID, ref) {
			byPrefix = append(byPrefix, n)
		}
	}
	for _, matches := range [][]store.Node{byName, byPrefix} {
		switch len(matches) {
		case 0:
			continue
		case 1:
			return matches[0], nil
		default:
			ids := make([]string, len(matches))
			for i, m := range matches {
				ids[i] = m.ID
			}
			return store.Node{}, errdefs.Conflict("node %q is ambiguous: it matches %s; use the node ID", ref, strings.Join(ids, ", "))
		}
	}
	return store.Node{}, errdefs.NotFound("node %q (see nodemgr node ls)", ref)
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

func validatePatch(p api.NodePatch) error {
	if p.SetTags != nil {
		if err := validate.Tags("set_tags", *p.SetTags); err != nil {
			return err
		}
	}
	if err := validate.Tags("add_tags", p.AddTags); err != nil {
		return err
	}
	if err := validate.Tags("remove_tags", p.RemoveTags); err != nil {
		return err
	}
	if err := validate.Labels("set_labels", p.SetLabels); err != nil {
		return err
	}
	if err := validate.LabelKeys("remove_labels", p.RemoveLabels); err != nil {
		return err
	}
	if p.SetGroups != nil {
		if err := validate.Groups("set_groups", *p.SetGroups); err != nil {
			return err
		}
	}
	return nil
}

// applyPatch edits n in place.
func applyPatch(n *store.Node, p api.NodePatch) {
	if p.SetTags != nil {
		n.Tags = slices.Clone(*p.SetTags)
	}
	for _, t := range p.AddTags {
		if !slices.Contains(n.Tags, t) {
			n.Tags = append(n.Tags, t)
		}
	}
	n.Tags = slices.DeleteFunc(n.Tags, func(t string) bool { return slices.Contains(p.RemoveTags, t) })
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range p.SetLabels {
		n.Labels[k] = v
	}
	for _, k := range p.RemoveLabels {
		delete(n.Labels, k)
	}
	if p.SetGroups != nil {
		n.Groups = slices.Clone(*p.SetGroups)
		sort.Strings(n.Groups)
	}
}

func (s *Server) handlePatchNode(w http.ResponseWriter, r *http.Request) error {
	var patch api.NodePatch
	if err := decodeJSON(r, &patch); err != nil {
		return err
	}
	if err := validatePatch(patch); err != nil {
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
	n, err = s.store.UpdateNode(r.Context(), n.ID, func(n *store.Node) error {
		applyPatch(n, patch)
		return nil
	})
	if err != nil {
		return fmt.Errorf("update node: %w", err)
	}
	body, _ := json.Marshal(api.NodeUpdate{Tags: n.Tags, Labels: n.Labels, Groups: n.Groups})
	if err := s.hub.Notify(r.Context(), n.ID, api.NotifyUpdate, body); err != nil {
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
