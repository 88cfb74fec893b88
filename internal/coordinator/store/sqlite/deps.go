package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// Dependencies between tasks are sqlstore's (deps.go). Most suites have no
// dependencies at all, so the dispatch path must not pay for them:
// Store.deps says whether any task_deps row was ever stored, and until one
// is, ending a task looks for no dependents (driver.MayHaveDeps).

// addDeps stores the dependency rows of new tasks, already inserted
// Pending with waiting = len(After), and settles those whose dependencies
// were stored before: finished ones count down, failed or cancelled ones
// cancel. Dependencies must be in the suite; one that does not exist fails
// the row's foreign key.
func (s *Store) addDeps(ctx context.Context, tx *sql.Tx, suiteID string, tasks []store.Task, counts tally, now int64) error {
	fresh := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		fresh[t.ID] = true
	}
	stmt, err := s.stmt(ctx, tx, `INSERT INTO task_deps (after_id, task_id) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	old := map[string]bool{} // dependencies stored before this batch
	for _, t := range tasks {
		for _, dep := range t.After {
			if _, err := stmt.ExecContext(ctx, dep, t.ID); err != nil {
				if isUnique(err) {
					continue // named twice: counted once by the caller
				}
				return fmt.Errorf("task %s after %s: %w", t.ID, dep, classify(err))
			}
			if !fresh[dep] {
				old[dep] = true
			}
		}
	}
	if slices.ContainsFunc(tasks, func(t store.Task) bool { return len(t.After) > 0 }) {
		s.deps.Store(true)
	}
	ended, err := sqlstore.OldDeps(ctx, driver{s}, s.writeQ(tx), suiteID, old)
	if err != nil {
		return err
	}
	_, err = sqlstore.SettleDeps(ctx, driver{s}, s.writeQ(tx), ended, counts, now)
	return err
}

// releaseDeps counts down the dependents of the tasks $1 (JSON), by one
// per edge: a dependent of two tasks of the batch goes down by two.
const releaseDeps = `UPDATE tasks SET
		waiting = waiting - (SELECT count(*) FROM task_deps d
			WHERE d.task_id = tasks.id AND d.after_id IN (SELECT value FROM json_each($1))),
		state = CASE WHEN waiting - (SELECT count(*) FROM task_deps d
			WHERE d.task_id = tasks.id AND d.after_id IN (SELECT value FROM json_each($1))) <= 0
			THEN '` + api.TaskReady + `' ELSE state END,
		updated_at = $2
	WHERE id IN (SELECT task_id FROM task_deps WHERE after_id IN (SELECT value FROM json_each($1)))
		AND state = '` + api.TaskPending + `'
	RETURNING suite_id, state`
