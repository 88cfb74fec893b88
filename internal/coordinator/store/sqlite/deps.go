package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Dependencies between tasks (00016): a task with After is Pending while
// tasks.waiting, the count of its dependencies that have not finished, is
// above zero. When a task finishes, each of its dependents' waiting goes
// down by one and those at zero become Ready; when one fails for good or is
// cancelled, its dependents are cancelled, and theirs, with the reason.
//
// Most suites have no dependencies at all, so the dispatch path must not
// pay for them: Store.deps says whether any task_deps row was ever stored,
// and until one is, nothing here runs.

// ended is a task that just reached a final state inside a transaction.
type ended struct {
	id, suite, state string
}

// addDeps stores the dependency rows of new tasks, already inserted
// Pending with waiting = len(After), and settles those whose dependencies
// were stored before: finished ones count down, failed or cancelled ones
// cancel. Dependencies must be in the suite.
func (s *Store) addDeps(ctx context.Context, tx *sql.Tx, suiteID string, tasks []store.Task, counts tally) error {
	fresh := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		fresh[t.ID] = true
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO task_deps (after_id, task_id) VALUES (?, ?)`)
	if err != nil {
		return classify(err)
	}
	defer stmt.Close()
	var old []string // dependencies stored before this batch
	for _, t := range tasks {
		for _, dep := range t.After {
			if _, err := stmt.ExecContext(ctx, dep, t.ID); err != nil {
				if isUnique(err) {
					continue // named twice: counted once by the caller
				}
				return fmt.Errorf("task %s after %s: %w", t.ID, dep, classify(err))
			}
			if !fresh[dep] {
				old = append(old, dep)
			}
		}
	}
	if len(tasks) > 0 && slices.ContainsFunc(tasks, func(t store.Task) bool { return len(t.After) > 0 }) {
		s.deps.Store(true)
	}
	if len(old) == 0 {
		return nil
	}
	slices.Sort(old)
	old = slices.Compact(old)
	var done, failed []ended
	for _, id := range old {
		var suite, state string
		err := tx.QueryRowContext(ctx, `SELECT suite_id, state FROM tasks WHERE id = ?`, id).Scan(&suite, &state)
		if err == sql.ErrNoRows || err == nil && suite != suiteID {
			return errdefs.Field("after", "task %s is not in this suite", id)
		}
		if err != nil {
			return classify(err)
		}
		switch state {
		case api.TaskFinished:
			done = append(done, ended{id, suite, state})
		case api.TaskFailed, api.TaskCancelled:
			failed = append(failed, ended{id, suite, state})
		}
	}
	if _, err := s.settleDeps(ctx, tx, done, failed, counts); err != nil {
		return err
	}
	return nil
}

// settleDeps applies the ends of tasks to their dependents: finished ones
// count down and release those with nothing left to wait for, failed or
// cancelled ones cancel theirs. It returns the suites in which tasks were
// released.
func (s *Store) settleDeps(ctx context.Context, tx *sql.Tx, done, failed []ended, counts tally) ([]string, error) {
	if !s.deps.Load() || len(done)+len(failed) == 0 {
		return nil, nil
	}
	var released []string
	if len(done) > 0 {
		ids := make([]string, len(done))
		for i, e := range done {
			ids[i] = e.id
		}
		list, err := sqlrow.JSONArg(ids)
		if err != nil {
			return nil, err
		}
		// One edge, one count: a dependent of two tasks of the batch goes
		// down by two.
		rows, err := tx.QueryContext(ctx, `UPDATE tasks SET
				waiting = waiting - (SELECT count(*) FROM task_deps d
					WHERE d.task_id = tasks.id AND d.after_id IN (SELECT value FROM json_each(?1))),
				state = CASE WHEN waiting - (SELECT count(*) FROM task_deps d
					WHERE d.task_id = tasks.id AND d.after_id IN (SELECT value FROM json_each(?1))) <= 0
					THEN '`+api.TaskReady+`' ELSE state END,
				updated_at = ?2
			WHERE id IN (SELECT task_id FROM task_deps WHERE after_id IN (SELECT value FROM json_each(?1)))
				AND state = '`+api.TaskPending+`'
			RETURNING suite_id, state`, list, s.now().UnixNano())
		if err != nil {
			return nil, classify(err)
		}
		var suite, state string
		for rows.Next() {
			if err := rows.Scan(&suite, &state); err != nil {
				rows.Close()
				return nil, classify(err)
			}
			if state == api.TaskReady {
				counts.Move(suite, api.TaskPending, api.TaskReady, 1)
				if !slices.Contains(released, suite) {
					released = append(released, suite)
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, classify(err)
		}
	}
	for _, e := range failed {
		if err := s.cancelDependents(ctx, tx, e, counts); err != nil {
			return nil, err
		}
	}
	return released, nil
}

// cancelDependents cancels the Pending tasks that wait for e, and theirs,
// saying which dependency ended how.
func (s *Store) cancelDependents(ctx context.Context, tx *sql.Tx, e ended, counts tally) error {
	queue := []ended{e}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		how := "failed"
		if cur.state == api.TaskCancelled {
			how = "was cancelled"
		}
		var name string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM tasks WHERE id = ?`, cur.id).Scan(&name); err != nil {
			return classify(err)
		}
		reason := fmt.Sprintf("dependency %s %s", cur.id, how)
		if name != "" {
			reason = fmt.Sprintf("dependency %s (%s) %s", cur.id, name, how)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', reason = ?, updated_at = ?
			WHERE id IN (SELECT task_id FROM task_deps WHERE after_id = ?) AND state = '`+api.TaskPending+`'
			RETURNING id, suite_id`, reason, s.now().UnixNano(), cur.id)
		if err != nil {
			return classify(err)
		}
		for rows.Next() {
			next := ended{state: api.TaskCancelled}
			if err := rows.Scan(&next.id, &next.suite); err != nil {
				rows.Close()
				return classify(err)
			}
			counts.Move(next.suite, api.TaskPending, api.TaskCancelled, 1)
			queue = append(queue, next)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return classify(err)
		}
	}
	return nil
}

// readAfter fills in the After of tasks that wait for others.
func readAfter(ctx context.Context, q querier, tasks []task) error {
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
	list, err := sqlrow.JSONArg(ids)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, `SELECT task_id, after_id FROM task_deps
		WHERE task_id IN (SELECT value FROM json_each(?)) ORDER BY task_id, after_id`, list)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, after string
		if err := rows.Scan(&id, &after); err != nil {
			return classify(err)
		}
		t := &tasks[index[id]]
		t.After = append(t.After, after)
	}
	return classify(rows.Err())
}
