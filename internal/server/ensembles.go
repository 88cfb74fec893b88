package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/auth"
	"github.com/nodemgr/nodemgr/internal/ensemble"
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/httpapi"
	"github.com/nodemgr/nodemgr/internal/store"
)

// An ensemble (seed 004) is deployed in three steps, all or nothing:
//
//  1. place: the nodes' books (those the caller may write to, online)
//     go to ensemble.Place, which gives a replica → node plan or says
//     which allocation fit nowhere and what was short;
//  2. commit: every replica's resources are locked on its node first, so
//     that nothing else takes them while the ensemble deploys;
//  3. deploy: each replica's container runs from its commitment, the
//     allocations in the order written, each told where the ones before
//     it answer (NODEMGR_ALLOC_<NAME>_ADDR, _HOST, _PORT).
//
// A failure at any step undoes everything made so far: containers
// deleted, commitments released, and the ensemble is stored failed with
// the reason.

// ensembleCommitTTL bounds how long a replica's lock holds if its deploy
// never comes (the server stopped in between).
const ensembleCommitTTL = 10 * time.Minute

func (s *Server) ensembleRoutes() []route {
	return []route{
		{"GET", "/v1/ensembles", authUser, s.handleListEnsembles},
		{"POST", "/v1/ensembles", authUser, s.handleDeployEnsemble},
		{"GET", "/v1/ensembles/{ensemble}", authUser, s.handleGetEnsemble},
		{"POST", "/v1/ensembles/{ensemble}/shutdown", authUser, s.handleShutdownEnsemble},
	}
}

// ensembleBooks are the books of the online nodes the caller may deploy
// to, as the placement engine takes them.
func (s *Server) ensembleBooks(ctx context.Context) ([]ensemble.NodeBooks, map[string]store.Node, error) {
	p := principalFrom(ctx)
	nodes, err := s.store.ListNodes(ctx, store.NodeFilter{Status: api.StatusOnline})
	if err != nil {
		return nil, nil, err
	}
	var books []ensemble.NodeBooks
	byID := map[string]store.Node{}
	for _, n := range nodes {
		if !p.Can(api.RoleWrite, n.Groups) || s.hub.get(n.ID) == nil {
			continue
		}
		var res api.NodeResources
		if err := s.callAgent(ctx, n, http.MethodGet, "/v1/resources", nil, &res); err != nil {
			s.log.Debug("read a node's books for an ensemble", "node", n.Name, "err", err)
			continue
		}
		byID[n.ID] = n
		books = append(books, ensemble.NodeBooks{ID: n.ID, Name: n.Name, Tags: n.Tags, Groups: n.Groups,
			Online: true, Free: res.Free, FreePorts: -1})
	}
	return books, byID, nil
}

func (s *Server) handleDeployEnsemble(w http.ResponseWriter, r *http.Request) error {
	var spec api.EnsembleSpec
	if err := decodeJSON(r, &spec); err != nil {
		return err
	}
	if err := ensemble.Validate(spec); err != nil {
		return err
	}
	for i, a := range spec.Allocations {
		if a.Service != nil || a.Container == nil {
			return errdefs.Field(fmt.Sprintf("allocations[%d]", i), "an ensemble deploys containers for now; give a container job (services: not yet)")
		}
	}
	q := r.URL.Query()
	policy := q.Get("policy")
	if policy == "" {
		policy = ensemble.Binpack
	}
	ctx := r.Context()
	books, nodes, err := s.ensembleBooks(ctx)
	if err != nil {
		return err
	}
	plan, err := ensemble.Place(books, spec, policy)
	if err != nil {
		return fmt.Errorf("place ensemble %s: %w", spec.Name, err)
	}
	e := api.Ensemble{ID: auth.NewID("e-"), Name: spec.Name, Spec: spec, State: api.EnsembleDeploying,
		Owner: principalFrom(ctx).User, Replicas: planReplicas(plan)}
	if dry, _ := strconv.ParseBool(q.Get("dry_run")); dry {
		e.ID, e.State = "", "planned"
		httpapi.WriteJSON(w, http.StatusOK, e)
		return nil
	}
	if err := s.store.CreateEnsemble(ctx, e); err != nil {
		return err
	}
	// The deploy outlives a client that hangs up: it finishes or undoes.
	dctx := context.WithoutCancel(ctx)
	if err := s.deployEnsemble(dctx, &e, plan, nodes); err != nil {
		s.undoEnsemble(dctx, &e, nodes)
		e.State, e.Reason = api.EnsembleFailed, err.Error()
		if _, uerr := s.store.UpdateEnsemble(dctx, e.ID, func(st *api.Ensemble) error { *st = e; return nil }); uerr != nil {
			s.log.Warn("record a failed ensemble", "ensemble", e.Name, "err", uerr)
		}
		return fmt.Errorf("deploy ensemble %s: %w; everything it had placed was undone", e.Name, err)
	}
	e.State = api.EnsembleRunning
	e, err = s.store.UpdateEnsemble(dctx, e.ID, func(st *api.Ensemble) error {
		st.State, st.Replicas = e.State, e.Replicas
		return nil
	})
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, e)
	return nil
}

func planReplicas(plan ensemble.Plan) []api.EnsembleReplica {
	out := make([]api.EnsembleReplica, len(plan.Placements))
	for i, p := range plan.Placements {
		out[i] = api.EnsembleReplica{Allocation: p.Allocation, Replica: p.Replica, NodeID: p.NodeID, NodeName: p.NodeName, Why: p.Why}
	}
	return out
}

// ensembleJobID is a replica's container id: a DNS label.
func ensembleJobID(e api.Ensemble, rep api.EnsembleReplica) string {
	return fmt.Sprintf("%s-%s-%d", e.Name, rep.Allocation, rep.Replica)
}

// deployEnsemble commits every replica's resources, then deploys the
// replicas allocation by allocation, recording each in e as it goes.
func (s *Server) deployEnsemble(ctx context.Context, e *api.Ensemble, plan ensemble.Plan, nodes map[string]store.Node) error {
	commits := make([]string, len(plan.Placements))
	for i, p := range plan.Placements {
		var c api.Commitment
		req := api.CommitRequest{Owner: "ensemble:" + e.Name, Resources: p.Resources, TTL: api.Duration(ensembleCommitTTL)}
		if err := s.callAgent(ctx, nodes[p.NodeID], http.MethodPost, "/v1/commitments", req, &c); err != nil {
			s.releaseCommits(ctx, plan, commits, nodes)
			return fmt.Errorf("commit allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
		}
		commits[i] = c.ID
	}
	env := map[string]string{}
	for _, a := range e.Spec.Allocations {
		told := false // the allocations after this one know where it answers
		for i, p := range plan.Placements {
			if p.Allocation != a.Name {
				continue
			}
			rep := &e.Replicas[i]
			job := *a.Container
			job.ID = ensembleJobID(*e, *rep)
			if job.Name == "" {
				job.Name = a.Name
			}
			job.CPUs, job.MemoryMB, job.Commitment = p.Resources.CPUs, p.Resources.MemoryMB, commits[i]
			job.Env = mergeEnv(job.Env, env)
			c, err := s.deployOn(ctx, nodes[p.NodeID], job)
			commits[i] = "" // the container holds the commitment now, or it was given back
			if err != nil {
				s.releaseCommits(ctx, plan, commits, nodes)
				return fmt.Errorf("allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
			}
			rep.Container, rep.Status, rep.Ports = job.ID, c.Status, c.Ports
			if !told && len(c.Ports) > 0 {
				setAllocEnv(env, a.Name, s.nodeHost(p.NodeID, p.NodeName), c.Ports[0].Host)
				told = true
			}
		}
	}
	return nil
}

// setAllocEnv tells the allocations after alloc where it answers.
func setAllocEnv(env map[string]string, alloc, host string, port int) {
	key := "NODEMGR_ALLOC_" + envName(alloc)
	env[key+"_HOST"], env[key+"_PORT"] = host, strconv.Itoa(port)
	env[key+"_ADDR"] = net.JoinHostPort(host, strconv.Itoa(port))
}

// nodeHost is the address a node's workloads answer on, as far as the
// server knows: the one its agent connects from, else its name.
func (s *Server) nodeHost(nodeID, name string) string {
	if sess := s.hub.get(nodeID); sess != nil && sess.addr != "" {
		return sess.addr
	}
	return name
}

// envName is an allocation's name as it goes into variable names.
func envName(name string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

func mergeEnv(job, more map[string]string) map[string]string {
	if len(more) == 0 {
		return job
	}
	out := make(map[string]string, len(job)+len(more))
	for k, v := range more {
		out[k] = v
	}
	for k, v := range job { // the job's own win
		out[k] = v
	}
	return out
}

// releaseCommits gives back the commitments not yet used by a container.
func (s *Server) releaseCommits(ctx context.Context, plan ensemble.Plan, commits []string, nodes map[string]store.Node) {
	for i, id := range commits {
		if id == "" {
			continue
		}
		p := plan.Placements[i]
		if err := s.callAgent(ctx, nodes[p.NodeID], http.MethodDelete, "/v1/commitments/"+id, nil, nil); err != nil {
			s.log.Warn("release an ensemble's commitment", "node", p.NodeName, "commitment", id, "err", err)
		}
	}
}

// undoEnsemble deletes every container of the ensemble.
func (s *Server) undoEnsemble(ctx context.Context, e *api.Ensemble, nodes map[string]store.Node) {
	for i := range e.Replicas {
		rep := &e.Replicas[i]
		if rep.Container == "" {
			continue
		}
		n, ok := nodes[rep.NodeID]
		if !ok {
			var err error
			if n, err = s.store.GetNode(ctx, rep.NodeID); err != nil {
				continue
			}
		}
		c, err := s.deleteOn(ctx, n, rep.Container)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("delete an ensemble's container", "container", rep.Container, "node", n.Name, "err", err)
			continue
		}
		rep.Status = c.Status
	}
}

// resolveEnsemble finds an ensemble the caller owns (or any, for an admin).
func (s *Server) resolveEnsemble(ctx context.Context, ref string) (api.Ensemble, error) {
	e, err := s.store.GetEnsemble(ctx, ref)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return e, errdefs.NotFound("ensemble %q", ref)
		}
		return e, err
	}
	if p := principalFrom(ctx); !p.Admin && p.User != e.Owner {
		return e, errdefs.NotFound("ensemble %q", ref)
	}
	return e, nil
}

// withStatus fills in each replica's container status as last reported,
// and the ensemble's state from them: running while every replica runs,
// degraded when one does not.
func (s *Server) withStatus(ctx context.Context, e api.Ensemble) api.Ensemble {
	if e.State != api.EnsembleRunning && e.State != api.EnsembleDegraded {
		return e
	}
	var down []string
	for i := range e.Replicas {
		rep := &e.Replicas[i]
		found, err := s.store.FindContainer(ctx, rep.Container)
		if err == nil {
			rep.Status = found[0].Status
			if found[0].Reason != "" && rep.Status != api.ContainerRunning {
				down = append(down, fmt.Sprintf("%s replica %d on %s is %s (%s)", rep.Allocation, rep.Replica, rep.NodeName, rep.Status, found[0].Reason))
				continue
			}
		}
		if n, err := s.store.GetNode(ctx, rep.NodeID); err == nil && n.Status != api.StatusOnline {
			down = append(down, fmt.Sprintf("%s replica %d: node %s is %s", rep.Allocation, rep.Replica, rep.NodeName, n.Status))
			continue
		}
		if rep.Status != api.ContainerRunning {
			down = append(down, fmt.Sprintf("%s replica %d on %s is %s", rep.Allocation, rep.Replica, rep.NodeName, rep.Status))
		}
	}
	e.State, e.Reason = api.EnsembleRunning, ""
	if len(down) > 0 {
		e.State, e.Reason = api.EnsembleDegraded, strings.Join(down, "; ")
	}
	return e
}

func (s *Server) handleListEnsembles(w http.ResponseWriter, r *http.Request) error {
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	list, err := s.store.ListEnsembles(r.Context(), all)
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := api.EnsembleList{Ensembles: []api.Ensemble{}}
	for _, e := range list {
		if p.Admin || p.User == e.Owner {
			out.Ensembles = append(out.Ensembles, s.withStatus(r.Context(), e))
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleGetEnsemble(w http.ResponseWriter, r *http.Request) error {
	e, err := s.resolveEnsemble(r.Context(), r.PathValue("ensemble"))
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, s.withStatus(r.Context(), e))
	return nil
}

// handleShutdownEnsemble deletes every replica's container, which frees
// its books, and records the ensemble shut down.
func (s *Server) handleShutdownEnsemble(w http.ResponseWriter, r *http.Request) error {
	e, err := s.resolveEnsemble(r.Context(), r.PathValue("ensemble"))
	if err != nil {
		return err
	}
	if e.State == api.EnsembleShutDown || e.State == api.EnsembleFailed {
		return errdefs.Conflict("ensemble %s is %s already", e.Name, e.State)
	}
	ctx := context.WithoutCancel(r.Context())
	s.undoEnsemble(ctx, &e, map[string]store.Node{})
	e, err = s.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
		// Lost replicas' containers are deleted when their nodes come back
		// (ensembleLoop), shut down or not.
		st.State, st.Reason, st.Replicas = api.EnsembleShutDown, "", e.Replicas
		return nil
	})
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, e)
	return nil
}
