package dispatch

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Rejoin settles the tasks of a node whose agent said hello again, holding
// the tasks holding: those the store says run there but the agent does not
// hold were lost with a previous agent process, and go back to the queue;
// those it holds that were taken from it while it was away, and have not
// started elsewhere, are its again (no need to run them twice). It returns
// the tasks it holds that are no longer its own: the agent must drop them.
func (d *Dispatcher) Rejoin(ctx context.Context, nodeID string, holding []string) ([]string, error) {
	d.Reclaim(ctx, nodeID, "agent reconnected without them", holding...)
	if back, err := d.store.ReattachTasks(ctx, nodeID, holding); err != nil {
		return nil, err
	} else if back > 0 {
		d.log.Info("agent came back holding tasks reclaimed from it; they are its again", "node", nodeID, "tasks", back)
	}
	revoked, err := d.revoked(ctx, nodeID, holding)
	if err != nil {
		return nil, err
	}
	if len(revoked) > 0 {
		d.log.Info("agent came back holding tasks that are no longer its own; told to drop them", "node", nodeID, "tasks", len(revoked))
	}
	return revoked, nil
}

// revoked returns the tasks among held (what a reconnecting agent holds)
// that are not running on the node by the store, after the welcome took
// back what it held at the attempt it lost: they were given to another
// node, or ended, while it was away. Its agent must not start them, and
// stops those it runs.
func (d *Dispatcher) revoked(ctx context.Context, nodeID string, held []string) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	running, err := d.store.ListTasks(ctx, store.TaskFilter{NodeID: nodeID, States: []string{api.TaskRunning}})
	if err != nil {
		return nil, fmt.Errorf("list the tasks running on node %s: %w", nodeID, err)
	}
	mine := make(map[string]bool, len(running))
	for _, t := range running {
		mine[t.ID] = true
	}
	var out []string
	for _, id := range held {
		if !mine[id] {
			out = append(out, id)
		}
	}
	return out, nil
}
