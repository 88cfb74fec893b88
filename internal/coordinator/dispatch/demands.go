package dispatch

import (
	"context"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Demands lists the Open and Closed suites with Ready tasks that are not
// assigned to named nodes, and how many online nodes serve each.
func (d *Dispatcher) Demands(ctx context.Context) ([]orchestrate.Demand, error) {
	suites, err := d.store.ListSuites(ctx, store.SuiteFilter{States: []string{api.SuiteOpen, api.SuiteClosed}})
	if err != nil {
		return nil, err
	}
	var nodes []store.Node
	var out []orchestrate.Demand
	claimed := map[string]bool{}
	for _, su := range suites {
		if su.Counts.Ready == 0 || len(su.AssignedNodes) > 0 {
			continue
		}
		if nodes == nil {
			if nodes, err = d.store.ListNodes(ctx, store.NodeFilter{Status: api.StatusOnline}); err != nil {
				return nil, err
			}
		}
		dm := orchestrate.Demand{SuiteID: su.ID, Suite: su.Spec.Name, Priority: su.Spec.Priority, Ready: su.Counts.Ready,
			WorkerCount: su.Spec.WorkerSchedule.WorkerCount, Tags: su.Spec.Tags, Group: su.Spec.Group}
		if b := su.Spec.WorkerSchedule.CPUBinding; b != nil {
			for _, core := range b.Cores {
				dm.Cores = max(dm.Cores, core+1)
			}
		}
		for _, n := range nodes {
			sess := d.agents.Get(n.ID)
			if sess == nil {
				continue
			}
			state, cur := sess.Work()
			switch {
			case state == api.AgentShuttingDown || state == api.AgentDraining:
				// Leaving: what it runs now will want another node.
			case cur == su.ID:
				dm.Serving++
			case !claimed[n.ID] && d.Why.WhyNot(su, n) == nil && !d.Why.Busy(n.ID):
				// A free node takes one suite up: the first, by
				// priority, that it may run.
				claimed[n.ID] = true
				dm.Serving++
			}
		}
		out = append(out, dm)
	}
	return out, nil
}
