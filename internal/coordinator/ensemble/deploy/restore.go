package deploy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// A running ensemble whose node is lost (offline, no heartbeat) for its
// restore deadline gets the replicas that were there placed again on the
// nodes left, as DMS does: each replica alone, by the same rules (spread
// counts the replicas still in place), committed, then deployed. The
// container on the lost node is remembered and deleted when the node comes
// back, so the replica does not run twice for long.

// tick is how often running ensembles are checked for lost nodes, and
// waiting ones placed again.
const restoreTick = time.Second

// Loop, run by the leader, places waiting ensembles again, restores the
// replicas of lost nodes and removes lost replicas' workloads once their
// nodes are back, every tick until ctx ends.
func (r *Runner) Loop(ctx context.Context) {
	tick.Every(ctx, restoreTick, func() {
		// All of them: a shut-down ensemble may still have a lost
		// replica's container to delete once its node is back.
		list, err := r.store.ListEnsembles(ctx, true)
		if err != nil {
			return
		}
		for _, e := range list {
			switch {
			case e.State == api.EnsembleWaiting:
				r.placeWaiting(ctx, e)
			case e.State == api.EnsembleRunning || len(e.Lost) > 0:
				r.restore(ctx, e)
			}
		}
		r.restoreFailures.forget(time.Now().Add(-restoreQuietLog))
	})
}

// restore places again the replicas of e whose node was lost for longer
// than its deadline, and deletes lost replicas whose node is back.
func (r *Runner) restore(ctx context.Context, e api.Ensemble) {
	deadline := r.cfg.RestoreDeadline
	if d := time.Duration(e.Spec.RestoreDeadline); d > 0 {
		deadline = d
	}
	changed := r.dropLost(ctx, &e)
	if e.State == api.EnsembleRunning && !e.Spec.NoRestore {
		for i := range e.Replicas {
			rep := e.Replicas[i]
			key := fmt.Sprintf("%s/%s/%d", e.ID, rep.Allocation, rep.Replica)
			n, err := r.store.GetNode(ctx, rep.NodeID)
			if err != nil || n.Status == api.StatusOnline || time.Since(n.LastHeartbeat) < deadline {
				if err == nil && r.restoreFailures.ok(key) {
					r.log.Info("a lost node's replica is not placed again after all: its node is back", "ensemble", e.Name,
						"allocation", rep.Allocation, "replica", rep.Replica, "node", n.Name)
				}
				continue
			}
			if err := r.replaceReplica(ctx, &e, i, n); err != nil {
				// Tried every tick: logged when it starts failing, when
				// the reason changes, and once a minute while it stays.
				if log, quiet := r.restoreFailures.fail(key, err.Error(), time.Now()); log {
					r.log.Warn("place a lost node's replica again", "ensemble", e.Name, "allocation", rep.Allocation,
						"replica", rep.Replica, "node", n.Name, "err", err, "failed_quietly_since_last_logged", quiet)
				}
				continue
			}
			r.restoreFailures.ok(key) // replaceReplica logs the success
			changed = true
		}
	}
	if changed {
		if _, err := r.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			if st.State != e.State {
				// Shut down meanwhile: what was placed again goes too.
				st.Lost = append(e.Lost, e.Replicas...)
				return nil
			}
			st.Replicas, st.Lost = e.Replicas, e.Lost
			return nil
		}); err != nil {
			r.log.Warn("record an ensemble's restore", "ensemble", e.Name, "err", err)
		}
	}
}

// How often a replica that cannot be placed again is logged: a new
// reason after restoreChangeLog, the same one after restoreQuietLog.
const (
	restoreChangeLog = 10 * time.Second
	restoreQuietLog  = time.Minute
)

// failures keeps a failure that repeats every tick out of the log but for
// its news: its start, a changed reason (at most once a
// restoreChangeLog), and the same reason once a restoreQuietLog. Keys
// name what failed; the zero value is ready.
type failures struct {
	mu   sync.Mutex
	seen map[string]failure
}

type failure struct {
	reason string
	logged time.Time // when it was last logged
	tried  time.Time // when it last failed
	quiet  int       // failures since it was last logged
}

// fail notes that key failed with reason at now. It says whether to log
// it, and how many failures went unlogged since the last line.
func (f *failures) fail(key, reason string, now time.Time) (log bool, quiet int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]failure{}
	}
	last, ok := f.seen[key]
	since := now.Sub(last.logged)
	if ok && since < restoreQuietLog && (last.reason == reason || since < restoreChangeLog) {
		last.tried = now
		last.quiet++
		f.seen[key] = last
		return false, 0
	}
	f.seen[key] = failure{reason: reason, logged: now, tried: now}
	return true, last.quiet
}

// ok forgets key's failure and says whether it had one.
func (f *failures) ok(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, had := f.seen[key]
	delete(f.seen, key)
	return had
}

// forget drops the failures not tried since before: what failed is gone
// (the ensemble shut down, the node deleted).
func (f *failures) forget(before time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range f.seen {
		if v.tried.Before(before) {
			delete(f.seen, k)
		}
	}
}

// placeReplica commits a replica's resources on node n as placed by p and
// deploys it there from the commitment.
func (r *Runner) placeReplica(ctx context.Context, e api.Ensemble, alloc api.AllocationSpec, rep *api.EnsembleReplica, n store.Node, p ensemble.Placement) error {
	commit, err := r.commit(ctx, e, n, p)
	if err != nil {
		return fmt.Errorf("commit on %s: %w", p.NodeName, err)
	}
	return r.deployReplica(ctx, e, alloc, rep, n, p.Resources, commit, r.allocEnv(e, rep.Allocation, n.ID))
}

// removeFailed removes what a failed deploy of rep left on node n (a
// failed job keeps its id), so that it may be deployed again.
func (r *Runner) removeFailed(ctx context.Context, e api.Ensemble, alloc api.AllocationSpec, rep api.EnsembleReplica, n store.Node) error {
	if alloc.Container != nil {
		rep.Container = replicaJob(e, alloc, rep, api.Resources{}, "", nil).ID
	} else {
		rep.Service = replicaService(e, alloc, rep, api.Resources{}, "", nil).Coordinate
	}
	return r.removeReplica(ctx, n, &rep)
}

// dropLost removes the workloads of lost replicas whose node is back.
func (r *Runner) dropLost(ctx context.Context, e *api.Ensemble) bool {
	kept := e.Lost[:0]
	for _, rep := range e.Lost {
		n, err := r.store.GetNode(ctx, rep.NodeID)
		if err == nil && !r.agents.Connected(n) {
			kept = append(kept, rep) // not back yet
			continue
		}
		if err == nil {
			if err := r.removeReplica(ctx, n, &rep); err != nil {
				kept = append(kept, rep)
				continue
			}
			r.log.Info("removed a replica's old workload on its node that came back", "ensemble", e.Name,
				"allocation", rep.Allocation, "replica", rep.Replica, "node", n.Name)
		}
	}
	changed := len(kept) != len(e.Lost)
	e.Lost = kept
	return changed
}

// replaceReplica places replica i of e, whose node lost is gone, on
// another node, and deploys it there.
func (r *Runner) replaceReplica(ctx context.Context, e *api.Ensemble, i int, lost store.Node) error {
	rep := e.Replicas[i]
	var alloc api.AllocationSpec
	for _, a := range e.Spec.Allocations {
		if a.Name == rep.Allocation {
			alloc = a
		}
	}
	owner, err := r.owner(ctx, *e)
	if err != nil {
		return err
	}
	books, nodes, err := r.books(ctx, owner, e.Spec)
	if err != nil {
		return err
	}
	for b := range books { // spread: the replicas still in place count
		for j, other := range e.Replicas {
			if j != i && other.Allocation == rep.Allocation && other.NodeID == books[b].ID {
				if books[b].Held == nil {
					books[b].Held = map[string]int{}
				}
				books[b].Held[rep.Allocation]++
			}
		}
	}
	one := alloc
	one.Count = 1
	plan, err := ensemble.Place(books, api.EnsembleSpec{Name: e.Name, Allocations: []api.AllocationSpec{one}}, ensemble.Binpack)
	if err != nil {
		return err
	}
	p := plan.Placements[0]
	next := rep
	next.Restores++
	next.NodeID, next.NodeName = p.NodeID, p.NodeName
	next.Why = fmt.Sprintf("restored: node %s was lost; %s", lost.Name, p.Why)
	next.Container, next.Service = "", ""
	// The replica asks for its host ports again, so that its name on the
	// overlay with the port it had still leads to it; where they are taken
	// on the new node, it takes free ones.
	err = r.placeReplica(ctx, *e, alloc, &next, nodes[p.NodeID], p)
	if err != nil && len(next.Ports) > 0 {
		r.log.Info("restore a replica on its old host ports", "ensemble", e.Name, "allocation", rep.Allocation,
			"replica", rep.Replica, "node", p.NodeName, "err", err)
		next.Ports = nil
		if err = r.removeFailed(ctx, *e, alloc, next, nodes[p.NodeID]); err == nil {
			err = r.placeReplica(ctx, *e, alloc, &next, nodes[p.NodeID], p)
		}
	}
	if err != nil {
		return err
	}
	e.Lost = append(e.Lost, rep)
	e.Replicas[i] = next
	r.log.Info("placed a lost node's replica again", "ensemble", e.Name, "allocation", rep.Allocation,
		"replica", rep.Replica, "from", lost.Name, "to", p.NodeName)
	return nil
}

// allocEnv is where the allocations before alloc answer, from their
// first replicas as they are now, for a replica going to node.
func (r *Runner) allocEnv(e api.Ensemble, alloc, node string) map[string]string {
	env := map[string]string{}
	nodes := []string{node}
	for _, rep := range e.Replicas {
		nodes = append(nodes, rep.NodeID)
	}
	meshed := r.agents.Meshed(nodes)
	for _, a := range e.Spec.Allocations {
		if a.Name == alloc {
			break
		}
		for _, rep := range e.Replicas {
			if rep.Allocation == a.Name && len(rep.Ports) > 0 {
				setAllocEnv(env, e.Name, rep, r.agents.Host(rep.NodeID, rep.NodeName), meshed)
				break
			}
		}
	}
	return env
}
