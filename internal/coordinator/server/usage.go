package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

func (s *Server) handleNodeUsage(w http.ResponseWriter, r *http.Request) error {
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleRead)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, api.UsageHistory{Node: n.ID, Samples: s.hub.Usage.History(n.ID, time.Now())})
	return nil
}

// handleSummary counts nodes, suites and tasks for the dashboard's overview:
// counts the store keeps, so it stays cheap with many rows. The counts are
// not filtered by group, hence admins only.
func (s *Server) handleSummary(w http.ResponseWriter, r *http.Request) error {
	nodes, err := s.store.CountNodes(r.Context())
	if err != nil {
		return fmt.Errorf("count nodes: %w", err)
	}
	suites, tasks, err := s.store.CountSuites(r.Context())
	if err != nil {
		return fmt.Errorf("count suites: %w", err)
	}
	httpapi.WriteJSON(w, http.StatusOK, api.Summary{Nodes: nodes, Suites: suites, Tasks: tasks})
	return nil
}
