package dispatch

import (
	"context"
	"fmt"
	"time"
)

// A node works on one suite at a time, and tasks.fetch is where the
// server tells it to move on (api.TasksFetched.Yield), when
//
//   - the suite is no longer the node's to run: it was assigned to other
//     nodes, or the node's tags or groups changed;
//   - a suite of higher priority has tasks ready that the node may run;
//   - it found nothing to run in its suite for IdleSuiteGrace while
//     another suite has tasks ready for it.
//
// The node finishes what it holds, leaves, and asks for the next suite,
// which is the highest-priority one with work; it comes back when this
// one has work again and nothing more urgent waits.

// notThisNodes is the answer to a node that may no longer claim a suite's
// tasks.
const notThisNodes = "the suite is no longer this node's to run: it is assigned to other nodes, or the node's tags or groups changed"

// moveOn says why the node should leave the suite instead of claiming
// more of its tasks, or "" when it should stay.
func (d *Dispatcher) moveOn(ctx context.Context, suiteID, nodeID string) (string, error) {
	due, idle := d.fetches.Due(suiteID, nodeID)
	if !due {
		return "", nil
	}
	su, err := d.store.GetSuite(ctx, suiteID)
	if err != nil {
		return "", err
	}
	n, err := d.store.GetNode(ctx, nodeID)
	if err != nil {
		return "", err
	}
	if Placement(su, n) != nil {
		return notThisNodes, nil
	}
	next, err := d.NextSuite(ctx, nodeID)
	if err != nil || next == nil || next.ID == suiteID {
		return "", err
	}
	switch {
	case next.Spec.Priority > su.Spec.Priority:
		return fmt.Sprintf("suite %s of higher priority (%d > %d) has tasks ready", next.Spec.Name, next.Spec.Priority, su.Spec.Priority), nil
	case idle >= d.cfg.IdleSuiteGrace:
		return fmt.Sprintf("nothing to run here for %s while suite %s has tasks ready", idle.Round(time.Second), next.Spec.Name), nil
	}
	return "", nil
}
