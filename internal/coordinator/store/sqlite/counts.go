package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Task counts live in suite_counts, one row per suite, and change in the
// same transaction as the tasks they count: every statement that adds a task
// or changes a task's state tallies what it did in a tally, and the tally is
// applied before the transaction commits. Reading a suite then costs the same
// whatever its size.

// tally is sqlrow.Tally: the counts a transaction changed.
type tally = sqlrow.Tally

const addCounts = `UPDATE suite_counts SET pending = pending + ?, ready = ready + ?, running = running + ?,
	finished = finished + ?, failed = failed + ?, cancelled = cancelled + ?
	WHERE suite_id = ?`

// applyCounts adds the tally t to suite_counts, one statement per suite.
func (s *Store) applyCounts(ctx context.Context, tx *sql.Tx, t tally) error {
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
