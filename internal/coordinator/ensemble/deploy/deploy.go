package deploy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// commitTTL bounds how long a replica's lock holds if its deploy never
// comes (the server stopped in between).
const commitTTL = 10 * time.Minute

// Deploy places spec on the nodes p may use and deploys it, all or
// nothing. The ensemble comes back running, or waiting (stored, nothing
// placed) when it fits nowhere but pools will start machines for it. A
// dry run stores nothing: the plan comes back with no ID, "planned" (or
// waiting).
func (r *Runner) Deploy(ctx context.Context, p auth.Principal, spec api.EnsembleSpec, dry bool) (api.Ensemble, error) {
	spec.Policy = cmp.Or(spec.Policy, ensemble.Binpack)
	if err := ensemble.Validate(spec); err != nil {
		return api.Ensemble{}, err
	}
	if err := validateWorkloads(spec); err != nil {
		return api.Ensemble{}, err
	}
	books, nodes, err := r.books(ctx, p, spec)
	if err != nil {
		return api.Ensemble{}, err
	}
	e := api.Ensemble{ID: auth.NewID("e-"), Name: spec.Name, Spec: spec, State: api.EnsembleDeploying, Owner: p.User}
	plan, err := ensemble.Place(books, spec, spec.Policy)
	if err != nil {
		return r.waitForMachines(ctx, e, books, dry, fmt.Errorf("place ensemble %s: %w", spec.Name, err))
	}
	e.Replicas = planReplicas(plan)
	if dry {
		e.ID, e.State = "", "planned"
		return e, nil
	}
	if err := r.store.CreateEnsemble(ctx, e); err != nil {
		return api.Ensemble{}, err
	}
	// The deploy outlives a client that hangs up: it finishes or undoes.
	return r.start(context.WithoutCancel(ctx), e, plan, nodes)
}

// books are the books of the online nodes p may deploy spec to, as the
// placement engine takes them: Write in one of a node's groups, Admin
// where a service of spec runs with the agent's own rights
// (privilegedServices).
func (r *Runner) books(ctx context.Context, p auth.Principal, spec api.EnsembleSpec) ([]ensemble.NodeBooks, map[string]store.Node, error) {
	role := api.RoleWrite
	if privilegedServices(spec) {
		role = api.RoleAdmin
	}
	nodes, err := r.store.ListNodes(ctx, store.NodeFilter{Status: api.StatusOnline})
	if err != nil {
		return nil, nil, err
	}
	var books []ensemble.NodeBooks
	byID := map[string]store.Node{}
	for _, n := range nodes {
		if !p.Can(role, n.Groups) || !r.agents.Connected(n) {
			continue
		}
		var res api.NodeResources
		if err := r.agents.Call(ctx, n, "GET", "/v1/resources", nil, &res); err != nil {
			r.log.Debug("read a node's books for an ensemble", "node", n.Name, "err", err)
			continue
		}
		byID[n.ID] = n
		books = append(books, ensemble.NodeBooks{ID: n.ID, Name: n.Name, Tags: n.Tags, Groups: n.Groups,
			Online: true, Free: res.Free, FreePorts: -1})
	}
	return books, byID, nil
}

// start deploys a stored ensemble by plan and records it running, or,
// when the deploy fails, undoes everything and records it failed.
func (r *Runner) start(ctx context.Context, e api.Ensemble, plan ensemble.Plan, nodes map[string]store.Node) (api.Ensemble, error) {
	if err := r.deployAll(ctx, &e, plan, nodes); err != nil {
		r.undo(ctx, &e, nodes)
		e.State, e.Reason = api.EnsembleFailed, err.Error()
		// Only what the deploy changed: e may be the one Deploy made,
		// without the times the store set when it created it.
		stored, uerr := r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			st.State, st.Reason, st.Replicas = e.State, e.Reason, e.Replicas
			return nil
		})
		if uerr != nil {
			r.log.Warn("record a failed ensemble", "ensemble", e.Name, "err", uerr)
		} else {
			e = stored
		}
		return e, fmt.Errorf("deploy ensemble %s: %w; everything it had placed was undone", e.Name, err)
	}
	deployed := e
	e, err := r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
		if st.State != api.EnsembleDeploying {
			return errdefs.Conflict("ensemble %s was %s while it deployed", st.Name, st.State)
		}
		st.State, st.Reason, st.Replicas = api.EnsembleRunning, "", deployed.Replicas
		return nil
	})
	if errors.Is(err, errdefs.ErrConflict) { // shut down meanwhile: what it deployed goes too
		r.undo(ctx, &deployed, nodes)
	}
	return e, err
}

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

// validateWorkloads checks each allocation's container job or service
// spec as its first replica would run it, so that a bad one is refused
// before anything is placed, naming the field by its path in the spec.
func validateWorkloads(spec api.EnsembleSpec) error {
	e := api.Ensemble{Name: spec.Name}
	for i, a := range spec.Allocations {
		rep := api.EnsembleReplica{Allocation: a.Name, Replica: 1}
		var err error
		field := fmt.Sprintf("allocations[%d].container", i)
		if a.Container != nil {
			err = workload.CheckContainer(replicaJob(e, a, rep, a.Resources, "", nil))
		} else {
			field = fmt.Sprintf("allocations[%d].service", i)
			err = workload.CheckService(replicaService(e, a, rep, a.Resources, "", nil))
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

// planReplicas are the replicas of a plan, placed and not yet deployed.
func planReplicas(plan ensemble.Plan) []api.EnsembleReplica {
	out := make([]api.EnsembleReplica, len(plan.Placements))
	for i, p := range plan.Placements {
		out[i] = api.EnsembleReplica{Allocation: p.Allocation, Replica: p.Replica, NodeID: p.NodeID, NodeName: p.NodeName, Why: p.Why}
	}
	return out
}

// deployAll commits every replica's resources, then deploys the replicas
// allocation by allocation, recording each in e as it goes.
func (r *Runner) deployAll(ctx context.Context, e *api.Ensemble, plan ensemble.Plan, nodes map[string]store.Node) error {
	commits := make([]string, len(plan.Placements))
	for i, p := range plan.Placements {
		c, err := r.commit(ctx, *e, nodes[p.NodeID], p)
		if err != nil {
			r.releaseCommits(ctx, plan, commits, nodes)
			return fmt.Errorf("commit allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
		}
		commits[i] = c
	}
	env := map[string]string{}
	var placed []string
	for _, p := range plan.Placements {
		placed = append(placed, p.NodeID)
	}
	meshed := r.agents.Meshed(placed)
	for _, a := range e.Spec.Allocations {
		told := false // the allocations after this one know where it answers
		for i, p := range plan.Placements {
			if p.Allocation != a.Name {
				continue
			}
			rep := &e.Replicas[i]
			err := r.deployReplica(ctx, *e, a, rep, nodes[p.NodeID], p.Resources, commits[i], env)
			commits[i] = "" // the workload holds the commitment now, or it was given back
			if err != nil {
				r.releaseCommits(ctx, plan, commits, nodes)
				return fmt.Errorf("allocation %s replica %d on %s: %w", p.Allocation, p.Replica, p.NodeName, err)
			}
			if !told && len(rep.Ports) > 0 {
				setAllocEnv(env, e.Name, *rep, r.agents.Host(p.NodeID, p.NodeName), meshed)
				told = true
			}
		}
	}
	return nil
}

// commit locks a replica's resources on its node.
func (r *Runner) commit(ctx context.Context, e api.Ensemble, n store.Node, p ensemble.Placement) (string, error) {
	var c api.Commitment
	req := api.CommitRequest{Owner: "ensemble:" + e.Name, Resources: p.Resources, TTL: api.Duration(commitTTL)}
	if err := r.agents.Call(ctx, n, "POST", "/v1/commitments", req, &c); err != nil {
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

// replicaJob is a container replica's job: the allocation's, with its
// id, limits from the resources, its commitment and where the allocations
// before it answer.
func replicaJob(e api.Ensemble, a api.AllocationSpec, rep api.EnsembleReplica, res api.Resources, commit string, env map[string]string) api.ContainerJob {
	job := *a.Container
	job.ID = e.Name + "-" + a.Name + "-" + replicaName(rep)
	if job.Name == "" {
		job.Name = a.Name
	}
	job.CPUs, job.MemoryMB, job.Commitment = res.CPUs, res.MemoryMB, commit
	job.Env = mergeEnv(job.Env, env)
	return job
}

// replicaService is a service replica's spec: the allocation's, with the
// coordinate REPLICA.ALLOCATION.ensemble.ENSEMBLE, the books from the
// resources, its commitment and where the allocations before it answer.
func replicaService(e api.Ensemble, a api.AllocationSpec, rep api.EnsembleReplica, res api.Resources, commit string, env map[string]string) api.ServiceSpec {
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
func (r *Runner) deployReplica(ctx context.Context, e api.Ensemble, a api.AllocationSpec, rep *api.EnsembleReplica, n store.Node, res api.Resources, commit string, env map[string]string) (err error) {
	defer func() {
		if err != nil { // a commitment not used up would hold the books until it expires
			if rerr := r.agents.Call(ctx, n, "DELETE", "/v1/commitments/"+commit, nil, nil); rerr != nil && !errdefs.IsNotFound(rerr) {
				r.log.Warn("release a replica's commitment", "node", n.Name, "commitment", commit, "err", rerr)
			}
		}
	}()
	if a.Container != nil {
		job := replicaJob(e, a, *rep, res, commit, env)
		job.Ports = keepHostPorts(job.Ports, rep.Ports)
		c, err := r.agents.RunContainer(ctx, n, job)
		if err != nil {
			return err
		}
		rep.Container, rep.Status, rep.Ports = job.ID, c.Status, c.Ports
		return nil
	}
	spec := replicaService(e, a, *rep, res, commit, env)
	if spec.Port == 0 && len(rep.Ports) > 0 {
		spec.Port = rep.Ports[0].Host // a restore asks for the port it had
	}
	if err := r.agents.Call(ctx, n, "POST", "/v1/artifacts", api.ArtifactInstall{ID: spec.Artifact}, nil); err != nil {
		return fmt.Errorf("install %s on %s: %w", spec.Artifact, n.Name, err)
	}
	var svc api.Service
	if err := r.agents.Call(ctx, n, "POST", "/v1/services", spec, &svc); err != nil {
		return fmt.Errorf("start service %s on %s: %w", spec.Coordinate, n.Name, err)
	}
	rep.Service, rep.Status, rep.Ports = spec.Coordinate, svc.State, nil
	if svc.Port > 0 {
		rep.Ports = []api.ContainerPort{{Host: svc.Port}}
	}
	return nil
}

// keepHostPorts gives the ports of a job that take any free host port
// the host ports a replica had (had, of a restored replica; none for a
// new one), where the container port matches.
func keepHostPorts(ports, had []api.ContainerPort) []api.ContainerPort {
	if len(had) == 0 {
		return ports
	}
	out := slices.Clone(ports)
	for i, p := range out {
		for _, h := range had {
			if p.Host == 0 && h.Container == p.Container && cmp.Or(h.Protocol, "tcp") == cmp.Or(p.Protocol, "tcp") {
				out[i].Host = h.Host
			}
		}
	}
	return out
}

// removeReplica stops and deletes what a replica runs on node n, which
// frees its books; one already gone is fine.
func (r *Runner) removeReplica(ctx context.Context, n store.Node, rep *api.EnsembleReplica) error {
	switch {
	case rep.Container != "":
		c, err := r.agents.DeleteContainer(ctx, n, rep.Container)
		if err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		rep.Status = c.Status
	case rep.Service != "":
		path := "/v1/services/" + url.PathEscape(rep.Service)
		err := r.agents.Call(ctx, n, "POST", path+"/stop", nil, nil)
		if err == nil {
			err = r.agents.Call(ctx, n, "DELETE", path+"?purge=true", nil, nil)
		}
		if err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove service %s on %s: %w", rep.Service, n.Name, err)
		}
		rep.Status = api.ServiceStopped
	}
	return nil
}

// setAllocEnv tells the allocations after rep's where it answers: rep
// is the allocation's first replica. Its name on the overlay network,
// which follows its replicas wherever they are restored, is _NAME; where
// the ensemble's nodes are all meshed on the overlay, _HOST is rep's own
// name there (1.db.shop.nodemgr), which leads to it across restores (it
// asks for its host port again), and the traffic crosses nodes inside
// WireGuard. Else _HOST is the address of rep's node.
func setAllocEnv(env map[string]string, ensemble string, rep api.EnsembleReplica, host string, meshed bool) {
	key := "NODEMGR_ALLOC_" + envName(rep.Allocation)
	name := rep.Allocation + "." + ensemble + "." + api.OverlayZone
	env[key+"_NAME"] = name
	if meshed {
		host = strconv.Itoa(rep.Replica) + "." + name
	}
	port := strconv.Itoa(rep.Ports[0].Host)
	env[key+"_HOST"], env[key+"_PORT"] = host, port
	env[key+"_ADDR"] = net.JoinHostPort(host, port)
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

// releaseCommits gives back the commitments not yet used by a workload.
func (r *Runner) releaseCommits(ctx context.Context, plan ensemble.Plan, commits []string, nodes map[string]store.Node) {
	for i, id := range commits {
		if id == "" {
			continue
		}
		p := plan.Placements[i]
		if err := r.agents.Call(ctx, nodes[p.NodeID], "DELETE", "/v1/commitments/"+id, nil, nil); err != nil {
			r.log.Warn("release an ensemble's commitment", "node", p.NodeName, "commitment", id, "err", err)
		}
	}
}

// undoParallel bounds how many replicas undo removes at once: a
// container's stop may wait its stop timeout, and an ensemble has up to
// 10,000 replicas.
const undoParallel = 16

// undo removes every replica of the ensemble, several at a time.
func (r *Runner) undo(ctx context.Context, e *api.Ensemble, nodes map[string]store.Node) {
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
			if n, err = r.store.GetNode(ctx, rep.NodeID); err != nil {
				continue
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.removeReplica(ctx, n, rep); err != nil {
				r.log.Warn("remove an ensemble's replica", "ensemble", e.Name, "allocation", rep.Allocation, "replica", rep.Replica, "node", n.Name, "err", err)
			}
		})
	}
	wg.Wait()
}
