package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/store"
)

const taskColumns = `seq, id, suite_id, spec, state, attempt, node_id, result, created_at, updated_at`

// task is a stored task with its place in insertion order.
type task struct {
	seq int64
	store.Task
}

// AddTasks adds tasks to an Open suite in one transaction: all or none. New
// tasks are Ready whatever their State says; a zero CreatedAt means now.
func (s *Store) AddTasks(ctx context.Context, suiteID string, tasks []store.Task) error {
	for i, t := range tasks {
		if t.ID == "" {
			return fmt.Errorf("add tasks to suite %s: %w", suiteID, errdefs.Field(fmt.Sprintf("tasks[%d].id", i), "required"))
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM suites WHERE id = ?`, suiteID).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.ErrNotFound
		}
		if err != nil {
			return classify(err)
		}
		if state != api.SuiteOpen {
			return errdefs.Conflict("suite is %s, not %s", state, api.SuiteOpen)
		}
		if len(tasks) == 0 {
			return nil
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO tasks
				(id, suite_id, spec, priority, state, attempt, node_id, result, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, 0, '', NULL, ?, ?)`)
		if err != nil {
			return classify(err)
		}
		defer stmt.Close()
		now := s.now()
		for _, t := range tasks {
			spec, err := json.Marshal(t.Spec)
			if err != nil {
				return fmt.Errorf("task %s spec: %w", t.ID, err)
			}
			_, err = stmt.ExecContext(ctx, t.ID, suiteID, string(spec), t.Spec.Priority, api.TaskReady,
				orNow(t.CreatedAt, now).UnixNano(), now.UnixNano())
			if isUnique(err) {
				return errdefs.Conflict("task id %s is taken", t.ID)
			}
			if err != nil {
				return classify(err)
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE suites SET last_task_at = ? WHERE id = ?`, now.UnixNano(), suiteID)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("add %d tasks to suite %s: %w", len(tasks), suiteID, err)
	}
	return nil
}

// GetTask returns a task with its failures.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, classify(err))
	}
	defer tx.Rollback()
	t, err := getTask(ctx, tx, id)
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

func getTask(ctx context.Context, q querier, id string) (store.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
	if err != nil {
		return store.Task{}, err
	}
	tasks := []task{t}
	if err := addFailures(ctx, q, tasks, 1); err != nil {
		return store.Task{}, err
	}
	return tasks[0].Task, nil
}

// ListTasks lists the tasks that match f in the order they were added. A
// suite or an AfterID that does not exist is errdefs.ErrNotFound.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	out, err := s.listTasks(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

func (s *Store) listTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, classify(err)
	}
	defer tx.Rollback()

	var where []string
	var args []any
	if f.SuiteID != "" {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM suites WHERE id = ?`, f.SuiteID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errdefs.NotFound("suite %s", f.SuiteID)
		}
		if err != nil {
			return nil, classify(err)
		}
		where = append(where, `suite_id = ?`)
		args = append(args, f.SuiteID)
	}
	if len(f.States) > 0 {
		where = append(where, `state IN (`+placeholders(len(f.States))+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.NodeID != "" {
		where = append(where, `node_id = ?`)
		args = append(args, f.NodeID)
	}
	if f.AfterID != "" {
		var after int64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM tasks WHERE id = ?`, f.AfterID).Scan(&after)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, errdefs.NotFound("task %s to list after", f.AfterID)
		}
		if err != nil {
			return nil, classify(err)
		}
		where = append(where, `seq > ?`)
		args = append(args, after)
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	tasks, err := scanTasks(rows)
	if err != nil {
		return nil, err
	}
	if err := addFailures(ctx, tx, tasks, 1); err != nil {
		return nil, err
	}
	out := make([]store.Task, len(tasks))
	for i, t := range tasks {
		out[i] = t.Task
	}
	return out, nil
}

// ClaimTasks moves up to max Ready tasks of the suite to Running on the node
// with one UPDATE ... RETURNING, and returns them highest priority first,
// then oldest. The single writer makes concurrent claims take turns. A
// suite that does not exist is errdefs.ErrNotFound; max <= 0 claims nothing.
func (s *Store) ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]store.Task, error) {
	if max <= 0 {
		return []store.Task{}, nil
	}
	var claimed []task
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE tasks SET state = ?1, attempt = attempt + 1, node_id = ?2, updated_at = ?3
			WHERE seq IN (SELECT seq FROM tasks WHERE suite_id = ?4 AND state = ?5
				ORDER BY priority DESC, seq LIMIT ?6)
			RETURNING `+taskColumns,
			api.TaskRunning, nodeID, s.now().UnixNano(), suiteID, api.TaskReady, max)
		if err != nil {
			return classify(err)
		}
		if claimed, err = scanTasks(rows); err != nil {
			return err
		}
		if len(claimed) == 0 {
			// Tell a drained suite from one that is not there.
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM suites WHERE id = ?`, suiteID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return errdefs.ErrNotFound
			}
			return classify(err)
		}
		// Only a task claimed before can have failed before.
		return addFailures(ctx, tx, claimed, 2)
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d tasks of suite %s for node %s: %w", max, suiteID, nodeID, err)
	}
	// RETURNING comes in no promised order.
	slices.SortFunc(claimed, func(a, b task) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), cmp.Compare(a.seq, b.seq))
	})
	out := make([]store.Task, len(claimed))
	for i, t := range claimed {
		out[i] = t.Task
	}
	return out, nil
}

// FinishAttempts applies a node's reports in one transaction; see
// store.Tasks. A report counts only while its task is Running on nodeID at
// its attempt, which one conditional statement per report checks and acts
// on, so a late or repeated report changes nothing.
//
// The store fills in what only it can vouch for: a result's NodeID is
// nodeID, a zero FinishedAt or failure time is now, and a failure's Attempt
// and NodeID are the report's. A failed report without a Failure is recorded
// from its Result. A task that ends Failed keeps the last attempt's result;
// one that is retried keeps none from it but the failure. abort runs inside
// the transaction, with the store's only writer connection held: it must not
// call the store.
func (s *Store) FinishAttempts(ctx context.Context, nodeID string, reports []store.Attempt, abort store.AbortPolicy) (int, error) {
	for i, r := range reports {
		switch r.Outcome {
		case api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped:
		default:
			return 0, fmt.Errorf("finish attempts of node %s: %w", nodeID,
				errdefs.Field(fmt.Sprintf("reports[%d].outcome", i), "unknown outcome %q", r.Outcome))
		}
	}
	if len(reports) == 0 {
		return 0, nil
	}
	applied := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		st := &statements{ctx: ctx, tx: tx}
		defer st.close()
		now := s.now()
		for _, r := range reports {
			ok, err := finish(st, nodeID, r, abort, now.UnixNano())
			if err != nil {
				return fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, err)
			}
			if ok {
				applied++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	return applied, nil
}

// The statements FinishAttempts prepares, once per transaction, as needed.
const (
	// holds: "WHERE" + holds matches the task only while the attempt holds it.
	holds = ` id = ? AND state = '` + api.TaskRunning + `' AND node_id = ? AND attempt = ?`

	finishSucceeded = `UPDATE tasks SET state = '` + api.TaskFinished + `', result = ?, updated_at = ? WHERE` + holds
	finishStopped   = `UPDATE tasks SET state = '` + api.TaskReady + `', updated_at = ? WHERE` + holds
	// The failure row goes in only if the attempt holds the task.
	recordFailure = `INSERT INTO task_failures
			(task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at)
		SELECT id, attempt, node_id, ?, ?, ?, ?, ?, ? FROM tasks WHERE` + holds
	taskFailures = `SELECT task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at
		FROM task_failures WHERE task_id = ? ORDER BY attempt`
	afterFailure = `UPDATE tasks SET state = ?, result = ?, updated_at = ? WHERE id = ?`
)

// finish applies one report and reports whether it counted.
func finish(st *statements, nodeID string, r store.Attempt, abort store.AbortPolicy, now int64) (bool, error) {
	switch r.Outcome {
	case api.OutcomeSucceeded:
		result, err := resultArg(r.Result, nodeID, now)
		if err != nil {
			return false, err
		}
		return st.exec(finishSucceeded, result, now, r.TaskID, nodeID, r.Attempt)

	case api.OutcomeStopped:
		return st.exec(finishStopped, now, r.TaskID, nodeID, r.Attempt)
	}

	f := api.TaskFailure{ExitCode: r.Result.ExitCode, Signal: r.Result.Signal, Stdout: r.Result.Stdout, Stderr: r.Result.Stderr}
	if r.Failure != nil {
		f = *r.Failure
	}
	ok, err := st.exec(recordFailure, f.ExitCode, f.Signal, f.Reason, f.Stdout, f.Stderr, orNanos(f.At, now),
		r.TaskID, nodeID, r.Attempt)
	if !ok || err != nil {
		return false, err
	}
	state, result := api.TaskReady, any(nil)
	if abort != nil {
		failures, err := st.failures(r.TaskID)
		if err != nil {
			return false, err
		}
		if abort(failures) {
			state = api.TaskFailed
			if result, err = resultArg(r.Result, nodeID, now); err != nil {
				return false, err
			}
		}
	}
	_, err = st.exec(afterFailure, state, result, now, r.TaskID)
	return true, err
}

// statements prepares statements in a transaction on first use.
type statements struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (st *statements) get(query string) (*sql.Stmt, error) {
	if stmt, ok := st.stmts[query]; ok {
		return stmt, nil
	}
	stmt, err := st.tx.PrepareContext(st.ctx, query)
	if err != nil {
		return nil, classify(err)
	}
	if st.stmts == nil {
		st.stmts = map[string]*sql.Stmt{}
	}
	st.stmts[query] = stmt
	return stmt, nil
}

// exec runs query and reports whether it changed a row.
func (st *statements) exec(query string, args ...any) (bool, error) {
	stmt, err := st.get(query)
	if err != nil {
		return false, err
	}
	res, err := stmt.ExecContext(st.ctx, args...)
	if err != nil {
		return false, classify(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// failures reads a task's failures, oldest first.
func (st *statements) failures(taskID string) ([]api.TaskFailure, error) {
	stmt, err := st.get(taskFailures)
	if err != nil {
		return nil, err
	}
	rows, err := stmt.QueryContext(st.ctx, taskID)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	out := []api.TaskFailure{}
	for rows.Next() {
		_, f, err := scanFailure(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, classify(rows.Err())
}

func (st *statements) close() {
	for _, stmt := range st.stmts {
		stmt.Close()
	}
}

// resultArg is the JSON of a result as reported by nodeID.
func resultArg(r api.TaskResult, nodeID string, now int64) (string, error) {
	r.NodeID = nodeID
	if r.FinishedAt.IsZero() {
		r.FinishedAt = fromNanos(now)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("result: %w", err)
	}
	return string(b), nil
}

// orNanos is t in unix nanoseconds, or now if t is zero.
func orNanos(t time.Time, now int64) int64 {
	if t.IsZero() {
		return now
	}
	return t.UnixNano()
}

// ReturnTasks moves the node's Running tasks among ids back to Ready and
// takes back the attempt they were claimed with. The task keeps its NodeID.
func (s *Store) ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	idList, err := jsonArg(ids)
	if err != nil {
		return 0, fmt.Errorf("return %d tasks of node %s: %w", len(ids), nodeID, err)
	}
	n, err := s.moveTasks(ctx, `UPDATE tasks SET state = ?, attempt = attempt - 1, updated_at = ?
		WHERE node_id = ? AND state = ? AND id IN (SELECT value FROM json_each(?))`,
		api.TaskReady, s.now().UnixNano(), nodeID, api.TaskRunning, idList)
	if err != nil {
		return 0, fmt.Errorf("return %d tasks of node %s: %w", len(ids), nodeID, err)
	}
	return n, nil
}

// ReclaimNode moves every task Running on the node back to Ready; their
// attempts stay counted and they keep the node as NodeID.
func (s *Store) ReclaimNode(ctx context.Context, nodeID string) (int, error) {
	n, err := s.moveTasks(ctx, `UPDATE tasks SET state = ?, updated_at = ? WHERE node_id = ? AND state = ?`,
		api.TaskReady, s.now().UnixNano(), nodeID, api.TaskRunning)
	if err != nil {
		return 0, fmt.Errorf("reclaim tasks of node %s: %w", nodeID, err)
	}
	return n, nil
}

// moveTasks runs one UPDATE and returns how many tasks it changed.
func (s *Store) moveTasks(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return classify(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// CancelTask cancels a Ready or Running task and returns it as it was; any
// other state is errdefs.ErrConflict.
func (s *Store) CancelTask(ctx context.Context, id string) (store.Task, error) {
	var before store.Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if before, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if before.State != api.TaskReady && before.State != api.TaskRunning {
			return errdefs.Conflict("task is %s", before.State)
		}
		_, err = tx.ExecContext(ctx, `UPDATE tasks SET state = ?, updated_at = ? WHERE id = ?`,
			api.TaskCancelled, s.now().UnixNano(), id)
		return classify(err)
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("cancel task %s: %w", id, err)
	}
	return before, nil
}

// addFailures fills in the failures of those tasks that have made at least
// minAttempt attempts (fewer cannot have failed), with one query.
func addFailures(ctx context.Context, q querier, tasks []task, minAttempt int) error {
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
	idList, err := jsonArg(ids)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, `SELECT task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at
		FROM task_failures WHERE task_id IN (SELECT value FROM json_each(?)) ORDER BY task_id, attempt`, idList)
	if err != nil {
		return classify(err)
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
	return classify(rows.Err())
}

func scanFailure(row scanner) (taskID string, f api.TaskFailure, err error) {
	var at int64
	if err := row.Scan(&taskID, &f.Attempt, &f.NodeID, &f.ExitCode, &f.Signal, &f.Reason, &f.Stdout, &f.Stderr, &at); err != nil {
		return "", api.TaskFailure{}, classify(err)
	}
	f.At = fromNanos(at)
	return taskID, f, nil
}

// scanTasks reads rows of taskColumns and closes them.
func scanTasks(rows *sql.Rows) ([]task, error) {
	defer rows.Close()
	tasks := []task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, classify(rows.Err())
}

// scanTask reads a row of taskColumns; Failures stay nil. A missing row is
// errdefs.ErrNotFound.
func scanTask(row scanner) (task, error) {
	var (
		t                task
		spec             string
		result           sql.NullString
		created, updated int64
	)
	err := row.Scan(&t.seq, &t.ID, &t.SuiteID, &spec, &t.State, &t.Attempt, &t.NodeID, &result, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return task{}, errdefs.ErrNotFound
	}
	if err != nil {
		return task{}, classify(err)
	}
	if err := json.Unmarshal([]byte(spec), &t.Spec); err != nil {
		return task{}, fmt.Errorf("task %s spec: %w", t.ID, err)
	}
	if result.Valid {
		t.Result = new(api.TaskResult)
		if err := json.Unmarshal([]byte(result.String), t.Result); err != nil {
			return task{}, fmt.Errorf("task %s result: %w", t.ID, err)
		}
	}
	t.CreatedAt = fromNanos(created)
	t.UpdatedAt = fromNanos(updated)
	return t, nil
}
