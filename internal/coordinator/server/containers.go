package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/coordinator/oncommand"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Containers on command (seed 003): the server takes the seed's message
// {command: deploy|delete|move|replicate, job, worker}, has the agents
// involved deploy and delete (over their sessions, through the same local
// API handlers `nodemgr container --agent-socket` uses), and keeps what the
// agents report back in the store, so `container ls` spans every node.

func (s *Server) containerRoutes() []route {
	return []route{
		{"GET", "/v1/containers", authUser, s.handleListContainers},
		{"POST", "/v1/containers", authUser, s.handleContainerCommand},
		{"GET", "/v1/containers/{id}", authUser, s.handleGetContainer},
		{"DELETE", "/v1/containers/{id}", authUser, s.handleDeleteContainer},
		{"GET", "/v1/containers/{id}/logs", authUser, s.handleContainerLogs},
	}
}

// containersReport stores what an agent says about its containers.
func (h *agentHandler) containersReport(ctx context.Context, body []byte) (any, error) {
	var rep api.ContainerReport
	if err := httpapi.DecodeStrict(body, &rep); err != nil {
		return nil, err
	}
	if err := h.s.store.PutContainers(ctx, h.sess.NodeID, rep.Containers); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

func (s *Server) handleContainerCommand(w http.ResponseWriter, r *http.Request) error {
	var cmd api.ContainerCommand
	if err := decodeJSON(r, &cmd); err != nil {
		return err
	}
	out, err := s.containers.Run(r.Context(), cmd)
	if out == nil {
		out = []api.Container{}
	}
	return answer(w, http.StatusOK, api.ContainerList{Containers: out}, err)
}

func (s *Server) handleListContainers(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.ContainerFilter{Live: q.Get("all") != "true"}
	if ref := q.Get("node"); ref != "" {
		n, err := s.resolveNode(r.Context(), ref, api.RoleRead)
		if err != nil {
			return err
		}
		f.NodeID = n.ID
	}
	pg, err := paging.Read(q, "containers", f.NodeID, strconv.FormatBool(f.Live))
	if err != nil {
		return err
	}
	// Node IDs the caller may read, with their names; absent: not yet asked.
	readable := map[string]*store.Node{}
	mayRead := func(c api.Container) bool {
		n, seen := readable[c.Node]
		if !seen {
			if got, err := s.resolveNode(r.Context(), c.Node, api.RoleRead); err == nil {
				n = &got
			}
			readable[c.Node] = n
		}
		return n != nil
	}
	cs, next, err := paging.Fill(pg, func(sp store.Page) ([]api.Container, error) {
		f.Page = sp
		return s.store.ListContainers(r.Context(), f)
	}, store.ContainerCursor, mayRead)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for i := range cs {
		if n := readable[cs[i].Node]; n != nil {
			cs[i].NodeName = n.Name
			cs[i] = oncommand.AsSeen(cs[i], *n)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, api.ContainerList{Containers: cs, Next: next})
	return nil
}

func (s *Server) handleGetContainer(w http.ResponseWriter, r *http.Request) error {
	c, n, err := s.containers.FindLive(r.Context(), r.PathValue("id"), api.RoleRead)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, oncommand.AsSeen(c, n))
	return nil
}

func (s *Server) handleDeleteContainer(w http.ResponseWriter, r *http.Request) error {
	out, err := s.containers.Delete(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out[0])
	return nil
}

func (s *Server) handleContainerLogs(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	_, n, err := s.containers.FindLive(r.Context(), id, api.RoleRead)
	if err != nil {
		return err
	}
	tail := 200
	if v := r.URL.Query().Get("tail"); v != "" {
		if tail, err = strconv.Atoi(v); err != nil || tail < 0 {
			return errdefs.Field("tail", "must be a number of lines >= 0, got %q", v)
		}
	}
	q := url.Values{"tail": {strconv.Itoa(tail)}}
	if after := r.URL.Query().Get("after"); after != "" {
		q.Set("after", after)
	}
	req := api.LocalRequest{Method: http.MethodGet, Path: "/v1/containers/" + url.PathEscape(id) + "/logs", Query: q.Encode()}
	return s.relay(w, r, n, req, forwardTimeout)
}
