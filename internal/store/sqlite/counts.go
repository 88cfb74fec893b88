package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"

	"github.com/nodemgr/nodemgr/api"
)

// Task counts live in suite_counts, one row per suite, and change in the
// same transaction as the tasks they count: every statement that adds a task
// or changes a task's state tallies what it did in a tally, and the tally is
// applied before the transaction commits. Reading a suite then costs the same
// whatever its size.

// tally is how a transaction changed the task counts of suites: signed
// differences by suite ID.
type tally map[string]*api.TaskCounts

// move records that n tasks of a suite went from one state to another; from
// is "" for new tasks.
func (t tally) move(suiteID, from, to string, n int) {
	if n == 0 || from == to {
		return
	}
	c := t[suiteID]
	if c == nil {
		c = new(api.TaskCounts)
		t[suiteID] = c
	}
	if from != "" {
		*countOf(c, from) -= n
	}
	*countOf(c, to) += n
}

// countOf is the count of state in c. States are checked where they are
// written, so an unknown one is a bug.
func countOf(c *api.TaskCounts, state string) *int {
	switch state {
	case api.TaskPending:
		return &c.Pending
	case api.TaskReady:
		return &c.Ready
	case api.TaskRunning:
		return &c.Running
	case api.TaskFinished:
		return &c.Finished
	case api.TaskFailed:
		return &c.Failed
	case api.TaskCancelled:
		return &c.Cancelled
	}
	panic(fmt.Sprintf("sqlite: task state %q has no count", state))
}

const addCounts = `UPDATE suite_counts SET pending = pending + ?, ready = ready + ?, running = running + ?,
	finished = finished + ?, failed = failed + ?, cancelled = cancelled + ?
	WHERE suite_id = ?`

// apply adds the tally to suite_counts, one statement per suite.
func (t tally) apply(ctx context.Context, s *Store, tx *sql.Tx) error {
	if len(t) == 0 {
		return nil
	}
	stmt, err := s.stmt(ctx, tx, addCounts)
	if err != nil {
		return err
	}
	// In order, so that a transaction's writes do not depend on map order.
	for _, id := range slices.Sorted(maps.Keys(t)) {
		c := t[id]
		if *c == (api.TaskCounts{}) {
			continue
		}
		res, err := stmt.ExecContext(ctx, c.Pending, c.Ready, c.Running, c.Finished, c.Failed, c.Cancelled, id)
		if err != nil {
			return fmt.Errorf("count tasks of suite %s: %w", id, classify(err))
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			// Every suite gets its row when it is made; tasks cannot
			// outlive their suite.
			return fmt.Errorf("count tasks of suite %s: no counts row (%d, %v)", id, n, err)
		}
	}
	return nil
}
