package server

import (
	"context"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/ensemble"
	"github.com/nodemgr/nodemgr/internal/store"
)

// A running ensemble whose node is lost (offline, no heartbeat) for its
// restore deadline gets the replicas that were there placed again on the
// nodes left, as DMS does: each replica alone, by the same rules (spread
// counts the replicas still in place), committed, then deployed. The
// container on the lost node is remembered and deleted when the node comes
// back, so the replica does not run twice for long.

// ensembleTick is how often running ensembles are checked for lost nodes.
const ensembleTick = time.Second

func (s *Server) ensembleLoop(ctx context.Context) {
	t := time.NewTicker(ensembleTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// All of them: a shut-down ensemble may still have a lost
		// replica's container to delete once its node is back.
		list, err := s.store.ListEnsembles(ctx, true)
		if err != nil {
			continue
		}
		for _, e := range list {
			switch {
			case e.State == api.EnsembleWaiting:
				s.placeWaiting(ctx, e)
			case e.State == api.EnsembleRunning || len(e.Lost) > 0:
				s.restoreEnsemble(ctx, e)
			}
		}
	}
}

// restoreEnsemble places again the replicas of e whose node was lost for
// longer than its deadline, and deletes lost replicas whose node is back.
func (s *Server) restoreEnsemble(ctx context.Context, e api.Ensemble) {
	deadline := s.cfg.EnsembleRestoreDeadline
	if d := time.Duration(e.Spec.RestoreDeadline); d > 0 {
		deadline = d
	}
	changed := s.dropLost(ctx, &e)
	if e.State == api.EnsembleRunning && !e.Spec.NoRestore {
		for i := range e.Replicas {
			n, err := s.store.GetNode(ctx, e.Replicas[i].NodeID)
			if err != nil || n.Status == api.StatusOnline || time.Since(n.LastHeartbeat) < deadline {
				continue
			}
			if err := s.replaceReplica(ctx, &e, i, n); err != nil {
				s.log.Warn("place a lost node's replica again", "ensemble", e.Name, "allocation", e.Replicas[i].Allocation,
					"replica", e.Replicas[i].Replica, "node", n.Name, "err", err)
				continue
			}
			changed = true
		}
	}
	if changed {
		if _, err := s.store.UpdateEnsemble(ctx, e.ID, func(st *api.Ensemble) error {
			if st.State != e.State {
				// Shut down meanwhile: what was placed again goes too.
				st.Lost = append(e.Lost, e.Replicas...)
				return nil
			}
			st.Replicas, st.Lost = e.Replicas, e.Lost
			return nil
		}); err != nil {
			s.log.Warn("record an ensemble's restore", "ensemble", e.Name, "err", err)
		}
	}
}

// dropLost removes the workloads of lost replicas whose node is back.
func (s *Server) dropLost(ctx context.Context, e *api.Ensemble) bool {
	kept := e.Lost[:0]
	for _, rep := range e.Lost {
		n, err := s.store.GetNode(ctx, rep.NodeID)
		if err == nil && !s.connected(n) {
			kept = append(kept, rep) // not back yet
			continue
		}
		if err == nil {
			if err := s.removeReplica(ctx, n, &rep); err != nil {
				kept = append(kept, rep)
				continue
			}
			s.log.Info("removed a replica's old workload on its node that came back", "ensemble", e.Name,
				"allocation", rep.Allocation, "replica", rep.Replica, "node", n.Name)
		}
	}
	changed := len(kept) != len(e.Lost)
	e.Lost = kept
	return changed
}

// replaceReplica places replica i of e, whose node lost is gone, on
// another node, and deploys it there.
func (s *Server) replaceReplica(ctx context.Context, e *api.Ensemble, i int, lost store.Node) error {
	rep := e.Replicas[i]
	var alloc api.AllocationSpec
	for _, a := range e.Spec.Allocations {
		if a.Name == rep.Allocation {
			alloc = a
		}
	}
	octx, err := s.ownerContext(ctx, *e)
	if err != nil {
		return err
	}
	books, nodes, err := s.ensembleBooks(octx, e.Spec)
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
	commit, err := s.commitReplica(ctx, *e, nodes[p.NodeID], p)
	if err != nil {
		return fmt.Errorf("commit on %s: %w", p.NodeName, err)
	}
	next := rep
	next.Restores++
	next.NodeID, next.NodeName = p.NodeID, p.NodeName
	next.Why = fmt.Sprintf("restored: node %s was lost; %s", lost.Name, p.Why)
	next.Container, next.Service = "", ""
	if err := s.deployReplica(ctx, *e, alloc, &next, nodes[p.NodeID], p.Resources, commit, s.allocEnv(*e, rep.Allocation)); err != nil {
		return err
	}
	e.Lost = append(e.Lost, rep)
	e.Replicas[i] = next
	s.log.Info("placed a lost node's replica again", "ensemble", e.Name, "allocation", rep.Allocation,
		"replica", rep.Replica, "from", lost.Name, "to", p.NodeName)
	return nil
}

// allocEnv is where the allocations before alloc answer, from their
// first replicas as they are now.
func (s *Server) allocEnv(e api.Ensemble, alloc string) map[string]string {
	env := map[string]string{}
	for _, a := range e.Spec.Allocations {
		if a.Name == alloc {
			break
		}
		for _, r := range e.Replicas {
			if r.Allocation == a.Name && len(r.Ports) > 0 {
				setAllocEnv(env, a.Name, s.nodeHost(r.NodeID, r.NodeName), r.Ports[0].Host)
				break
			}
		}
	}
	return env
}
