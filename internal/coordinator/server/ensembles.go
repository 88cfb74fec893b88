package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
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
// spec to, as the placement engine takes them: Write in one of a node's
// groups, Admin where a service of spec runs with the agent's own rights
// (privilegedServices).
func (s *Server) ensembleBooks(ctx context.Context, spec api.EnsembleSpec) ([]ensemble.NodeBooks, map[string]store.Node, error) {
	p := principalFrom(ctx)
	role := api.RoleWrite
	if privilegedServices(spec) {
		role = api.RoleAdmin
	}
	nodes, err := s.store.ListNodes(ctx, store.NodeFilter{Status: api.StatusOnline})
	if err != nil {
		return nil, nil, err
	}
	var books []ensemble.NodeBooks
	byID := map[string]store.Node{}
	for _, n := range nodes {
		if !p.Can(role, n.Groups) || !s.connected(n) {
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
	q := r.URL.Query()
	if p := q.Get("policy"); p != "" {
		spec.Policy = p
	}
	spec.Policy = cmp.Or(spec.Policy, ensemble.Binpack)
	if err := ensemble.Validate(spec); err != nil {
		return err
	}
	if err := validateWorkloads(spec); err != nil {
		return err
	}
	dry, _ := strconv.ParseBool(q.Get("dry_run"))
	ctx := r.Context()
	books, nodes, err := s.ensembleBooks(ctx, spec)
	if err != nil {
		return err
	}
	e := api.Ensemble{ID: auth.NewID("e-"), Name: spec.Name, Spec: spec, State: api.EnsembleDeploying, Owner: principalFrom(ctx).User}
	plan, err := ensemble.Place(books, spec, spec.Policy)
	if err != nil {
		return s.waitForMachines(w, r, e, books, dry, fmt.Errorf("place ensemble %s: %w", spec.Name, err))
	}
	e.Replicas = planReplicas(plan)
	if dry {
		e.ID, e.State = "", "planned"
		httpapi.WriteJSON(w, http.StatusOK, e)
		return nil
	}
	if err := s.store.CreateEnsemble(ctx, e); err != nil {
		return err
	}
	// The deploy outlives a client that hangs up: it finishes or undoes.
	e, err = s.startEnsemble(context.WithoutCancel(ctx), e, plan, nodes)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusCreated, e)
	return nil
}

// startEnsemble deploys a stored ensemble by plan and records it running,
// or, when the deploy fails, undoes everything and records it failed.
func (s *Server) startEnsemble(ctx context.Context, e api.Ensemble, plan ensemble.Plan, nodes map[string]store.Node) (api.Ensemble, error) {
	if err := s.deployEnsemble(ctx, &e, plan, nodes); err != nil {
		s.undoEnsemble(ctx, &e, nodes)
		e.State, e.Reason = api.EnsembleFailed, err.Error()
		// Only what the deploy changed: e may be the one the handler made,
		// without the times the store set when it created it.
		stored, uerr := s.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			st.State, st.Reason, st.Replicas = e.State, e.Reason, e.Replicas
			return nil
		})
		if uerr != nil {
			s.log.Warn("record a failed ensemble", "ensemble", e.Name, "err", uerr)
		} else {
			e = stored
		}
		return e, fmt.Errorf("deploy ensemble %s: %w; everything it had placed was undone", e.Name, err)
	}
	deployed := e
	e, err := s.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
		if st.State != api.EnsembleDeploying {
			return errdefs.Conflict("ensemble %s was %s while it deployed", st.Name, st.State)
		}
		st.State, st.Reason, st.Replicas = api.EnsembleRunning, "", deployed.Replicas
		return nil
	})
	if errors.Is(err, errdefs.ErrConflict) { // shut down meanwhile: what it deployed goes too
		s.undoEnsemble(ctx, &deployed, nodes)
	}
	return e, err
}

// validateWorkloads checks each allocation's container job or service
// spec as its first replica would run it, so that a bad one is refused
// before anything is placed, naming the field by its path in the spec.
// privilegedServices says whether a service of spec names a user with the
// agent's own rights (root, agent), which only a node's group admins may
// start there, as with a suite's run_as.
func privilegedServices(spec api.EnsembleSpec) bool {
	for _, a := range spec.Allocations {
		if a.Service != nil && workload.Privileged(a.Service.User) {
			return true
		}
	}
	return false
}

func validateWorkloads(spec api.EnsembleSpec) error {
	e := api.Ensemble{Name: spec.Name}
	for i, a := range spec.Allocations {
		rep := api.EnsembleReplica{Allocation: a.Name, Replica: 1}
		var err error
		field := fmt.Sprintf("allocations[%d].container", i)
		if a.Container != nil {
			err = workload.CheckContainer(ensembleJob(e, a, rep, a.Resources, "", nil))
		} else {
			field = fmt.Sprintf("allocations[%d].service", i)
			err = workload.CheckService(ensembleService(e, a, rep, a.Resources, "", nil))
		}
		var fe *errdefs.FieldError
		if errors.As(err, &fe) {
			return errdefs.Field(field+"."+fe.Field, "%s", fe.Reason)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	return nil
}

func planReplicas(plan ensemble.Plan) []api.EnsembleReplica {
	out := make([]api.EnsembleReplica, len(plan.Placements))
	for i, p := range plan.Placements {
		out[i] = api.EnsembleReplica{Allocation: p.Allocation, Replica: p.Replica, NodeID: p.NodeID, NodeName: p.NodeName, Why: p.Why}
	}
	return out
}

// deployEnsemble commits every replica's resources, then deploys the
// replicas allocation by allocation, recording each in e as it goes.
func (s *Server) deployEnsemble(ctx context.Context, e *api.Ensemble, plan ensemble.Plan, nodes map[string]store.Node) error {
	commits := make([]string, len(plan.Placements))
	for i, p := range plan.Placements {
		c, err := s.commitReplica(ctx, *e, nodes[p.NodeID], p)
		if err != nil {
			s.releaseCommits(ctx, plan, commits, nodes)
			return fmt.Errorf("commit allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
		}
		commits[i] = c
	}
	env := map[string]string{}
	for _, a := range e.Spec.Allocations {
		told := false // the allocations after this one know where it answers
		for i, p := range plan.Placements {
			if p.Allocation != a.Name {
				continue
			}
			rep := &e.Replicas[i]
			err := s.deployReplica(ctx, *e, a, rep, nodes[p.NodeID], p.Resources, commits[i], env)
			commits[i] = "" // the workload holds the commitment now, or it was given back
			if err != nil {
				s.releaseCommits(ctx, plan, commits, nodes)
				return fmt.Errorf("allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
			}
			if !told && len(rep.Ports) > 0 {
				setAllocEnv(env, a.Name, s.nodeHost(p.NodeID, p.NodeName), rep.Ports[0].Host)
				told = true
			}
		}
	}
	return nil
}

// commitReplica locks a replica's resources on its node.
func (s *Server) commitReplica(ctx context.Context, e api.Ensemble, n store.Node, p ensemble.Placement) (string, error) {
	var c api.Commitment
	req := api.CommitRequest{Owner: "ensemble:" + e.Name, Resources: p.Resources, TTL: api.Duration(ensembleCommitTTL)}
	if err := s.callAgent(ctx, n, http.MethodPost, "/v1/commitments", req, &c); err != nil {
		return "", err
	}
	return c.ID, nil
}

// replicaName is a replica's name on its node, which its container id or
// service instance is made of: a DNS label, new for each restore.
func replicaName(rep api.EnsembleReplica) string {
	if rep.Restores == 0 {
		return strconv.Itoa(rep.Replica)
	}
	return fmt.Sprintf("%d-r%d", rep.Replica, rep.Restores)
}

// ensembleJob is a container replica's job: the allocation's, with its
// id, limits from the resources, its commitment and where the allocations
// before it answer.
func ensembleJob(e api.Ensemble, a api.AllocationSpec, rep api.EnsembleReplica, res api.Resources, commit string, env map[string]string) api.ContainerJob {
	job := *a.Container
	job.ID = e.Name + "-" + a.Name + "-" + replicaName(rep)
	if job.Name == "" {
		job.Name = a.Name
	}
	job.CPUs, job.MemoryMB, job.Commitment = res.CPUs, res.MemoryMB, commit
	job.Env = mergeEnv(job.Env, env)
	return job
}

// ensembleService is a service replica's spec: the allocation's, with
// the coordinate REPLICA.ALLOCATION.ensemble.ENSEMBLE, the books from the
// resources, its commitment and where the allocations before it answer.
func ensembleService(e api.Ensemble, a api.AllocationSpec, rep api.EnsembleReplica, res api.Resources, commit string, env map[string]string) api.ServiceSpec {
	spec := *a.Service
	spec.Coordinate = replicaName(rep) + "." + a.Name + ".ensemble." + e.Name
	// The books hold the resources; limits are the spec's own, since they
	// need cgroups that a node (a container) may not give.
	spec.Resources, spec.Commitment = &res, commit
	if spec.ExpectedMemoryMB == 0 {
		spec.ExpectedMemoryMB = res.MemoryMB
	}
	spec.Env = mergeEnv(spec.Env, env)
	return spec
}

// deployReplica runs replica rep of allocation a on node n from its
// commitment and records in rep what runs: the container or service, its
// status and its ports. A service's artifact is installed first (a no-op
// where it is).
func (s *Server) deployReplica(ctx context.Context, e api.Ensemble, a api.AllocationSpec, rep *api.EnsembleReplica, n store.Node, res api.Resources, commit string, env map[string]string) (err error) {
	defer func() {
		if err != nil { // a commitment not used up would hold the books until it expires
			if rerr := s.callAgent(ctx, n, http.MethodDelete, "/v1/commitments/"+commit, nil, nil); rerr != nil && !errdefs.IsNotFound(rerr) {
				s.log.Warn("release a replica's commitment", "node", n.Name, "commitment", commit, "err", rerr)
			}
		}
	}()
	if a.Container != nil {
		job := ensembleJob(e, a, *rep, res, commit, env)
		c, err := s.deployOn(ctx, n, job)
		if err != nil {
			return err
		}
		rep.Container, rep.Status, rep.Ports = job.ID, c.Status, c.Ports
		return nil
	}
	spec := ensembleService(e, a, *rep, res, commit, env)
	if err := s.callAgent(ctx, n, http.MethodPost, "/v1/artifacts", api.ArtifactInstall{ID: spec.Artifact}, nil); err != nil {
		return fmt.Errorf("install %s on %s: %w", spec.Artifact, n.Name, err)
	}
	var svc api.Service
	if err := s.callAgent(ctx, n, http.MethodPost, "/v1/services", spec, &svc); err != nil {
		return fmt.Errorf("start service %s on %s: %w", spec.Coordinate, n.Name, err)
	}
	rep.Service, rep.Status, rep.Ports = spec.Coordinate, svc.State, nil
	if svc.Port > 0 {
		rep.Ports = []api.ContainerPort{{Host: svc.Port}}
	}
	return nil
}

// removeReplica stops and deletes what a replica runs on node n, which
// frees its books; one already gone is fine.
func (s *Server) removeReplica(ctx context.Context, n store.Node, rep *api.EnsembleReplica) error {
	switch {
	case rep.Container != "":
		c, err := s.deleteOn(ctx, n, rep.Container)
		if err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		rep.Status = c.Status
	case rep.Service != "":
		path := "/v1/services/" + url.PathEscape(rep.Service)
		err := s.callAgent(ctx, n, http.MethodPost, path+"/stop", nil, nil)
		if err == nil {
			err = s.callAgent(ctx, n, http.MethodDelete, path+"?purge=true", nil, nil)
		}
		if err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove service %s on %s: %w", rep.Service, n.Name, err)
		}
		rep.Status = api.ServiceStopped
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

// undoParallel bounds how many replicas undoEnsemble removes at once: a
// container's stop may wait its stop timeout, and an ensemble has up to
// 10,000 replicas.
const undoParallel = 16

// undoEnsemble removes every replica of the ensemble, several at a time.
func (s *Server) undoEnsemble(ctx context.Context, e *api.Ensemble, nodes map[string]store.Node) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, undoParallel)
	for i := range e.Replicas {
		rep := &e.Replicas[i]
		if rep.Container == "" && rep.Service == "" {
			continue
		}
		n, ok := nodes[rep.NodeID]
		if !ok {
			var err error
			if n, err = s.store.GetNode(ctx, rep.NodeID); err != nil {
				continue
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.removeReplica(ctx, n, rep); err != nil {
				s.log.Warn("remove an ensemble's replica", "ensemble", e.Name, "allocation", rep.Allocation, "replica", rep.Replica, "node", n.Name, "err", err)
			}
		})
	}
	wg.Wait()
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
	allocs := make([]api.AllocationStatus, len(e.Spec.Allocations))
	index := map[string]int{}
	for i, a := range e.Spec.Allocations {
		allocs[i] = api.AllocationStatus{Name: a.Name, Kind: api.AllocationContainer, State: api.EnsembleRunning}
		if a.Service != nil {
			allocs[i].Kind = api.AllocationService
		}
		index[a.Name] = i
	}
	for i := range e.Replicas {
		rep := &e.Replicas[i]
		as := &allocs[index[rep.Allocation]]
		as.Replicas++
		reason := s.replicaStatus(ctx, rep)
		if reason != "" {
			reason = " (" + reason + ")"
		}
		if n, err := s.store.GetNode(ctx, rep.NodeID); err == nil && n.Status != api.StatusOnline {
			down = append(down, fmt.Sprintf("%s replica %d: node %s is %s", rep.Allocation, rep.Replica, rep.NodeName, n.Status))
			as.State = api.EnsembleDegraded
			if n.Status == api.StatusOffline {
				unknownOffline(rep)
			}
			continue
		}
		if !replicaRuns(*rep) {
			down = append(down, fmt.Sprintf("%s replica %d on %s is %s%s", rep.Allocation, rep.Replica, rep.NodeName, rep.Status, reason))
			as.State = api.EnsembleDegraded
			continue
		}
		as.Running++
	}
	e.Allocations = allocs
	e.State, e.Reason = api.EnsembleRunning, ""
	if len(down) > 0 {
		e.State, e.Reason = api.EnsembleDegraded, strings.Join(down, "; ")
	}
	return e
}

// replicaStatus refreshes rep.Status as last reported: a container's from
// the store, a service's from its node's presence (kept as it was while
// the node is away). It returns why the workload is not running, when its
// node said.
func (s *Server) replicaStatus(ctx context.Context, rep *api.EnsembleReplica) string {
	if rep.Container != "" {
		found, err := s.store.FindContainer(ctx, rep.Container)
		if err != nil {
			return ""
		}
		rep.Status = found[0].Status
		return found[0].Reason
	}
	sess := s.hub.get(rep.NodeID)
	if sess == nil {
		return ""
	}
	if p := sess.presence.Load(); p != nil {
		rep.Status = "removed"
		for _, svc := range p.Services {
			if svc.Coordinate == rep.Service {
				rep.Status = svc.State
			}
		}
	}
	return ""
}

// unknownOffline marks a replica whose node is offline: a status that
// could have changed since (a container not ended, a service not stopped,
// exited or failed) is not known any more, as with container ls.
func unknownOffline(rep *api.EnsembleReplica) {
	switch {
	case rep.Container != "" && !api.ContainerFinal(rep.Status):
		rep.Status = api.ContainerUnknown
	case rep.Service != "" && !slices.Contains([]string{api.ServiceStopped, api.ServiceExited, api.ServiceFailed}, rep.Status):
		rep.Status = api.ServiceUnknown
	}
}

// replicaRuns reports whether a replica's workload runs, by its status.
func replicaRuns(rep api.EnsembleReplica) bool {
	if rep.Container != "" {
		return rep.Status == api.ContainerRunning
	}
	return rep.Status == api.ServiceRunning
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
