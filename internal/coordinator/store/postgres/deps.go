package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Dependencies between tasks, as in the SQLite store: a task with After is
// Pending while tasks.waiting, the count of its dependencies that have not
// finished, is above zero. When a task finishes, each of its dependents'
// waiting goes down by one and those at zero become Ready; when one fails
// for good or is cancelled, its dependents are cancelled, and theirs, with
// the reason.
//
// The SQLite store skips all of this until a process-local flag says some
// task ever had a dependency. Replicas cannot share such a flag, so here
// every ending looks its dependents up: one probe of task_deps's primary
// key per ended task, done in one statement.

// ended is a task that just reached a final state inside a transaction.
type ended struct {
	id, suite, state string
}

// addDeps stores the dependency rows of new tasks, already inserted
// Pending with waiting = len(After), and settles those whose dependencies
// were stored before: finished ones count down, failed or cancelled ones
// cancel. Dependencies must be in the suite.
//
// The dependencies stored before are read FOR SHARE: one that is finishing
// in another transaction meanwhile is read once that transaction committed,
// and one that has not started to finish cannot until this batch (and its
// task_deps rows) committed, so its ending will see the new dependents.
func addDeps(ctx context.Context, tx pgx.Tx, suiteID string, b *taskBatch, counts tally, now int64) error {
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
	done, failed, err := oldDeps(ctx, tx, suiteID, old)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO task_deps (after_id, task_id)
		SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`, from, to); err != nil {
		return err
	}
	_, err = settleDeps(ctx, tx, done, failed, counts, now)
	return err
}

// oldDeps reads the dependencies stored before a batch (locking them, see
// addDeps) and returns those that finished and those that failed or were
// cancelled.
func oldDeps(ctx context.Context, tx pgx.Tx, suiteID string, old map[string]bool) (done, failed []ended, err error) {
	if len(old) == 0 {
		return nil, nil, nil
	}
	ids := slices.Sorted(maps.Keys(old))
	rows, err := tx.Query(ctx, `SELECT id, suite_id, state FROM tasks WHERE id = ANY($1) ORDER BY id FOR SHARE`, ids)
	if err != nil {
		return nil, nil, err
	}
	found := map[string]ended{}
	for rows.Next() {
		var e ended
		if err := rows.Scan(&e.id, &e.suite, &e.state); err != nil {
			rows.Close()
			return nil, nil, err
		}
		found[e.id] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		e, ok := found[id]
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("after: %w", errdefs.NotFound("task %s", id))
		case e.suite != suiteID:
			return nil, nil, errdefs.Field("after", "task %s is not in this suite", id)
		case e.state == api.TaskFinished:
			done = append(done, e)
		case e.state == api.TaskFailed || e.state == api.TaskCancelled:
			failed = append(failed, e)
		}
	}
	return done, failed, nil
}

// settleDeps applies the ends of tasks to their dependents: finished ones
// count down and release those with nothing left to wait for, failed or
// cancelled ones cancel theirs. It returns the suites in which tasks were
// released. now stamps the tasks it changes.
func settleDeps(ctx context.Context, tx pgx.Tx, done, failed []ended, counts tally, now int64) ([]string, error) {
	var released []string
	if len(done) > 0 {
		var err error
		if released, err = releaseDependents(ctx, tx, done, counts, now); err != nil {
			return nil, err
		}
	}
	if len(failed) == 0 {
		return released, nil
	}
	ids := make([]string, len(failed))
	for i, e := range failed {
		ids[i] = e.id
	}
	// Most tasks have no dependents: look up the few that have, at once.
	rows, err := tx.Query(ctx, `SELECT DISTINCT after_id FROM task_deps WHERE after_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	with, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, e := range failed {
		if slices.Contains(with, e.id) {
			if err := cancelDependents(ctx, tx, e, counts, now); err != nil {
				return nil, err
			}
		}
	}
	return released, nil
}

// releaseDeps counts down the dependents of the tasks $1. It compares
// state with d's, not with the literal 'Pending': with a literal the
// planner, finding few Pending tasks in its statistics, reads the whole
// tasks table for them on every report (4 ms at 20,000 tasks, most reports
// finding no dependent at all), where d's handful of rows lead it to each
// task by key. TestReleasePlanReadsTasksByKey pins it.
const releaseDeps = `UPDATE tasks SET
		waiting = tasks.waiting - d.n,
		state = CASE WHEN tasks.waiting - d.n <= 0 THEN '` + api.TaskReady + `' ELSE tasks.state END,
		updated_at = $2
	FROM (SELECT task_id, count(*) AS n, '` + api.TaskPending + `'::text AS state
		FROM task_deps WHERE after_id = ANY($1) GROUP BY task_id) AS d
	WHERE tasks.id = d.task_id AND tasks.state = d.state
	RETURNING tasks.suite_id, tasks.state`

// releaseDependents counts down the dependents of finished tasks and makes
// Ready those with nothing left to wait for. One edge, one count: a
// dependent of two tasks of the batch goes down by two. A dependent that
// another transaction counts down at the same time is counted again from
// its new value once that one commits.
func releaseDependents(ctx context.Context, tx pgx.Tx, done []ended, counts tally, now int64) ([]string, error) {
	ids := make([]string, len(done))
	for i, e := range done {
		ids[i] = e.id
	}
	rows, err := tx.Query(ctx, releaseDeps, ids, now)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var released []string
	var suite, state string
	for rows.Next() {
		if err := rows.Scan(&suite, &state); err != nil {
			return nil, err
		}
		if state == api.TaskReady {
			counts.Move(suite, api.TaskPending, api.TaskReady, 1)
			if !slices.Contains(released, suite) {
				released = append(released, suite)
			}
		}
	}
	return released, rows.Err()
}

// cancelDependents cancels the Pending tasks that wait for e, and theirs,
// saying which dependency ended how.
func cancelDependents(ctx context.Context, tx pgx.Tx, e ended, counts tally, now int64) error {
	queue := []ended{e}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		how := "failed"
		if cur.state == api.TaskCancelled {
			how = "was cancelled"
		}
		var name string
		if err := tx.QueryRow(ctx, `SELECT name FROM tasks WHERE id = $1`, cur.id).Scan(&name); err != nil {
			return err
		}
		reason := fmt.Sprintf("dependency %s %s", cur.id, how)
		if name != "" {
			reason = fmt.Sprintf("dependency %s (%s) %s", cur.id, name, how)
		}
		rows, err := tx.Query(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', reason = $1, updated_at = $2
			WHERE id IN (SELECT task_id FROM task_deps WHERE after_id = $3) AND state = '`+api.TaskPending+`'
			RETURNING id, suite_id`, reason, now, cur.id)
		if err != nil {
			return err
		}
		for rows.Next() {
			next := ended{state: api.TaskCancelled}
			if err := rows.Scan(&next.id, &next.suite); err != nil {
				rows.Close()
				return err
			}
			counts.Move(next.suite, api.TaskPending, api.TaskCancelled, 1)
			queue = append(queue, next)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// readAfter fills in the After of tasks that wait for others.
func readAfter(ctx context.Context, q querier, tasks []store.Task) error {
	index := map[string]int{}
	var ids []string
	for i := range tasks {
		if len(tasks[i].Spec.After) > 0 {
			index[tasks[i].ID] = i
			ids = append(ids, tasks[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT task_id, after_id FROM task_deps
		WHERE task_id = ANY($1) ORDER BY task_id, after_id`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, after string
		if err := rows.Scan(&id, &after); err != nil {
			return err
		}
		t := &tasks[index[id]]
		t.After = append(t.After, after)
	}
	return rows.Err()
}
