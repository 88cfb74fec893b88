package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble/deploy"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Ensembles (seed 004) are deployed, waited for, restored and shut down
// by deploy.Runner; the server decodes, authorizes and answers, and
// reaches the nodes' agents for it (ensembleAgents).

func (s *Server) ensembleRoutes() []route {
	return []route{
		{"GET", "/v1/ensembles", authUser, s.handleListEnsembles},
		{"POST", "/v1/ensembles", authUser, s.handleDeployEnsemble},
		{"GET", "/v1/ensembles/{ensemble}", authUser, s.handleGetEnsemble},
		{"POST", "/v1/ensembles/{ensemble}/shutdown", authUser, s.handleShutdownEnsemble},
	}
}

// newEnsembles makes the server's ensemble runner, over its bounded store.
func (s *Server) newEnsembles() *deploy.Runner {
	pools := func() deploy.Pools {
		if s.orch == nil { // not serving yet: nothing waits for machines
			return nil
		}
		return s.orch
	}
	return deploy.New(s.store, ensembleAgents{s}, pools, deploy.Config{
		RestoreDeadline: s.cfg.EnsembleRestoreDeadline, ProvisionDeadline: s.cfg.EnsembleProvisionDeadline}, s.log)
}

func (s *Server) handleDeployEnsemble(w http.ResponseWriter, r *http.Request) error {
	var spec api.EnsembleSpec
	if err := decodeJSON(r, &spec); err != nil {
		return err
	}
	q := r.URL.Query()
	if p := q.Get("policy"); p != "" {
		spec.Policy = p
	}
	dry, _ := strconv.ParseBool(q.Get("dry_run"))
	e, err := s.ensembles.Deploy(r.Context(), principalFrom(r.Context()), spec, dry)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	switch {
	case dry:
		status = http.StatusOK
	case e.State == api.EnsembleWaiting:
		status = http.StatusAccepted
	}
	httpapi.WriteJSON(w, status, e)
	return nil
}

func (s *Server) handleListEnsembles(w http.ResponseWriter, r *http.Request) error {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	list, err := s.ensembles.List(r.Context(), principalFrom(r.Context()), all)
	return answer(w, http.StatusOK, api.EnsembleList{Ensembles: list}, err)
}

func (s *Server) handleGetEnsemble(w http.ResponseWriter, r *http.Request) error {
	e, err := s.ensembles.Resolve(r.Context(), principalFrom(r.Context()), r.PathValue("ensemble"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, s.ensembles.Status(r.Context(), e))
	return nil
}

// handleShutdownEnsemble removes every replica's workload, which frees
// its books, and records the ensemble shut down.
func (s *Server) handleShutdownEnsemble(w http.ResponseWriter, r *http.Request) error {
	e, err := s.ensembles.Resolve(r.Context(), principalFrom(r.Context()), r.PathValue("ensemble"))
	if err != nil {
		return err
	}
	// The shutdown outlives a client that hangs up.
	if e, err = s.ensembles.Shutdown(context.WithoutCancel(r.Context()), e); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e)
	return nil
}

// ensembleAgents is deploy.Agents over the server's sessions and relay.
type ensembleAgents struct{ s *Server }

func (a ensembleAgents) Connected(n store.Node) bool { return a.s.hub.Connected(n) }

func (a ensembleAgents) Call(ctx context.Context, n store.Node, method, path string, in, out any) error {
	return a.s.containers.CallAgent(ctx, n, method, path, in, out)
}

func (a ensembleAgents) RunContainer(ctx context.Context, n store.Node, job api.ContainerJob) (api.Container, error) {
	return a.s.containers.DeployOn(ctx, n, job)
}

func (a ensembleAgents) DeleteContainer(ctx context.Context, n store.Node, id string) (api.Container, error) {
	return a.s.containers.DeleteOn(ctx, n, id)
}

// Host is the address the agent connects from, else the node's name.
func (a ensembleAgents) Host(nodeID, name string) string {
	if sess := a.s.hub.Get(nodeID); sess != nil && sess.Addr != "" {
		return sess.Addr
	}
	return name
}

func (a ensembleAgents) Meshed(nodeIDs []string) bool { return a.s.overlay.Meshed(nodeIDs) }

func (a ensembleAgents) Presence(nodeID string) *api.Presence {
	if sess := a.s.hub.Get(nodeID); sess != nil {
		return sess.Presence()
	}
	return nil
}
