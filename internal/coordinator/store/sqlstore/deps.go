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

// Ended is a task that just reached a final state inside a transaction.
type Ended struct {
	ID, Suite, State string
}

// Endings collects the tasks a transaction brought to an end, for their
// dependents.
type Endings struct {
	Done, Failed []Ended
}

// Add notes a task that moved to state, if that state is an end.
func (e *Endings) Add(id, suite, state string) {
	switch state {
	case api.TaskFinished:
		e.Done = append(e.Done, Ended{id, suite, state})
	case api.TaskFailed, api.TaskCancelled:
		e.Failed = append(e.Failed, Ended{id, suite, state})
	}
}

// OldDeps reads the dependencies of a batch stored before it (old, by ID)
// and returns their ends. They are read FOR SHARE where the database locks
// rows: one that is finishing in another transaction meanwhile is read
// once that transaction committed, and one that has not started to finish
// cannot until the batch (and its task_deps rows) committed, so its ending
// will see the new dependents. Each must be in the suite.
func (s *Store) OldDeps(ctx context.Context, tx Querier, suiteID string, old map[string]bool) (Endings, error) {
	var fin Endings
	if len(old) == 0 {
		return fin, nil
	}
	ids := slices.Sorted(maps.Keys(old))
	rows, err := tx.Query(ctx, `SELECT id, suite_id, state FROM tasks WHERE `+s.d.In(`id`, `$1`)+` ORDER BY id`+s.d.Lock("FOR SHARE"),
		s.d.TextList(ids))
	if err != nil {
		return fin, err
	}
	found := map[string]Ended{}
	for rows.Next() {
		var e Ended
		if err := rows.Scan(&e.ID, &e.Suite, &e.State); err != nil {
			rows.Close()
			return fin, err
		}
		found[e.ID] = e
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
		case e.Suite != suiteID:
			return fin, errdefs.Field("after", "task %s is not in this suite", id)
		}
		fin.Add(e.ID, e.Suite, e.State)
	}
	return fin, nil
}

// SettleDeps applies the ends of tasks to their dependents: finished ones
// count down and release those with nothing left to wait for, failed or
// cancelled ones cancel theirs. It returns the suites in which tasks were
// released. now stamps the tasks it changes. Where the Driver knows that
// no task ever waited for another, it does nothing.
func (s *Store) SettleDeps(ctx context.Context, tx Querier, fin Endings, counts sqlrow.Tally, now int64) ([]string, error) {
	if len(fin.Done)+len(fin.Failed) == 0 || !s.d.MayHaveDeps() {
		return nil, nil
	}
	var released []string
	if len(fin.Done) > 0 {
		var err error
		if released, err = s.releaseDependents(ctx, tx, fin.Done, counts, now); err != nil {
			return nil, err
		}
	}
	if len(fin.Failed) == 0 {
		return released, nil
	}
	// Most tasks have no dependents: look up the few that have, at once.
	rows, err := tx.Query(ctx, `SELECT DISTINCT after_id FROM task_deps WHERE `+s.d.In(`after_id`, `$1`),
		s.d.TextList(endedIDs(fin.Failed)))
	if err != nil {
		return nil, err
	}
	with, err := scanStrings(rows)
	if err != nil {
		return nil, err
	}
	for _, e := range fin.Failed {
		if slices.Contains(with, e.ID) {
			if err := s.cancelDependents(ctx, tx, e, counts, now); err != nil {
				return nil, err
			}
		}
	}
	return released, nil
}

func endedIDs(es []Ended) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
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
func (s *Store) releaseDependents(ctx context.Context, tx Querier, done []Ended, counts sqlrow.Tally, now int64) ([]string, error) {
	rows, err := tx.Query(ctx, s.d.ReleaseDeps(), s.d.TextList(endedIDs(done)), now)
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
func (s *Store) cancelDependents(ctx context.Context, tx Querier, e Ended, counts sqlrow.Tally, now int64) error {
	queue := []Ended{e}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		var name string
		if err := tx.QueryRow(ctx, `SELECT name FROM tasks WHERE id = $1`, cur.ID).Scan(&name); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', reason = $1, updated_at = $2
			WHERE id IN (SELECT task_id FROM task_deps WHERE after_id = $3) AND state = '`+api.TaskPending+`'
			RETURNING id, suite_id`, cancelReason(cur, name), now, cur.ID)
		if err != nil {
			return err
		}
		for rows.Next() {
			next := Ended{State: api.TaskCancelled}
			if err := rows.Scan(&next.ID, &next.Suite); err != nil {
				rows.Close()
				return err
			}
			counts.Move(next.Suite, api.TaskPending, api.TaskCancelled, 1)
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
func cancelReason(e Ended, name string) string {
	how := "failed"
	if e.State == api.TaskCancelled {
		how = "was cancelled"
	}
	if name != "" {
		return fmt.Sprintf("dependency %s (%s) %s", e.ID, name, how)
	}
	return fmt.Sprintf("dependency %s %s", e.ID, how)
}
