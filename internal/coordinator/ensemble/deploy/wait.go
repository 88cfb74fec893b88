package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
)

// An ensemble that fits on no node may wait for machines. The rule: when
// every allocation whose replicas fit nowhere is served by a pool — its
// agents carry the allocation's tags and one of its groups, its machines
// hold one replica's CPUs and memory, and the allocation names no nodes —
// the ensemble is stored waiting, and each replica that fits nowhere asks
// those pools for one machine of its own (as a suite's Ready tasks ask for
// one per worker_count). Every second it is placed again on the nodes
// there are; once it fits it is committed and deployed like any other,
// and past its provision deadline it fails with the reason. Without such
// a pool the deploy is refused at once with what was short.

// waitForMachines answers a deploy whose placement failed with placeErr:
// the ensemble waits when pools would start machines for it (stored,
// unless dry), else the error stands.
func (r *Runner) waitForMachines(ctx context.Context, e api.Ensemble, books []ensemble.NodeBooks, dry bool, placeErr error) (api.Ensemble, error) {
	var nf *ensemble.NoFitError
	pools := r.pools()
	if !errors.As(placeErr, &nf) || pools == nil {
		return api.Ensemble{}, placeErr
	}
	names, unserved, err := poolsFor(ctx, pools, shortDemands(e, books))
	if err != nil {
		return api.Ensemble{}, err
	}
	if unserved != nil {
		return api.Ensemble{}, fmt.Errorf("%w; and no pool starts machines for allocation %s (%s): add one with `nodemgr pool apply`",
			placeErr, strings.TrimPrefix(unserved.Suite, e.Name+"/"), machineNeeds(*unserved))
	}
	if len(names) == 0 {
		return api.Ensemble{}, placeErr
	}
	e.State, e.Replicas = api.EnsembleWaiting, []api.EnsembleReplica{}
	e.Reason = fmt.Sprintf("%s; waiting up to %v for the machines pool %s starts for it", errdefs.Message(placeErr),
		r.provisionDeadline(e), strings.Join(names, ", "))
	if dry {
		e.ID = ""
		return e, nil
	}
	if err := r.store.CreateEnsemble(ctx, e); err != nil {
		return api.Ensemble{}, err
	}
	r.log.Info("ensemble waits for machines", "ensemble", e.Name, "pools", names)
	pools.Wake()
	return e, nil
}

// machineNeeds says what a pool's machines need to serve d.
func machineNeeds(d orchestrate.Demand) string {
	var parts []string
	if len(d.Tags) > 0 {
		parts = append(parts, "agents tagged "+strings.Join(d.Tags, ", "))
	}
	if len(d.Groups) > 0 {
		parts = append(parts, "in one of groups "+strings.Join(d.Groups, ", "))
	}
	parts = append(parts, fmt.Sprintf("machines of at least %v CPUs and %d MB", d.CPUs, d.MemoryMB))
	return strings.Join(parts, ", ")
}

// provisionDeadline is how long e may wait for machines.
func (r *Runner) provisionDeadline(e api.Ensemble) time.Duration {
	if d := time.Duration(e.Spec.ProvisionDeadline); d > 0 {
		return d
	}
	return r.cfg.ProvisionDeadline
}

// shortDemands is what e asks of the pools, given books it does not fit:
// one demand per allocation with replicas that fit nowhere. It is nil
// when an allocation that fits nowhere names its nodes: no pool makes a
// named node.
func shortDemands(e api.Ensemble, books []ensemble.NodeBooks) []orchestrate.Demand {
	short, err := ensemble.Shortfall(books, e.Spec, e.Spec.Policy)
	if err != nil {
		return nil
	}
	var out []orchestrate.Demand
	for _, a := range e.Spec.Allocations {
		n := short[a.Name]
		if n == 0 {
			continue
		}
		if len(a.Placement.Nodes) > 0 {
			return nil
		}
		out = append(out, orchestrate.Demand{Ensemble: e.Name, Suite: e.Name + "/" + a.Name, Ready: n, WorkerCount: 1,
			Tags: a.Placement.Tags, Groups: a.Placement.Groups, CPUs: a.Resources.CPUs, MemoryMB: a.Resources.MemoryMB})
	}
	return out
}

// poolsFor lists the pools that serve the demands, or returns the first
// demand that no pool serves.
func poolsFor(ctx context.Context, pools Pools, demands []orchestrate.Demand) ([]string, *orchestrate.Demand, error) {
	seen := map[string]bool{}
	var out []string
	for _, d := range demands {
		names, err := pools.PoolsFor(ctx, d)
		if err != nil {
			return nil, nil, err
		}
		if len(names) == 0 {
			return nil, &d, nil
		}
		for _, p := range names {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil, nil
}

// owner is e's owner, whose nodes e may use.
func (r *Runner) owner(ctx context.Context, e api.Ensemble) (auth.Principal, error) {
	u, err := r.store.GetUser(ctx, e.Owner)
	if err != nil {
		return auth.Principal{}, fmt.Errorf("its owner %s: %w", e.Owner, err)
	}
	return auth.Principal{User: u.Name, Admin: u.Admin, Groups: u.Groups}, nil
}

// Demands is what the waiting ensembles ask of the pools now.
func (r *Runner) Demands(ctx context.Context) ([]orchestrate.Demand, error) {
	list, err := r.store.ListEnsembles(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []orchestrate.Demand
	for _, e := range list {
		if e.State != api.EnsembleWaiting {
			continue
		}
		p, err := r.owner(ctx, e)
		if err != nil {
			continue
		}
		books, _, err := r.books(ctx, p, e.Spec)
		if err != nil {
			return nil, err
		}
		out = append(out, shortDemands(e, books)...)
	}
	return out, nil
}

// placeWaiting places a waiting ensemble again: once it fits it is
// deployed; past its deadline it fails; else its reason says what it
// waits for.
func (r *Runner) placeWaiting(ctx context.Context, e api.Ensemble) {
	p, err := r.owner(ctx, e)
	if err != nil {
		r.failWaiting(ctx, e, err.Error())
		return
	}
	books, nodes, err := r.books(ctx, p, e.Spec)
	if err != nil {
		return
	}
	plan, err := ensemble.Place(books, e.Spec, e.Spec.Policy)
	if err == nil {
		e, err = r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			if st.State != api.EnsembleWaiting {
				return errdefs.Conflict("ensemble %s is %s now", st.Name, st.State) // shut down meanwhile
			}
			st.State, st.Reason, st.Replicas = api.EnsembleDeploying, "", planReplicas(plan)
			return nil
		})
		if err != nil {
			return
		}
		r.log.Info("a waiting ensemble fits now; deploying it", "ensemble", e.Name)
		if _, err := r.start(ctx, e, plan, nodes); err != nil {
			r.log.Warn("deploy a waiting ensemble", "ensemble", e.Name, "err", err)
		}
		return
	}
	deadline := r.provisionDeadline(e)
	if time.Since(e.CreatedAt) > deadline {
		r.failWaiting(ctx, e, fmt.Sprintf("no machine came within its provision deadline (%v): %s", deadline, errdefs.Message(err)))
		return
	}
	reason := errdefs.Message(err) + "; " + r.waitLine(ctx, e, e.CreatedAt.Add(deadline))
	if reason != e.Reason {
		r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			if st.State == api.EnsembleWaiting {
				st.Reason = reason
			}
			return nil
		})
	}
}

// waitLine says which pools start machines for e, until when.
func (r *Runner) waitLine(ctx context.Context, e api.Ensemble, until time.Time) string {
	var parts []string
	if pools := r.pools(); pools != nil {
		for _, a := range e.Spec.Allocations {
			if line := pools.ForSuite(ctx, e.Name+"/"+a.Name); line != "" && !slices.Contains(parts, line) {
				parts = append(parts, line)
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "waiting for the pools' machines")
	}
	return strings.Join(parts, "; ") + " (until " + until.UTC().Format(time.TimeOnly) + " UTC)"
}

// failWaiting records a waiting ensemble failed with the reason; it held
// nothing, so there is nothing to undo.
func (r *Runner) failWaiting(ctx context.Context, e api.Ensemble, reason string) {
	r.log.Warn("a waiting ensemble failed", "ensemble", e.Name, "reason", reason)
	r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
		if st.State == api.EnsembleWaiting {
			st.State, st.Reason = api.EnsembleFailed, reason
		}
		return nil
	})
}
