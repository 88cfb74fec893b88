package postgres

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// Dependencies between tasks are sqlstore's (deps.go); PostgreSQL adds a
// batch's dependency rows in one statement, and counts down the dependents
// of finished tasks with releaseDeps.

// addDeps stores the dependency rows of new tasks, already inserted
// Pending with waiting = len(After), and settles those whose dependencies
// were stored before: finished ones count down, failed or cancelled ones
// cancel. Dependencies must be in the suite. The old ones are read (and
// locked, see sqlstore.OldDeps) before the rows go in.
func (b *taskBatch) addDeps(ctx context.Context, tx pgx.Tx, suiteID string, counts tally, now int64) error {
	if len(b.after) == 0 {
		return nil
	}
	fresh := make(map[string]bool, len(b.ids))
	for _, id := range b.ids {
		fresh[id] = true
	}
	var from, to []string
	old := map[string]bool{} // dependencies stored before this batch
	for _, id := range slices.Sorted(maps.Keys(b.after)) {
		for _, dep := range b.after[id] {
			from, to = append(from, dep), append(to, id)
			if !fresh[dep] {
				old[dep] = true
			}
		}
	}
	ended, err := sqlstore.OldDeps(ctx, driver{b.s}, pgQuerier{tx}, suiteID, old)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO task_deps (after_id, task_id)
		SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`, from, to); err != nil {
		return err
	}
	_, err = sqlstore.SettleDeps(ctx, driver{b.s}, pgQuerier{tx}, ended, counts, now)
	return err
}

// releaseDeps counts down the dependents of the tasks $1. It compares
// state with d's, not with the literal 'pending': with a literal the
// planner, finding few Pending tasks in its statistics, reads the whole
// tasks table for them on every report (4 ms at 20,000 tasks, most reports
// finding no dependent at all), where d's handful of rows lead it to each
// task by key. A dependent that another transaction counts down at the
// same time is counted again from its new value once that one commits.
// TestReleasePlanReadsTasksByKey pins it.
const releaseDeps = `UPDATE tasks SET
		waiting = tasks.waiting - d.n,
		state = CASE WHEN tasks.waiting - d.n <= 0 THEN '` + api.TaskReady + `' ELSE tasks.state END,
		updated_at = $2
	FROM (SELECT task_id, count(*) AS n, '` + api.TaskPending + `'::text AS state
		FROM task_deps WHERE after_id = ANY($1) GROUP BY task_id) AS d
	WHERE tasks.id = d.task_id AND tasks.state = d.state
	RETURNING tasks.suite_id, tasks.state`
