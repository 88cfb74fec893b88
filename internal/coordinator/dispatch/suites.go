package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// What users do to suites and tasks, once the server has checked that they
// may: each changes the store and tells the agents it concerns.

// CreateSuite stores a new Open suite of spec (checked already) for
// owner. warning says why no node could run it now, if none could: it is
// accepted all the same (nodes may come later), but said at once rather
// than found out after a long wait. A live suite of the same name is
// errdefs.ErrConflict.
func (d *Dispatcher) CreateSuite(ctx context.Context, spec api.SuiteSpec, owner string) (su store.Suite, warning string, err error) {
	now := time.Now().UTC()
	su = store.Suite{ID: auth.NewID("s-"), Spec: spec, State: api.SuiteOpen, Owner: owner,
		CreatedAt: now, UpdatedAt: now, LastTaskAt: now}
	if err := d.store.CreateSuite(ctx, su); err != nil {
		return store.Suite{}, "", err
	}
	d.log.Info("suite created", "suite", su.ID, "name", spec.Name, "owner", owner)
	if warning, err = d.Why.CreationWarning(ctx, su); err != nil {
		d.log.Warn("explain new suite", "suite", su.ID, "err", err)
	}
	return su, warning, nil
}

// SetSuiteState closes or cancels a suite; a cancelled suite's nodes are
// told to stop it, and a closed one with nothing left completes now.
func (d *Dispatcher) SetSuiteState(ctx context.Context, suiteID, to string) (store.Suite, error) {
	su, err := d.store.UpdateSuite(ctx, suiteID, func(su *store.Suite) error {
		switch {
		case su.State == to:
			return nil
		case su.State == api.SuiteComplete || su.State == api.SuiteCancelled:
			return errdefs.Conflict("suite %s is already %s", su.Spec.Name, su.State)
		}
		su.State = to
		return nil
	})
	if err != nil {
		return store.Suite{}, fmt.Errorf("%s suite: %w", to, err)
	}
	if to == api.SuiteCancelled {
		d.SuiteCancelled(ctx, su.ID)
	}
	if to == api.SuiteClosed {
		// Closed with nothing left: it completes now, not at the tick.
		d.CompleteIfDone(ctx, su.ID)
		if su, err = d.store.GetSuite(ctx, su.ID); err != nil {
			return store.Suite{}, err
		}
	}
	d.SuiteChanged(ctx, su.ID)
	return su, nil
}

// Assign runs the suite on the nodes nodeIDs only (none: on any node
// that fits again), and brings it back on those where it was stopped by
// hand; with add the nodes join those assigned already.
func (d *Dispatcher) Assign(ctx context.Context, suiteID string, nodeIDs []string, add bool) (store.Suite, error) {
	su, err := d.store.UpdateSuite(ctx, suiteID, func(su *store.Suite) error {
		ids := []string{}
		if add {
			ids = append(ids, su.AssignedNodes...)
		}
		for _, id := range nodeIDs {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		su.AssignedNodes = ids
		// Assigning a node brings back a suite stopped there by hand;
		// going back to automatic assignment brings it back everywhere.
		su.StoppedNodes = slices.DeleteFunc(su.StoppedNodes, func(id string) bool {
			return len(nodeIDs) == 0 || slices.Contains(ids, id)
		})
		return nil
	})
	if err != nil {
		return store.Suite{}, fmt.Errorf("assign suite: %w", err)
	}
	// Its nodes check at their next fetch whether it is still theirs to
	// run (those left out take no more); the rest are woken.
	d.fetches.Recheck(su.ID, "")
	d.SuiteChanged(ctx, su.ID)
	return su, nil
}

// Submit adds a batch of tasks (checked already) to the suite, all or
// none, and returns their IDs.
func (d *Dispatcher) Submit(ctx context.Context, su store.Suite, specs []api.TaskSpec) ([]string, error) {
	now := time.Now().UTC()
	tasks := make([]store.Task, len(specs))
	ids := make([]string, len(specs))
	for i, spec := range specs {
		ids[i] = auth.NewID("k-")
		tasks[i] = store.Task{ID: ids[i], SuiteID: su.ID, Spec: spec, State: api.TaskReady, CreatedAt: now, UpdatedAt: now}
	}
	if err := ResolveAfter(ctx, d.store, su.ID, tasks); err != nil {
		return nil, fmt.Errorf("submit tasks to suite %s: %w", su.Spec.Name, err)
	}
	if err := d.store.AddTasks(ctx, su.ID, tasks); err != nil {
		return nil, fmt.Errorf("submit tasks to suite %s: %w", su.Spec.Name, err)
	}
	d.SuiteChanged(ctx, su.ID)
	return ids, nil
}

// CancelTask cancels a task; a node running it is told to stop the
// attempt, so that it leaves alone a retry that started after this
// attempt ended. It returns the task as it is now.
func (d *Dispatcher) CancelTask(ctx context.Context, t store.Task) (store.Task, error) {
	before, err := d.store.CancelTask(ctx, t.ID)
	if err != nil {
		return store.Task{}, fmt.Errorf("cancel task %s: %w", t.ID, err)
	}
	if before.State == api.TaskRunning && before.NodeID != "" {
		body, _ := json.Marshal(api.TaskRef{TaskID: t.ID, Attempt: before.Attempt})
		if err := d.agents.Notify(ctx, before.NodeID, api.NotifyTaskCancel, body); err != nil {
			d.log.Warn("tell node to cancel task", "task", t.ID, "node", before.NodeID, "err", err)
		}
	}
	d.Changes.Notify(t.SuiteID)
	d.CompleteIfDone(ctx, t.SuiteID)
	return d.store.GetTask(ctx, t.ID)
}
