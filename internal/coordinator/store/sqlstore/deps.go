package sqlstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Dependencies between tasks (00016): a task with After is Pending while
// tasks.waiting, the count of its dependencies that have not finished, is
// above zero. When a task finishes, each of its dependents' waiting goes
// down by one and those at zero become Ready; when one fails for good or is
// cancelled, its dependents are cancelled, and theirs, with the reason.
// Each database adds a batch's dependency rows its own way, then settles
// them here, as it does the tasks its transactions end.

// ended is a task that just reached a final state inside a transaction.
type ended struct {
	id, suite, state string
}

// Endings collects the tasks a transaction brought to an end, for their
// dependents.
type Endings struct {
	done, failed []ended
}

// Add notes a task that moved to state, if that state is an end.
func (e *Endings) Add(id, suite, state string) {
	switch state {
	case api.TaskFinished:
		e.done = append(e.done, ended{id, suite, state})
	case api.TaskFailed, api.TaskCancelled:
		e.failed = append(e.failed, ended{id, suite, state})
	}
}

// OldDeps reads the dependencies of a batch stored before it (old, by ID)
// and returns their ends. They are read FOR SHARE where the database locks
// rows: one that is finishing in another transaction meanwhile is read
// once that transaction committed, and one that has not started to finish
// cannot until the batch (and its task_deps rows) committed, so its ending
// will see the new dependents. Each must be in the suite.
func OldDeps(ctx context.Context, d Driver, tx Querier, suiteID string, old map[string]bool) (Endings, error) {
	var fin Endings
	if len(old) == 0 {
		return fin, nil
	}
	ids := slices.Sorted(maps.Keys(old))
	rows, err := tx.Query(ctx, `SELECT id, suite_id, state FROM tasks WHERE `+d.In(`id`, `$1`)+` ORDER BY id`+d.Lock("FOR SHARE"),
		d.TextList(ids))
	if err != nil {
		return fin, err
	}
	found := map[string]ended{}
	for rows.Next() {
		var e ended
		if err := rows.Scan(&e.id, &e.suite, &e.state); err != nil {
			rows.Close()
			return fin, err
		}
		found[e.id] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fin, err
	}
	for _, id := range ids {
		e, ok := found[id]
		switch {
		case !ok:
			return fin, fmt.Errorf("after: %w", errdefs.NotFound("task %s", id))
		case e.suite != suiteID:
			return fin, errdefs.Field("after", "task %s is not in this suite", id)
		}
		fin.Add(e.id, e.suite, e.state)
	}
	return fin, nil
}

// SettleDeps applies the ends of tasks to their dependents: finished ones
// count down and release those with nothing left to wait for, failed or
// cancelled ones cancel theirs. It returns the suites in which tasks were
// released. now stamps the tasks it changes. Where the Driver knows that
// no task ever waited for another, it does nothing.
func SettleDeps(ctx context.Context, d Driver, tx Querier, fin Endings, counts sqlrow.Tally, now int64) ([]string, error) {
	if len(fin.done)+len(fin.failed) == 0 || !d.MayHaveDeps() {
		return nil, nil
	}
	var released []string
	if len(fin.done) > 0 {
		var err error
		if released, err = releaseDependents(ctx, d, tx, fin.done, counts, now); err != nil {
			return nil, err
		}
	}
	if len(fin.failed) == 0 {
		return released, nil
	}
	// Most tasks have no dependents: look up the few that have, at once.
	rows, err := tx.Query(ctx, `SELECT DISTINCT after_id FROM task_deps WHERE `+d.In(`after_id`, `$1`),
		d.TextList(endedIDs(fin.failed)))
	if err != nil {
		return nil, err
	}
	with, err := scanStrings(rows)
	if err != nil {
		return nil, err
	}
	for _, e := range fin.failed {
		if slices.Contains(with, e.id) {
			if err := cancelDependents(ctx, tx, e, counts, now); err != nil {
				return nil, err
			}
		}
	}
	return released, nil
}

func endedIDs(es []ended) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	return ids
}

// scanStrings reads rows of one text column and closes them.
func scanStrings(rows Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// releaseDependents counts down the dependents of finished tasks with the
// Driver's ReleaseDeps, and makes Ready those with nothing left to wait
// for. One edge, one count: a dependent of two tasks of the batch goes
// down by two.
func releaseDependents(ctx context.Context, d Driver, tx Querier, done []ended, counts sqlrow.Tally, now int64) ([]string, error) {
	rows, err := tx.Query(ctx, d.ReleaseDeps(), d.TextList(endedIDs(done)), now)
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
func cancelDependents(ctx context.Context, tx Querier, e ended, counts sqlrow.Tally, now int64) error {
	queue := []ended{e}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		var name string
		if err := tx.QueryRow(ctx, `SELECT name FROM tasks WHERE id = $1`, cur.id).Scan(&name); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', reason = $1, updated_at = $2
			WHERE id IN (SELECT task_id FROM task_deps WHERE after_id = $3) AND state = '`+api.TaskPending+`'
			RETURNING id, suite_id`, cancelReason(cur, name), now, cur.id)
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

// cancelReason says why a dependent of e (named name) is cancelled.
func cancelReason(e ended, name string) string {
	how := "failed"
	if e.state == api.TaskCancelled {
		how = "was cancelled"
	}
	if name != "" {
		return fmt.Sprintf("dependency %s (%s) %s", e.id, name, how)
	}
	return fmt.Sprintf("dependency %s %s", e.id, how)
}
