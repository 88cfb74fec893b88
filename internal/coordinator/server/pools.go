package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/paging"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Pools: the HTTP edge of the orchestrator, and the Cluster the
// orchestrator sees the server through.

// cluster is the server as the orchestrator sees it.
type cluster struct{ s *Server }

var _ orchestrate.Cluster = cluster{}

func (c cluster) Provider(name string) (provision.Provider, error) { return c.s.catalog.Provider(name) }

func (c cluster) Executor(d provision.Deployment) (execute.Executor, error) {
	return c.s.catalog.Executor(d)
}

func (c cluster) Render(ctx context.Context, template, provider string) (map[string]any, error) {
	r, err := c.s.catalog.Render(ctx, template, provider)
	return r.Extra, err
}

// Demands lists the suites with Ready tasks that want nodes, and the
// ensembles that wait for machines.
func (c cluster) Demands(ctx context.Context) ([]orchestrate.Demand, error) {
	suites, err := c.s.dispatcher.Demands(ctx)
	if err != nil {
		return nil, err
	}
	ens, err := c.s.ensembles.Demands(ctx)
	if err != nil {
		return nil, err
	}
	return append(suites, ens...), nil
}

// NodeState is the hub's Activity of the node.
func (c cluster) NodeState(ctx context.Context, nodeID string) (orchestrate.NodeState, error) {
	a, err := c.s.hub.Activity(ctx, nodeID)
	return orchestrate.NodeState(a), err
}

func (c cluster) DrainNode(ctx context.Context, nodeID string) error {
	body, _ := json.Marshal(api.ShutdownRequest{Mode: api.ShutdownGraceful})
	return c.s.hub.Notify(ctx, nodeID, api.NotifyShutdown, body)
}

func (c cluster) ForgetNode(ctx context.Context, nodeID, reason string) error {
	return c.s.hub.Forget(ctx, nodeID, reason)
}

func (c cluster) JoinToken(ctx context.Context, deploymentID string, groups []string, ttl time.Duration) (string, error) {
	t, err := c.s.accounts.Issue(ctx, store.Token{Kind: api.TokenJoin, Name: "bootstrap of " + deploymentID,
		DeploymentID: deploymentID, Groups: groups, MaxUses: 1}, ttl)
	return t.Secret, err
}

// agentServerURL is the URL pool machines' agents reach the server on.
func (s *Server) agentServerURL() string {
	if s.cfg.AgentServerURL != "" {
		return s.cfg.AgentServerURL
	}
	select {
	case <-s.ready:
		return s.URL()
	default:
		return "" // not listening yet (a handler served without Serve)
	}
}

// newOrchestrator makes the orchestrator; Serve tells it the server's URL
// and runs it.
func (s *Server) newOrchestrator() error {
	cfg := s.cfg.Orchestrator
	cfg.Bootstrap.ServerURL = s.cfg.AgentServerURL
	cfg.Bootstrap.InsecureHTTP = s.cfg.AgentInsecureHTTP
	cfg.Bootstrap.Binaries = s.cfg.AgentBinaries
	cfg.Bootstrap.BinaryDir = s.cfg.AgentBinaryDir
	if cfg.Bootstrap.BinaryDir != "" {
		// Fail at start, not at the first bootstrap, for a wrong path.
		if _, err := orchestrate.ReadBinaryDir(cfg.Bootstrap.BinaryDir); err != nil {
			return err
		}
	}
	// This very binary, for machines of its arch that the binaries given
	// do not serve, if it is a static one (CheckBinary says why not at
	// bootstrap otherwise).
	if self, err := os.Executable(); err == nil {
		cfg.Bootstrap.Self = self
	}
	cfg.Bootstrap.StageDir = s.cfg.DataDir
	if s.tls != nil && s.tls.CAFile != "" {
		cfg.Bootstrap.ServerCA = s.tls.CAFile
	}
	s.orch = orchestrate.New(cfg, s.store, cluster{s}, s.log.With("component", "orchestrator"))
	return nil
}

func (s *Server) handlePutPool(w http.ResponseWriter, r *http.Request) error {
	var spec api.PoolSpec
	if err := decodeJSON(r, &spec); err != nil {
		return err
	}
	if name := r.PathValue("pool"); spec.Name == "" {
		spec.Name = name
	} else if spec.Name != name {
		return errdefs.Field("name", "%q differs from the pool in the path, %q", spec.Name, name)
	}
	spec, doc, err := s.orch.Apply(r.Context(), spec, principalFrom(r.Context()).User)
	if err != nil {
		return err
	}
	s.hub.WakeOrchestrator()
	status := http.StatusOK
	if doc.Version == 1 {
		status = http.StatusCreated
	}
	httpapi.WriteJSON(w, status, s.apiPool(r.Context(), spec, doc, s.orch.Status(r.Context(), spec.Name)))
	return nil
}

// handlePatchPool changes only the fields of a pool's spec that the body
// has (min, max, paused, priority): scale, pause and resume without the
// pool's file.
func (s *Server) handlePatchPool(w http.ResponseWriter, r *http.Request) error {
	var p api.PoolPatch
	if err := decodeJSON(r, &p); err != nil {
		return err
	}
	spec, doc, err := s.orch.Patch(r.Context(), r.PathValue("pool"), p, principalFrom(r.Context()).User)
	if err != nil {
		return err
	}
	s.hub.WakeOrchestrator()
	httpapi.WriteJSON(w, http.StatusOK, s.apiPool(r.Context(), spec, doc, s.orch.Status(r.Context(), spec.Name)))
	return nil
}

func (s *Server) handleListPools(w http.ResponseWriter, r *http.Request) error {
	pg, err := paging.Read(r.URL.Query(), "pools")
	if err != nil {
		return err
	}
	docs, next, err := paging.Fill(pg, func(sp store.Page) ([]store.Document, error) {
		return s.store.ListDocuments(r.Context(), store.KindPool, sp)
	}, store.Document.Cursor, nil)
	if err != nil {
		return err
	}
	out := api.PoolList{Pools: []api.Pool{}, Next: next}
	statuses := s.orch.Statuses(r.Context()) // once for the page: another server reads the leader's from the store
	for _, d := range docs {
		spec, err := orchestrate.DecodeSpec(d.Body)
		if err != nil {
			return err
		}
		out.Pools = append(out.Pools, s.apiPool(r.Context(), spec, d, statuses[spec.Name]))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleGetPool(w http.ResponseWriter, r *http.Request) error {
	spec, doc, err := s.orch.Pool(r.Context(), r.PathValue("pool"))
	if err != nil {
		return err
	}
	out := api.PoolDetail{Pool: s.apiPool(r.Context(), spec, doc, s.orch.Status(r.Context(), spec.Name)), MachineList: []api.PoolMachine{}}
	ms, err := s.store.ListPoolMachines(r.Context(), store.PoolMachineFilter{Pool: spec.Name})
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Live() || time.Since(m.UpdatedAt) < time.Hour {
			out.MachineList = append(out.MachineList, apiMachine(m))
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// handleDeletePool removes a pool: its machines are drained and destroyed
// by the orchestrator's next rounds, whatever their idle time.
func (s *Server) handleDeletePool(w http.ResponseWriter, r *http.Request) error {
	spec, _, err := s.orch.Pool(r.Context(), r.PathValue("pool"))
	if err != nil {
		return err
	}
	if err := s.store.DeleteDocument(r.Context(), store.KindPool, spec.Name); err != nil {
		return err
	}
	s.orch.Record(r.Context(), spec.Name, "removed", fmt.Sprintf("pool %s removed by %s: its machines are drained and destroyed", spec.Name, principalFrom(r.Context()).User))
	s.hub.WakeOrchestrator()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) handlePoolEvents(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("pool")
	if _, _, err := s.orch.Pool(r.Context(), name); err != nil {
		// A removed pool's events still tell what happened to it.
		if evs, _ := s.store.PoolEvents(r.Context(), name, store.Page{Limit: 1}); len(evs) == 0 {
			return err
		}
	}
	pg, err := paging.Read(r.URL.Query(), "pool-events", name)
	if err != nil {
		return err
	}
	evs, next, err := paging.Fill(pg, func(sp store.Page) ([]api.PoolEvent, error) {
		return s.store.PoolEvents(r.Context(), name, sp)
	}, store.PoolEventCursor, nil)
	return answer(w, http.StatusOK, api.PoolEventList{Events: evs, Next: next}, err)
}

func (s *Server) handleScheduleExplain(w http.ResponseWriter, r *http.Request) error {
	var req api.ScheduleRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sreq := schedule.Request{CPUs: req.CPUs, MemoryMB: req.MemoryMB, Tags: req.Tags, Arch: req.Arch, Policy: req.Policy}
	verdicts, err := s.orch.Explain(r.Context(), sreq)
	if err != nil {
		return err
	}
	out := api.ScheduleExplanation{Policy: req.Policy, Candidates: []api.ScheduleVerdict{}}
	if out.Policy == "" {
		out.Policy = schedule.Cheapest
	}
	for _, v := range verdicts {
		out.Candidates = append(out.Candidates, api.ScheduleVerdict{Pool: v.Pool, Template: v.Template, Provider: v.Provider,
			Price: v.Price, CPUs: v.CPUs, MemoryMB: v.MemoryMB, BootP50: api.Duration(v.BootP50), Feasible: v.Feasible,
			Reasons: v.Reasons, Rank: v.Rank, Why: v.Why})
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// apiPool is a pool with what it has now.
func (s *Server) apiPool(ctx context.Context, spec api.PoolSpec, doc store.Document, st orchestrate.PoolStatus) api.Pool {
	p := api.Pool{Spec: spec, Machines: map[string]int{}, CreatedAt: doc.CreatedAt, UpdatedAt: doc.UpdatedAt}
	if ms, err := s.store.ListPoolMachines(ctx, store.PoolMachineFilter{Pool: spec.Name, Live: true}); err == nil {
		for _, m := range ms {
			p.Machines[m.State]++
		}
	}
	p.Desired, p.Demand, p.Waiting = max(st.Desired, spec.Min), st.Demand, st.Waiting
	return p
}

func apiMachine(m store.PoolMachine) api.PoolMachine {
	out := api.PoolMachine{ID: m.ID, Pool: m.Pool, Template: m.Template, Provider: m.Provider, State: m.State,
		StateReason: m.StateReason, Deployment: m.DeploymentID, Node: m.NodeID, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
	if !m.ReadyAt.IsZero() {
		t := m.ReadyAt
		out.ReadyAt = &t
	}
	if m.State == api.MachineReady && !m.BusyAt.IsZero() && time.Since(m.BusyAt) > 2*time.Second {
		t := m.BusyAt
		out.IdleSince = &t
	}
	return out
}
