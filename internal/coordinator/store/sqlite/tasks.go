package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const taskColumns = `seq, id, suite_id, spec, state, attempt, node_id, result, created_at, updated_at, reason`

// task is a stored task with its place in insertion order.
type task struct {
	seq int64
	store.Task
}

// AddTasks adds tasks to an Open suite in one transaction: all or none. New
// tasks are Ready, or Pending when they wait for others, whatever their
// State says; a zero CreatedAt means now.
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
				(id, suite_id, spec, priority, state, attempt, node_id, result, created_at, updated_at, name, waiting)
			VALUES (?, ?, ?, ?, ?, 0, '', NULL, ?, ?, ?, ?)`)
		if err != nil {
			return classify(err)
		}
		defer stmt.Close()
		now := s.now()
		counts := tally{}
		for i := range tasks {
			t := &tasks[i]
			slices.Sort(t.After)
			t.After = slices.Compact(t.After)
			state := api.TaskReady
			if len(t.After) > 0 {
				state = api.TaskPending
			}
			spec, err := json.Marshal(t.Spec)
			if err != nil {
				return fmt.Errorf("task %s spec: %w", t.ID, err)
			}
			_, err = stmt.ExecContext(ctx, t.ID, suiteID, string(spec), t.Spec.Priority, state,
				sqlrow.OrNow(t.CreatedAt, now).UnixNano(), now.UnixNano(), t.Spec.Name, len(t.After))
			if isUnique(err) {
				if t.Spec.Name != "" {
					return errdefs.Conflict("task id %s or name %q is taken in the suite", t.ID, t.Spec.Name)
				}
				return errdefs.Conflict("task id %s is taken", t.ID)
			}
			if err != nil {
				return classify(err)
			}
			counts.Move(suiteID, "", state, 1)
		}
		if err := s.addDeps(ctx, tx, suiteID, tasks, counts); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE suites SET last_task_at = ? WHERE id = ?`, now.UnixNano(), suiteID)
		if err != nil {
			return classify(err)
		}
		return s.applyCounts(ctx, tx, counts)
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
	if err := readAfter(ctx, q, tasks); err != nil {
		return store.Task{}, err
	}
	return tasks[0].Task, nil
}

// ListTasks lists the tasks that match f in the order they were added. A
// suite that does not exist is errdefs.ErrNotFound.
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
	switch len(f.States) {
	case 0:
	case 1:
		// SQLite matches "state = ?" bound to Failed with the partial
		// index tasks_failed; it does not match "state IN (?)".
		where = append(where, `state = ?`)
		args = append(args, f.States[0])
	default:
		where = append(where, `state IN (`+placeholders(len(f.States))+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.NodeID != "" {
		where = append(where, `node_id = ?`)
		args = append(args, f.NodeID)
	}
	if f.Name != "" {
		where = append(where, `name = ?`)
		args = append(args, f.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		where = append(where, `spec -> '$.labels' ->> ? = ?`)
		args = append(args, k, f.Labels[k])
	}
	if f.After != "" {
		var after int64
		if err := store.DecodeCursor(f.After, &after); err != nil {
			return nil, err
		}
		where = append(where, `seq > ?`)
		args = append(args, after)
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq`
	lim, args := limitClause(f.Page, args)
	q += lim
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
	if err := readAfter(ctx, tx, tasks); err != nil {
		return nil, err
	}
	out := make([]store.Task, len(tasks))
	for i, t := range tasks {
		out[i] = t.Task
	}
	return out, nil
}

// claimTasks claims the first Ready tasks of a suite, which the claim index
// hands over in order. The limit is +?4, not ?4: SQLite plans for the value
// bound to a bare LIMIT parameter, and so prepares the statement again each
// time a new value is bound.
const claimTasks = `UPDATE tasks SET state = '` + api.TaskRunning + `', attempt = attempt + 1, node_id = ?1, updated_at = ?2
	WHERE seq IN (SELECT seq FROM tasks WHERE suite_id = ?3 AND state = '` + api.TaskReady + `' AND not_before <= ?2
		ORDER BY priority DESC, seq LIMIT +?4)
	RETURNING ` + taskColumns

// claimAuth reads what decides whether the node may claim the suite's
// tasks; see sqlrow.ClaimAuth.
var claimAuth = fmt.Sprintf(sqlrow.ClaimAuth, "s.spec ->> '$.tags'", "?1", "?2")

// authorizeClaim checks the row of claimAuth: whatever the server's
// caches say, a node outside the suite's group, tags or assignment claims
// nothing.
func authorizeClaim(row *sql.Row, suiteID, nodeID string) error {
	return sqlrow.AuthorizeClaim(suiteID, nodeID, func(dest ...any) error {
		err := row.Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.ErrNotFound
		}
		return classify(err)
	})
}

// ClaimTasks moves up to max Ready tasks of the suite to Running on the node
// with one UPDATE ... RETURNING, and returns them highest priority first,
// then oldest. The single writer makes concurrent claims take turns. A
// suite that does not exist is errdefs.ErrNotFound, a node that may not
// run its tasks errdefs.ErrPermission, checked in the claim's transaction,
// and even when max <= 0 (which claims nothing, on the reader).
func (s *Store) ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]store.Task, error) {
	if max <= 0 { // a question, not a claim: the writer is not needed
		if err := authorizeClaim(s.r.QueryRowContext(ctx, claimAuth, suiteID, nodeID), suiteID, nodeID); err != nil {
			return nil, fmt.Errorf("claim tasks of suite %s for node %s: %w", suiteID, nodeID, err)
		}
		return []store.Task{}, nil
	}
	var claimed []task
	err := s.write(ctx, func(tx *sql.Tx) error {
		auth, err := s.stmt(ctx, tx, claimAuth)
		if err != nil {
			return err
		}
		if err := authorizeClaim(auth.QueryRowContext(ctx, suiteID, nodeID), suiteID, nodeID); err != nil {
			return err
		}
		stmt, err := s.stmt(ctx, tx, claimTasks)
		if err != nil {
			return err
		}
		rows, err := stmt.QueryContext(ctx, nodeID, s.now().UnixNano(), suiteID, max)
		if err != nil {
			return classify(err)
		}
		if claimed, err = scanTasks(rows); err != nil || len(claimed) == 0 {
			return err
		}
		counts := tally{}
		counts.Move(suiteID, api.TaskReady, api.TaskRunning, len(claimed))
		if err := s.applyCounts(ctx, tx, counts); err != nil {
			return err
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
// its attempt, which the statements that apply it check, so a late or
// repeated report changes nothing.
//
// Successes and stops are applied together by one statement that joins the
// batch, sent as JSON, with the tasks it names. A failure is recorded with a
// statement of its own, since its texts are kept byte for byte; then the
// abort policy sees each failed task's failures, read with one query, and
// one more statement moves the failed tasks on. Only the first of several
// reports of the same attempt can count, so the others are dropped first;
// after that at most one report per task can count (the one of the attempt
// that holds it), and the order in which the reports apply does not matter.
//
// The store fills in what only it can vouch for: a result's NodeID is
// nodeID, a zero FinishedAt or failure time is now, and a failure's Attempt
// and NodeID are the report's. A failed report without a Failure is recorded
// from its Result. A task that ends Failed keeps the last attempt's result;
// one that is retried keeps none from it but the failure. abort runs inside
// the transaction, with the store's only writer connection held: it must not
// call the store.
func (s *Store) FinishAttempts(ctx context.Context, nodeID string, reports []store.Attempt, retry store.RetryPolicy) (store.Finished, error) {
	for i, r := range reports {
		switch r.Outcome {
		case api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped:
		default:
			return store.Finished{}, fmt.Errorf("finish attempts of node %s: %w", nodeID,
				errdefs.Field(fmt.Sprintf("reports[%d].outcome", i), "unknown outcome %q", r.Outcome))
		}
	}
	if len(reports) == 0 {
		return store.Finished{}, nil
	}
	now := s.now().UnixNano()
	// The JSON is made before the writer is taken.
	ends, failures, successes, err := splitReports(reports, nodeID, now)
	if err != nil {
		return store.Finished{}, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	var out store.Finished
	err = s.write(ctx, func(tx *sql.Tx) error {
		out = store.Finished{}
		counts := tally{}
		var fin endings
		if ends != nil {
			n, err := s.finishEnds(ctx, tx, nodeID, ends, now, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
			if n < successes { // some may be late: a lost attempt finishing
				if out.Superseded, n, err = finishLate(ctx, tx, nodeID, ends, now, counts, &fin); err != nil {
					return err
				}
				out.Applied += n
			}
		}
		if len(failures) > 0 {
			n, err := s.finishFailures(ctx, tx, nodeID, failures, retry, now, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
		}
		released, err := s.settleDeps(ctx, tx, fin.done, fin.failed, counts)
		if err != nil {
			return err
		}
		out.Released = released
		return s.applyCounts(ctx, tx, counts)
	})
	if err != nil {
		return store.Finished{}, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	return out, nil
}

// splitReports drops repeated reports of an attempt, keeping the first, and
// returns the successes and stops as a JSON array for finishEnds, the
// failures in order, and how many successes there are.
func splitReports(reports []store.Attempt, nodeID string, now int64) (ends []byte, failures []store.Attempt, successes int, err error) {
	type attempt struct {
		task string
		n    int
	}
	seen := make(map[attempt]bool, len(reports))
	for _, r := range reports {
		if seen[attempt{r.TaskID, r.Attempt}] {
			continue
		}
		seen[attempt{r.TaskID, r.Attempt}] = true
		if r.Outcome == api.OutcomeFailed {
			failures = append(failures, r)
			continue
		}
		if ends == nil {
			ends = append(make([]byte, 0, 128*len(reports)), '[')
		} else {
			ends = append(ends, ',')
		}
		// [task ID, attempt, new state, result or null]
		if ends, err = appendJSON(append(ends, '['), r.TaskID); err != nil {
			return nil, nil, 0, err
		}
		ends = strconv.AppendInt(append(ends, ','), int64(r.Attempt), 10)
		if r.Outcome == api.OutcomeSucceeded {
			successes++
			ends = append(ends, `,"`+api.TaskFinished+`",`...)
			if ends, err = appendResult(ends, r.Result, nodeID, now); err != nil {
				return nil, nil, 0, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, err)
			}
		} else {
			ends = append(ends, `,"`+api.TaskReady+`",null`...)
		}
		ends = append(ends, ']')
	}
	if ends != nil {
		ends = append(ends, ']')
	}
	return ends, failures, successes, nil
}

// The statements FinishAttempts runs. Those that join a batch with tasks
// must look each task up by ID, and not walk the node's running tasks
// (there may be thousands) for each report: the unary + keeps the planner
// off tasks_running. TestDispatchPlans checks that it stays off.
const (
	finishEnds = `UPDATE tasks SET state = r.value ->> 2, result = COALESCE(r.value ->> 3, tasks.result), updated_at = ?1
		FROM jsonb_each(?2) AS r
		WHERE tasks.id = r.value ->> 0 AND tasks.attempt = r.value ->> 1
			AND +tasks.state = '` + api.TaskRunning + `' AND +tasks.node_id = ?3
		RETURNING tasks.suite_id, tasks.state, tasks.id`
	// The failure row goes in only if the attempt holds the task.
	recordFailure = `INSERT INTO task_failures
			(task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at)
		SELECT id, attempt, node_id, ?, ?, ?, ?, ?, ? FROM tasks
		WHERE id = ? AND attempt = ? AND state = '` + api.TaskRunning + `' AND node_id = ?`
	// It runs right after recordFailure, in the same transaction: the
	// tasks are those whose failure went in, held by the failed attempts.
	afterFailures = `UPDATE tasks SET state = r.value ->> 1, result = r.value ->> 2, not_before = r.value ->> 3, updated_at = ?1
		FROM jsonb_each(?2) AS r
		WHERE tasks.id = r.value ->> 0
		RETURNING tasks.suite_id, tasks.state, tasks.id`
)

// finishEnds applies successes and stops, a JSON array from splitReports,
// and returns how many counted.
func (s *Store) finishEnds(ctx context.Context, tx *sql.Tx, nodeID string, ends []byte, now int64, counts tally, fin *endings) (int, error) {
	stmt, err := s.stmt(ctx, tx, finishEnds)
	if err != nil {
		return 0, err
	}
	rows, err := stmt.QueryContext(ctx, now, ends, nodeID)
	if err != nil {
		return 0, classify(err)
	}
	return scanEnds(rows, api.TaskRunning, counts, fin)
}

// lostAttempts finds the successes in a finishEnds batch that finish an
// attempt the node lost when it was declared offline, with the task as it
// is now: Ready again, or Running its re-run elsewhere.
const lostAttempts = `SELECT tasks.id, tasks.suite_id, tasks.state, tasks.node_id, tasks.attempt, r.value ->> 3
	FROM jsonb_each(?1) AS r JOIN tasks ON tasks.id = r.value ->> 0
	WHERE r.value ->> 2 = '` + api.TaskFinished + `'
		AND tasks.reclaimed_from = ?2 AND tasks.reclaimed_attempt = r.value ->> 1
		AND tasks.state IN ('` + api.TaskReady + `', '` + api.TaskRunning + `')`

// finishLate applies the successes of lost attempts (first completion
// wins) and returns the re-runs they supersede. Rare: a node cut off, not
// dead, so it goes task by task.
func finishLate(ctx context.Context, tx *sql.Tx, nodeID string, ends []byte, now int64, counts tally, fin *endings) ([]store.Superseded, int, error) {
	rows, err := tx.QueryContext(ctx, lostAttempts, ends, nodeID)
	if err != nil {
		return nil, 0, classify(err)
	}
	type late struct {
		id, suite, state, node, result string
		attempt                        int
	}
	var found []late
	for rows.Next() {
		var l late
		if err := rows.Scan(&l.id, &l.suite, &l.state, &l.node, &l.attempt, &l.result); err != nil {
			rows.Close()
			return nil, 0, classify(err)
		}
		found = append(found, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, classify(err)
	}
	var superseded []store.Superseded
	for _, l := range found {
		_, err := tx.ExecContext(ctx, `UPDATE tasks SET state = ?, result = ?, node_id = ?, reclaimed_from = '', updated_at = ? WHERE id = ?`,
			api.TaskFinished, l.result, nodeID, now, l.id)
		if err != nil {
			return nil, 0, classify(err)
		}
		counts.Move(l.suite, l.state, api.TaskFinished, 1)
		fin.add(l.id, l.suite, api.TaskFinished)
		if l.state == api.TaskRunning {
			superseded = append(superseded, store.Superseded{TaskID: l.id, NodeID: l.node, Attempt: l.attempt})
		}
	}
	return superseded, len(found), nil
}

// finishFailures applies failures, returns how many counted, and tallies
// what they changed.
func (s *Store) finishFailures(ctx context.Context, tx *sql.Tx, nodeID string, reports []store.Attempt, retry store.RetryPolicy, now int64, counts tally, fin *endings) (int, error) {
	record, err := s.stmt(ctx, tx, recordFailure)
	if err != nil {
		return 0, err
	}
	var held []task // the tasks whose failure counted, with ID and Attempt
	var heldBy []store.Attempt
	for _, r := range reports {
		f := api.TaskFailure{ExitCode: r.Result.ExitCode, Signal: r.Result.Signal, Stdout: r.Result.Stdout, Stderr: r.Result.Stderr}
		if r.Failure != nil {
			f = *r.Failure
		}
		res, err := record.ExecContext(ctx, f.ExitCode, f.Signal, f.Reason, f.Stdout, f.Stderr, sqlrow.OrNanos(f.At, now),
			r.TaskID, r.Attempt, nodeID)
		if err != nil {
			return 0, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, classify(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return 0, err
			}
			continue
		}
		held = append(held, task{Task: store.Task{ID: r.TaskID, Attempt: r.Attempt}})
		heldBy = append(heldBy, r)
	}
	if len(held) == 0 {
		return 0, nil
	}
	var policies map[string][2]*api.RetryPolicy
	if retry != nil {
		if err := addFailures(ctx, tx, held, 1); err != nil {
			return 0, err
		}
		if policies, err = retryPolicies(ctx, tx, held); err != nil {
			return 0, err
		}
	}
	// [task ID, new state, result or null, not before]
	next := append(make([]byte, 0, 64*len(held)), '[')
	for i, t := range held {
		if i > 0 {
			next = append(next, ',')
		}
		next, err = appendJSON(append(next, '['), t.ID)
		if err != nil {
			return 0, err
		}
		giveUp, wait := false, time.Duration(0)
		if retry != nil {
			p := policies[t.ID]
			giveUp, wait = retry(p[0], p[1], t.Failures)
		}
		if giveUp {
			next = append(next, `,"`+api.TaskFailed+`",`...)
			if next, err = appendResult(next, heldBy[i].Result, nodeID, now); err != nil {
				return 0, fmt.Errorf("task %s attempt %d: %w", t.ID, t.Attempt, err)
			}
		} else {
			next = append(next, `,"`+api.TaskReady+`",null`...)
		}
		next = strconv.AppendInt(append(next, ','), now+max(0, wait.Nanoseconds()), 10)
		next = append(next, ']')
	}
	next = append(next, ']')
	stmt, err := s.stmt(ctx, tx, afterFailures)
	if err != nil {
		return 0, err
	}
	rows, err := stmt.QueryContext(ctx, now, next)
	if err != nil {
		return 0, classify(err)
	}
	return scanEnds(rows, api.TaskRunning, counts, fin)
}

// retryPolicies reads the retry policies of the suites and of the tasks,
// by task ID: [suite's, task's], either nil.
func retryPolicies(ctx context.Context, tx *sql.Tx, held []task) (map[string][2]*api.RetryPolicy, error) {
	ids := make([]string, len(held))
	for i, t := range held {
		ids[i] = t.ID
	}
	list, err := sqlrow.JSONArg(ids)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT tasks.id, suites.spec -> '$.retry', tasks.spec -> '$.retry'
		FROM tasks JOIN suites ON suites.id = tasks.suite_id
		WHERE tasks.id IN (SELECT value FROM json_each(?))`, list)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	out := map[string][2]*api.RetryPolicy{}
	for rows.Next() {
		var id string
		var js [2]sql.NullString
		if err := rows.Scan(&id, &js[0], &js[1]); err != nil {
			return nil, classify(err)
		}
		var p [2]*api.RetryPolicy
		for i, j := range js {
			if j.Valid && j.String != "" && j.String != "null" {
				p[i] = new(api.RetryPolicy)
				if err := json.Unmarshal([]byte(j.String), p[i]); err != nil {
					return nil, fmt.Errorf("task %s retry policy: %w", id, err)
				}
			}
		}
		out[id] = p
	}
	return out, classify(rows.Err())
}

// endings collects the tasks a transaction brought to an end, for their
// dependents.
type endings struct {
	done, failed []ended
}

func (e *endings) add(id, suite, state string) {
	switch state {
	case api.TaskFinished:
		e.done = append(e.done, ended{id, suite, state})
	case api.TaskFailed, api.TaskCancelled:
		e.failed = append(e.failed, ended{id, suite, state})
	}
}

// scanEnds is scanMoves for rows of (suite_id, state, id), which also
// notes the tasks that ended.
func scanEnds(rows *sql.Rows, from string, counts tally, fin *endings) (int, error) {
	defer rows.Close()
	n := 0
	var suite, state, id string
	for rows.Next() {
		if err := rows.Scan(&suite, &state, &id); err != nil {
			return 0, classify(err)
		}
		counts.Move(suite, from, state, 1)
		fin.add(id, suite, state)
		n++
	}
	return n, classify(rows.Err())
}

// scanMoves reads the (suite_id, state) rows that an UPDATE ... RETURNING
// gives for the tasks it moved out of state from, tallies them, closes the
// rows, and returns how many there were.
func scanMoves(rows *sql.Rows, from string, counts tally) (int, error) {
	defer rows.Close()
	n := 0
	var suite, state string
	for rows.Next() {
		if err := rows.Scan(&suite, &state); err != nil {
			return 0, classify(err)
		}
		counts.Move(suite, from, state, 1)
		n++
	}
	return n, classify(rows.Err())
}

// appendJSON appends v as JSON.
func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// appendResult appends the JSON of a result as reported by nodeID.
func appendResult(b []byte, r api.TaskResult, nodeID string, now int64) ([]byte, error) {
	r.NodeID = nodeID
	if r.FinishedAt.IsZero() {
		r.FinishedAt = sqlrow.FromNanos(now)
	}
	b, err := appendJSON(b, r)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return b, nil
}

// ReturnTasks moves the node's Running tasks among ids back to Ready and
// takes back the attempt they were claimed with. The task keeps its NodeID.
func (s *Store) ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	idList, err := sqlrow.JSONArg(ids)
	if err != nil {
		return 0, fmt.Errorf("return %d tasks of node %s: %w", len(ids), nodeID, err)
	}
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', attempt = attempt - 1, updated_at = ?
		WHERE node_id = ? AND state = '`+api.TaskRunning+`' AND id IN (SELECT value FROM json_each(?))
		RETURNING suite_id, state`,
		s.now().UnixNano(), nodeID, idList)
	if err != nil {
		return 0, fmt.Errorf("return %d tasks of node %s: %w", len(ids), nodeID, err)
	}
	return n, nil
}

// ReclaimNode moves every task Running on the node back to Ready; their
// attempts stay counted and they keep the node as NodeID.
func (s *Store) ReclaimNode(ctx context.Context, nodeID string, keep ...string) (int, error) {
	if keep == nil {
		keep = []string{}
	}
	kept, err := json.Marshal(keep)
	if err != nil {
		return 0, err
	}
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = ?1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = ?2 AND state = '`+api.TaskRunning+`'
			AND id NOT IN (SELECT value FROM json_each(?3))
		RETURNING suite_id, state`,
		s.now().UnixNano(), nodeID, string(kept))
	if err != nil {
		return 0, fmt.Errorf("reclaim tasks of node %s: %w", nodeID, err)
	}
	return n, nil
}

// ReclaimSuiteTasks moves the suite's tasks Running on the node back to
// Ready, as ReclaimNode does.
func (s *Store) ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (int, error) {
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = ?1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = ?2 AND state = '`+api.TaskRunning+`' AND suite_id = ?3
		RETURNING suite_id, state`,
		s.now().UnixNano(), nodeID, suiteID)
	if err != nil {
		return 0, fmt.Errorf("reclaim tasks of suite %s on node %s: %w", suiteID, nodeID, err)
	}
	return n, nil
}

// ReattachTasks gives a node back the Ready tasks among ids that were
// reclaimed from it, at the attempt it runs.
func (s *Store) ReattachTasks(ctx context.Context, nodeID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	idList, err := sqlrow.JSONArg(ids)
	if err != nil {
		return 0, fmt.Errorf("reattach %d tasks to node %s: %w", len(ids), nodeID, err)
	}
	n, err := s.moveTasks(ctx, api.TaskReady, `UPDATE tasks SET state = '`+api.TaskRunning+`', node_id = ?1,
			reclaimed_from = '', updated_at = ?2
		WHERE id IN (SELECT value FROM json_each(?3)) AND state = '`+api.TaskReady+`'
			AND reclaimed_from = ?1 AND reclaimed_attempt = attempt
		RETURNING suite_id, state`,
		nodeID, s.now().UnixNano(), idList)
	if err != nil {
		return 0, fmt.Errorf("reattach %d tasks to node %s: %w", len(ids), nodeID, err)
	}
	return n, nil
}

// moveTasks runs an UPDATE ... RETURNING suite_id, state that moves tasks
// out of state from, counts them in their suites, and returns how many it
// moved. (States are written into queries, not bound, wherever a partial
// index of tasks in that state should serve them.)
func (s *Store) moveTasks(ctx context.Context, from, query string, args ...any) (int, error) {
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return classify(err)
		}
		counts := tally{}
		if n, err = scanMoves(rows, from, counts); err != nil {
			return err
		}
		return s.applyCounts(ctx, tx, counts)
	})
	return n, err
}

// CancelTask cancels a Pending, Ready or Running task, and the tasks that
// wait for it, and returns it as it was; any other state is
// errdefs.ErrConflict.
func (s *Store) CancelTask(ctx context.Context, id string) (store.Task, error) {
	var before store.Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if before, err = getTask(ctx, tx, id); err != nil {
			return err
		}
		if !slices.Contains([]string{api.TaskPending, api.TaskReady, api.TaskRunning}, before.State) {
			return errdefs.Conflict("task is %s", before.State)
		}
		_, err = tx.ExecContext(ctx, `UPDATE tasks SET state = ?, reason = 'cancelled by hand', updated_at = ? WHERE id = ?`,
			api.TaskCancelled, s.now().UnixNano(), id)
		if err != nil {
			return classify(err)
		}
		counts := tally{}
		counts.Move(before.SuiteID, before.State, api.TaskCancelled, 1)
		if _, err := s.settleDeps(ctx, tx, nil, []ended{{id, before.SuiteID, api.TaskCancelled}}, counts); err != nil {
			return err
		}
		return s.applyCounts(ctx, tx, counts)
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
	idList, err := sqlrow.JSONArg(ids)
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
	f.At = sqlrow.FromNanos(at)
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
	err := row.Scan(&t.seq, &t.ID, &t.SuiteID, &spec, &t.State, &t.Attempt, &t.NodeID, &result, &created, &updated, &t.Reason)
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
	t.Task.Seq = t.seq
	t.CreatedAt = sqlrow.FromNanos(created)
	t.UpdatedAt = sqlrow.FromNanos(updated)
	return t, nil
}
