package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Resolve finds an ensemble p owns (or any, for an admin); one p may not
// see is not found.
func (r *Runner) Resolve(ctx context.Context, p auth.Principal, ref string) (api.Ensemble, error) {
	e, err := r.store.GetEnsemble(ctx, ref)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return e, errdefs.NotFound("ensemble %q", ref)
		}
		return e, err
	}
	if !p.Admin && p.User != e.Owner {
		return e, errdefs.NotFound("ensemble %q", ref)
	}
	return e, nil
}

// List lists the ensembles p owns (every one, for an admin), each with
// its status; live ones only unless all.
func (r *Runner) List(ctx context.Context, p auth.Principal, all bool) ([]api.Ensemble, error) {
	list, err := r.store.ListEnsembles(ctx, all)
	if err != nil {
		return nil, err
	}
	out := []api.Ensemble{}
	for _, e := range list {
		if p.Admin || p.User == e.Owner {
			out = append(out, r.Status(ctx, e))
		}
	}
	return out, nil
}

// Shutdown removes every replica's workload, which frees its books, and
// records the ensemble shut down.
func (r *Runner) Shutdown(ctx context.Context, e api.Ensemble) (api.Ensemble, error) {
	if e.State == api.EnsembleShutDown || e.State == api.EnsembleFailed {
		return e, errdefs.Conflict("ensemble %s is %s already", e.Name, e.State)
	}
	r.undo(ctx, &e, map[string]store.Node{})
	return r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
		// Lost replicas' workloads are removed when their nodes come back
		// (Loop), shut down or not.
		st.State, st.Reason, st.Replicas = api.EnsembleShutDown, "", e.Replicas
		return nil
	})
}

// Status fills in each replica's status as last reported, and the
// ensemble's state from them: running while every replica runs, degraded
// when one does not.
func (r *Runner) Status(ctx context.Context, e api.Ensemble) api.Ensemble {
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
		reason := r.replicaStatus(ctx, rep)
		if reason != "" {
			reason = " (" + reason + ")"
		}
		if n, err := r.store.GetNode(ctx, rep.NodeID); err == nil && n.Status != api.StatusOnline {
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
func (r *Runner) replicaStatus(ctx context.Context, rep *api.EnsembleReplica) string {
	if rep.Container != "" {
		found, err := r.store.FindContainer(ctx, rep.Container)
		if err != nil {
			return ""
		}
		rep.Status = found[0].Status
		return found[0].Reason
	}
	if p := r.agents.Presence(rep.NodeID); p != nil {
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
