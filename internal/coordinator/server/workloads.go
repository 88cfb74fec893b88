package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// A node's artifacts, services, resource books and allocations live on the node: the agent owns them and
// serves them on its local API. The server does not copy that state; it
// checks the caller's role on the node and carries the request to the
// agent over its session, so the answer is always the agent's own.

// Forwarded requests wait this long for the agent; installs download and
// drains wait for services, so they get longer.
const (
	forwardTimeout     = time.Minute
	forwardLongTimeout = 15 * time.Minute
)

func (s *Server) workloadRoutes() []route {
	quick, long := s.forward(forwardTimeout), s.forward(forwardLongTimeout)
	return []route{
		{"GET", "/v1/nodes/{node}/artifacts", authUser, quick},
		{"POST", "/v1/nodes/{node}/artifacts", authUser, long},
		{"GET", "/v1/nodes/{node}/artifacts/{id}", authUser, quick},
		{"DELETE", "/v1/nodes/{node}/artifacts/{id}", authUser, quick},
		{"GET", "/v1/nodes/{node}/services", authUser, quick},
		{"POST", "/v1/nodes/{node}/services", authUser, long},
		{"GET", "/v1/nodes/{node}/services/{coordinate}", authUser, quick},
		{"DELETE", "/v1/nodes/{node}/services/{coordinate}", authUser, quick},
		{"POST", "/v1/nodes/{node}/services/{coordinate}/{action}", authUser, long},
		{"GET", "/v1/nodes/{node}/services/{coordinate}/logs", authUser, quick},
		{"GET", "/v1/nodes/{node}/resources", authUser, s.handleNodeResources},
		{"POST", "/v1/nodes/{node}/onboard", authUser, quick},
		{"POST", "/v1/nodes/{node}/offboard", authUser, quick},
		{"POST", "/v1/nodes/{node}/commitments", authUser, quick},
		{"DELETE", "/v1/nodes/{node}/commitments/{id}", authUser, quick},
		{"GET", "/v1/nodes/{node}/allocations", authUser, quick},
		{"GET", "/v1/nodes/{node}/allocations/{id}", authUser, quick},
		{"POST", "/v1/nodes/{node}/allocations/{id}/{action}", authUser, long},
		{"GET", "/v1/nodes/{node}/allocations/{id}/logs", authUser, quick},
		{"GET", "/v1/nodes/{node}/overlay", authUser, quick},
	}
}

// forward returns a handler that passes the request to the node's agent:
// reads need the read role on the node, changes the write role.
func (s *Server) forward(timeout time.Duration) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		role := api.RoleWrite
		if r.Method == http.MethodGet {
			role = api.RoleRead
		}
		n, err := s.resolveNode(r.Context(), r.PathValue("node"), role)
		if err != nil {
			return err
		}
		req, err := localRequest(r)
		if err != nil {
			return err
		}
		if err := requireServiceUser(principalFrom(r.Context()), n, req); err != nil {
			return err
		}
		return s.relay(w, r, n, req, timeout)
	}
}

// requireServiceUser lets a service start with the agent's own rights
// (user root or agent, which can read the node's credential) only when an
// admin of one of the node's groups asks, as with a suite's run_as; a
// writer may name an unprivileged user or none.
func requireServiceUser(p auth.Principal, n store.Node, req api.LocalRequest) error {
	if req.Method != http.MethodPost || req.Path != "/v1/services" {
		return nil
	}
	var spec struct {
		User string `json:"user"`
	}
	if json.Unmarshal(req.Body, &spec) != nil || !workload.Privileged(spec.User) || p.Can(api.RoleAdmin, n.Groups) {
		return nil // a body the agent refuses is the agent's to explain
	}
	return fmt.Errorf("user: %q runs the service with the agent's own rights, so only an admin of node %s's groups may start it: "+
		"leave user out to run it as an unprivileged user, or name one: %w", spec.User, n.Name, errdefs.ErrPermission)
}

// relay carries req to node n's local API and writes its answer as it is.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, n store.Node, req api.LocalRequest, timeout time.Duration) error {
	resp, err := s.hub.CallLocal(r.Context(), n, req, timeout)
	if err != nil {
		return err
	}
	if resp.ContentType != "" {
		w.Header().Set("Content-Type", resp.ContentType)
	}
	for k, v := range resp.Headers {
		if strings.HasPrefix(k, api.HeaderPrefix) {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
	return nil
}

// localRequest turns /v1/nodes/{node}/<rest> into the agent's /v1/<rest>.
func localRequest(r *http.Request) (api.LocalRequest, error) {
	rest := strings.TrimPrefix(r.URL.Path, "/v1/nodes/")
	_, tail, _ := strings.Cut(rest, "/")
	// Logs too large for one session frame are cut to their end by the
	// agent (serveForwarded), whatever tail asks.
	req := api.LocalRequest{Method: r.Method, Path: "/v1/" + tail, Query: r.URL.RawQuery}
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		body, err := httpapi.ReadBody(r, maxBody)
		if err != nil {
			return api.LocalRequest{}, err
		}
		if len(body) > 0 {
			if !json.Valid(body) {
				return api.LocalRequest{}, errdefs.Field("body", "malformed JSON")
			}
			req.Body = body
		}
	}
	return req, nil
}

// presence records what an agent publishes about itself; it lives as long
// as the session, like nodee's ephemeral ZooKeeper node.
func (h *agentHandler) presence(body []byte) (any, error) {
	var p api.Presence
	if err := httpapi.DecodeStrict(body, &p); err != nil {
		return nil, err
	}
	if len(p.Services) > 10_000 || len(p.Artifacts) > 10_000 {
		return nil, errdefs.Field("services", "too many entries in a presence record")
	}
	h.sess.SetPresence(&p)
	return struct{}{}, nil
}

func (h *agentHandler) resourcesReport(ctx context.Context, body []byte) (any, error) {
	var nr api.NodeResources
	if err := httpapi.DecodeStrict(body, &nr); err != nil {
		return nil, err
	}
	if err := h.s.hub.KeepBooks(ctx, h.sess.NodeID, nr); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// handleNodeResources answers the agent's books live, or, while the agent
// is not connected, the server's copy with its age in as_of.
func (s *Server) handleNodeResources(w http.ResponseWriter, r *http.Request) error {
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleRead)
	if err != nil {
		return err
	}
	if s.hub.Get(n.ID) == nil {
		if nr, ok := s.hub.Books(r.Context(), n.ID); ok {
			httpapi.WriteJSON(w, http.StatusOK, nr)
			return nil
		}
	}
	req, err := localRequest(r)
	if err != nil {
		return err
	}
	resp, err := s.hub.CallLocal(r.Context(), n, req, forwardTimeout)
	if err != nil {
		return err
	}
	if resp.Status == http.StatusOK {
		var nr api.NodeResources
		if json.Unmarshal(resp.Body, &nr) == nil {
			if err := s.hub.KeepBooks(r.Context(), n.ID, nr); err != nil {
				s.log.Warn("keep a node's books", "node", n.ID, "err", err)
			}
		}
	}
	if resp.ContentType != "" {
		w.Header().Set("Content-Type", resp.ContentType)
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
	return nil
}
