package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Tasks. Each database keeps the statements that carry the dispatch load
// its own way (adding tasks in batches, claiming them, applying reports);
// what reads tasks, moves them back and forth between nodes or cancels
// them is written here once.

// TaskColumns are the columns ScanTasks reads, from tasks.
const TaskColumns = `tasks.seq, tasks.id, tasks.suite_id, tasks.spec, tasks.state, tasks.attempt, tasks.node_id,
	tasks.result, tasks.created_at, tasks.updated_at, tasks.reason`

// AddTasks adds tasks to an Open suite in one transaction: all or none. New
// tasks are Ready, or Pending when they wait for others, whatever their
// State says; a zero CreatedAt means now. Where the database locks rows,
// the suite's row stays locked until the tasks commit, so the suite cannot
// close under them.
func (s *Store) AddTasks(ctx context.Context, suiteID string, tasks []store.Task) error {
	for i, t := range tasks {
		if t.ID == "" {
			return fmt.Errorf("add tasks to suite %s: %w", suiteID, errdefs.Field(fmt.Sprintf("tasks[%d].id", i), "required"))
		}
	}
	batch, err := s.d.NewTasks(tasks)
	if err != nil {
		return fmt.Errorf("add tasks to suite %s: %w", suiteID, err)
	}
	err = s.d.Write(ctx, func(tx Querier) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM suites WHERE id = $1`+s.d.Lock("FOR NO KEY UPDATE"), suiteID).Scan(&state)
		if s.d.NoRows(err) {
			return errdefs.ErrNotFound
		}
		if err != nil {
			return err
		}
		if state != api.SuiteOpen {
			return errdefs.Conflict("suite is %s, not %s", state, api.SuiteOpen)
		}
		if len(tasks) == 0 {
			return nil
		}
		now := s.d.Now()
		counts := sqlrow.Tally{}
		if err := batch.Insert(ctx, tx, suiteID, now, counts); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE suites SET last_task_at = $1 WHERE id = $2`, now.UnixNano(), suiteID); err != nil {
			return err
		}
		return s.d.ApplyCounts(ctx, tx, counts)
	})
	if err != nil {
		return fmt.Errorf("add %d tasks to suite %s: %w", len(tasks), suiteID, err)
	}
	return nil
}

// NewTasks is a submission as one database inserts it, made before the
// write transaction.
type NewTasks interface {
	// Insert stores the tasks in the suite at now, Pending where they wait
	// for others (tasks.waiting their count) and Ready otherwise, with
	// their dependencies (settled with OldDeps and SettleDeps), and
	// tallies them in counts.
	Insert(ctx context.Context, tx Querier, suiteID string, now time.Time, counts sqlrow.Tally) error
}

// GetTask returns a task with its failures.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	var t store.Task
	err := s.d.Read(ctx, func(tx Querier) error {
		var err error
		t, err = s.getTask(ctx, tx, id, "")
		return err
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

// getTask reads a task with its failures and dependencies; lock is "" or
// the Driver's locking clause for the task's row.
func (s *Store) getTask(ctx context.Context, tx Querier, id, lock string) (store.Task, error) {
	t, err := scanTask(tx.QueryRow(ctx, `SELECT `+TaskColumns+` FROM tasks WHERE id = $1`+lock, id))
	if s.d.NoRows(err) {
		return store.Task{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Task{}, err
	}
	tasks := []store.Task{t}
	if err := AddFailures(ctx, s.d, tx, tasks, 1); err != nil {
		return store.Task{}, err
	}
	if err := ReadAfter(ctx, s.d, tx, tasks); err != nil {
		return store.Task{}, err
	}
	return tasks[0], nil
}

// ListTasks lists the tasks that match f in the order they were added. A
// suite that does not exist is errdefs.ErrNotFound.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var out []store.Task
	err := s.d.Read(ctx, func(tx Querier) error {
		var err error
		out, err = s.listTasks(ctx, tx, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

func (s *Store) listTasks(ctx context.Context, tx Querier, f store.TaskFilter) ([]store.Task, error) {
	var where []string
	var a args
	if f.SuiteID != "" {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM suites WHERE id = $1`, f.SuiteID).Scan(&one)
		if s.d.NoRows(err) {
			return nil, errdefs.NotFound("suite %s", f.SuiteID)
		}
		if err != nil {
			return nil, err
		}
		where = append(where, `suite_id = `+a.add(f.SuiteID))
	}
	if len(f.States) > 0 {
		where = append(where, s.stateIn(f.States, &a))
	}
	if f.NodeID != "" {
		where = append(where, `node_id = `+a.add(f.NodeID))
	}
	if f.Name != "" {
		where = append(where, `name = `+a.add(f.Name))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		where = append(where, `(`+s.d.JSON("spec")+` -> 'labels' ->> `+a.add(k)+`) = `+a.add(f.Labels[k]))
	}
	if f.After != "" {
		var after int64
		if err := store.DecodeCursor(f.After, &after); err != nil {
			return nil, err
		}
		where = append(where, `seq > `+a.add(after))
	}
	q := `SELECT ` + TaskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := tx.Query(ctx, q+` ORDER BY seq`+a.limit(f.Page), a...)
	if err != nil {
		return nil, err
	}
	tasks, err := ScanTasks(rows)
	if err != nil {
		return nil, err
	}
	if err := AddFailures(ctx, s.d, tx, tasks, 1); err != nil {
		return nil, err
	}
	if err := ReadAfter(ctx, s.d, tx, tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}

// stateIn is the condition that a task is in one of states. Known states
// are written into the query, not bound, so that the planner can use the
// partial index of tasks in that state (tasks_failed, tasks_ready) with
// any plan, generic ones included; one state is "state = ", which SQLite
// matches with a partial index where it does not match "state IN".
func (s *Store) stateIn(states []string, a *args) string {
	var known []string
	for _, st := range states {
		if !validTaskState(st) {
			return s.d.In(`state`, a.add(s.d.TextList(states)))
		}
		known = append(known, `'`+st+`'`)
	}
	if len(known) == 1 {
		return `state = ` + known[0]
	}
	return `state IN (` + strings.Join(known, `, `) + `)`
}

func validTaskState(state string) bool {
	switch state {
	case api.TaskPending, api.TaskReady, api.TaskRunning, api.TaskFinished, api.TaskFailed, api.TaskCancelled:
		return true
	}
	return false
}

// AddFailures fills in the failures of those tasks that have made at least
// minAttempt attempts (fewer cannot have failed), with one query.
func AddFailures(ctx context.Context, d Driver, q Querier, tasks []store.Task, minAttempt int) error {
	index := map[string]int{}
	var ids []string
	for i := range tasks {
		tasks[i].Failures = []api.TaskFailure{}
		if tasks[i].Attempt >= minAttempt {
			index[tasks[i].ID] = i
			ids = append(ids, tasks[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT f.task_id, f.attempt, f.node_id, f.exit_code, f.signal, f.reason, f.stdout, f.stderr, f.at,
			l.digest, l.bytes, l.truncated
		FROM task_failures AS f LEFT JOIN task_logs AS l ON l.task_id = f.task_id AND l.attempt = f.attempt
		WHERE `+d.In(`f.task_id`, `$1`)+` ORDER BY f.task_id, f.attempt`, d.TextList(ids))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		id, f, err := scanFailure(rows)
		if err != nil {
			return err
		}
		t := &tasks[index[id]]
		t.Failures = append(t.Failures, f)
	}
	return rows.Err()
}

// scanFailure reads a failure's texts as bytes: PostgreSQL keeps them as
// bytea, byte for byte. Its log's columns are NULL when it kept none.
func scanFailure(row Row) (taskID string, f api.TaskFailure, err error) {
	var at int64
	var reason, stdout, stderr []byte
	var logDigest *string
	var logBytes *int64
	var logCut *bool
	if err := row.Scan(&taskID, &f.Attempt, &f.NodeID, &f.ExitCode, &f.Signal, &reason, &stdout, &stderr, &at,
		&logDigest, &logBytes, &logCut); err != nil {
		return "", api.TaskFailure{}, err
	}
	f.Reason, f.Stdout, f.Stderr = string(reason), string(stdout), string(stderr)
	if logDigest != nil && logBytes != nil && logCut != nil {
		f.Log = &api.TaskLog{Digest: *logDigest, Bytes: *logBytes, Truncated: *logCut}
	}
	f.At = sqlrow.FromNanos(at)
	return taskID, f, nil
}

// ReadAfter fills in the After of tasks that wait for others.
func ReadAfter(ctx context.Context, d Driver, q Querier, tasks []store.Task) error {
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
		WHERE `+d.In(`task_id`, `$1`)+` ORDER BY task_id, after_id`, d.TextList(ids))
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

// ScanTasks reads rows of TaskColumns and closes them.
func ScanTasks(rows Rows) ([]store.Task, error) {
	defer rows.Close()
	tasks := []store.Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}

// scanTask reads a row of TaskColumns; Failures stay nil. The JSON columns
// are read as bytes, which both databases' drivers fill without reflection.
func scanTask(row Row) (store.Task, error) {
	var (
		t                store.Task
		spec, result     []byte
		created, updated int64
	)
	err := row.Scan(&t.Seq, &t.ID, &t.SuiteID, &spec, &t.State, &t.Attempt, &t.NodeID, &result, &created, &updated, &t.Reason)
	if err != nil {
		return store.Task{}, err
	}
	if err := json.Unmarshal(spec, &t.Spec); err != nil {
		return store.Task{}, fmt.Errorf("task %s spec: %w", t.ID, err)
	}
	if result != nil {
		t.Result = new(api.TaskResult)
		if err := json.Unmarshal(result, t.Result); err != nil {
			return store.Task{}, fmt.Errorf("task %s result: %w", t.ID, err)
		}
	}
	t.CreatedAt = sqlrow.FromNanos(created)
	t.UpdatedAt = sqlrow.FromNanos(updated)
	return t, nil
}
