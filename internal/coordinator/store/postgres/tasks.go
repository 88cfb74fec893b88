package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const taskColumns = `tasks.seq, tasks.id, tasks.suite_id, tasks.spec, tasks.state, tasks.attempt, tasks.node_id,
	tasks.result, tasks.created_at, tasks.updated_at, tasks.reason`

// AddTasks adds tasks to an Open suite in one transaction: all or none. New
// tasks are Ready, or Pending when they wait for others, whatever their
// State says; a zero CreatedAt means now. The suite's row stays locked
// until the tasks commit, so the suite cannot close under them.
func (s *Store) AddTasks(ctx context.Context, suiteID string, tasks []store.Task) error {
	batch, err := newTaskBatch(tasks)
	if err != nil {
		return fmt.Errorf("add tasks to suite %s: %w", suiteID, err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM suites WHERE id = $1 FOR NO KEY UPDATE`, suiteID).Scan(&state)
		if noRows(err) {
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
		now := s.now()
		if err := batch.insert(ctx, tx, suiteID, now); err != nil {
			return err
		}
		counts := tally{}
		for _, st := range batch.states {
			counts.Move(suiteID, "", st, 1)
		}
		if err := addDeps(ctx, tx, suiteID, batch, counts, now.UnixNano()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE suites SET last_task_at = $1 WHERE id = $2`, now.UnixNano(), suiteID); err != nil {
			return err
		}
		return s.applyCounts(ctx, tx, counts)
	})
	if err != nil {
		return fmt.Errorf("add %d tasks to suite %s: %w", len(tasks), suiteID, err)
	}
	return nil
}

// taskBatch is new tasks as columns, made before the transaction.
type taskBatch struct {
	ids, specs, states, names []string
	priorities, waiting       []int32
	created                   []int64 // 0: now
	after                     map[string][]string
}

func newTaskBatch(tasks []store.Task) (*taskBatch, error) {
	b := &taskBatch{after: map[string][]string{}}
	for i, t := range tasks {
		if t.ID == "" {
			return nil, errdefs.Field(fmt.Sprintf("tasks[%d].id", i), "required")
		}
		after := slices.Compact(slices.Sorted(slices.Values(t.After)))
		state := api.TaskReady
		if len(after) > 0 {
			state = api.TaskPending
			b.after[t.ID] = after
		}
		spec, err := json.Marshal(t.Spec)
		if err != nil {
			return nil, fmt.Errorf("task %s spec: %w", t.ID, err)
		}
		b.ids = append(b.ids, t.ID)
		b.specs = append(b.specs, string(spec))
		b.states = append(b.states, state)
		b.names = append(b.names, t.Spec.Name)
		b.priorities = append(b.priorities, int32(t.Spec.Priority))
		b.waiting = append(b.waiting, int32(len(after)))
		b.created = append(b.created, sqlrow.ZeroNano(t.CreatedAt))
	}
	return b, nil
}

// insert stores the batch in one statement, in order: seq is the order
// tasks were added in.
func (b *taskBatch) insert(ctx context.Context, tx pgx.Tx, suiteID string, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO tasks (id, suite_id, spec, priority, state, created_at, updated_at, name, waiting)
		SELECT t.id, $1, t.spec, t.priority, t.state, CASE WHEN t.created = 0 THEN $2 ELSE t.created END, $2, t.name, t.waiting
		FROM unnest($3::text[], $4::text[], $5::int[], $6::text[], $7::bigint[], $8::text[], $9::int[])
			WITH ORDINALITY AS t(id, spec, priority, state, created, name, waiting, ord)
		ORDER BY t.ord`,
		suiteID, now.UnixNano(), b.ids, b.specs, b.priorities, b.states, b.created, b.names, b.waiting)
	if isUnique(err) {
		if constraint(err) == "tasks_name" {
			return errdefs.Conflict("a task name is taken in the suite (%s)", detail(err))
		}
		return errdefs.Conflict("a task id is taken (%s)", detail(err))
	}
	return err
}

// GetTask returns a task with its failures.
func (s *Store) GetTask(ctx context.Context, id string) (store.Task, error) {
	var t store.Task
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		t, err = getTask(ctx, tx, id, "")
		return err
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("get task %s: %w", id, err)
	}
	return t, nil
}

// getTask reads a task with its failures and dependencies; lock is "" or
// a locking clause for the task's row.
func getTask(ctx context.Context, tx pgx.Tx, id, lock string) (store.Task, error) {
	t, err := scanTask(tx.QueryRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 `+lock, id))
	if err != nil {
		return store.Task{}, err
	}
	tasks := []store.Task{t}
	if err := addFailures(ctx, tx, tasks, 1); err != nil {
		return store.Task{}, err
	}
	if err := readAfter(ctx, tx, tasks); err != nil {
		return store.Task{}, err
	}
	return tasks[0], nil
}

// ListTasks lists the tasks that match f in the order they were added. A
// suite that does not exist is errdefs.ErrNotFound.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var out []store.Task
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = listTasks(ctx, tx, f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

func listTasks(ctx context.Context, tx pgx.Tx, f store.TaskFilter) ([]store.Task, error) {
	var where []string
	var a args
	if f.SuiteID != "" {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM suites WHERE id = $1`, f.SuiteID).Scan(&one)
		if noRows(err) {
			return nil, errdefs.NotFound("suite %s", f.SuiteID)
		}
		if err != nil {
			return nil, err
		}
		where = append(where, `suite_id = `+a.add(f.SuiteID))
	}
	if len(f.States) > 0 {
		where = append(where, stateIn(f.States, &a))
	}
	if f.NodeID != "" {
		where = append(where, `node_id = `+a.add(f.NodeID))
	}
	if f.Name != "" {
		where = append(where, `name = `+a.add(f.Name))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		where = append(where, `(`+asJSON("spec")+` -> 'labels' ->> `+a.add(k)+`) = `+a.add(f.Labels[k]))
	}
	if f.After != "" {
		var after int64
		if err := store.DecodeCursor(f.After, &after); err != nil {
			return nil, err
		}
		where = append(where, `seq > `+a.add(after))
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := tx.Query(ctx, q+` ORDER BY seq`+a.limit(f.Page), a...)
	if err != nil {
		return nil, err
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
	return tasks, nil
}

// stateIn is the condition that a task is in one of states. Known states
// are written into the query, not bound, so that the planner can use the
// partial index of tasks in that state (tasks_failed, tasks_ready) with
// any plan, generic ones included.
func stateIn(states []string, a *args) string {
	var known []string
	for _, st := range states {
		if !validTaskState(st) {
			return `state = ANY(` + a.add(states) + `)`
		}
		known = append(known, `'`+st+`'`)
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

// claimTasks claims the first Ready tasks of a suite, in dispatch order off
// the tasks_ready index. FOR UPDATE SKIP LOCKED passes over the tasks that
// a concurrent claim (another replica's, say) is taking, instead of waiting
// for it; and the update moves a task only at the attempt it was picked at,
// still Ready, so no attempt of a task is ever handed out twice.
//
// The update compares state with picked's, not with the literal 'Ready':
// a literal lets the planner drive the update from the tasks_ready index,
// which it does when the statistics were taken while few tasks were Ready
// (at the end of a suite, say), and then every claim walks all the Ready
// tasks of every suite (180 ms for 15,000 instead of 1 ms).
// TestClaimPlanIgnoresStaleStatistics pins it.
const claimTasks = `WITH picked AS (
		SELECT seq, attempt, state FROM tasks
		WHERE suite_id = $3 AND state = '` + api.TaskReady + `' AND not_before <= $2
		ORDER BY priority DESC, seq
		LIMIT $4
		FOR UPDATE SKIP LOCKED)
	UPDATE tasks SET state = '` + api.TaskRunning + `', attempt = tasks.attempt + 1, node_id = $1, updated_at = $2
	FROM picked
	WHERE tasks.seq = picked.seq AND tasks.attempt = picked.attempt AND tasks.state = picked.state
	RETURNING ` + taskColumns

// pickTasks runs claimTasks in one round trip with the settings it needs,
// and returns what it claimed:
//
//   - synchronous_commit off, for the rest of the transaction: the claim
//     commits without waiting for its WAL to reach the disk. A claim's
//     commit is the one write per prefetch batch that would otherwise wait
//     a flush (about 2 ms here), which halves the dispatch rate. It is the
//     guarantee the SQLite store gives every commit (synchronous=NORMAL): a
//     claim is lost only if the database's machine or server crashes
//     within a few hundred milliseconds (3 × wal_writer_delay), never
//     half-applied, and never once a later commit has been flushed, since
//     the WAL is flushed in order. A lost claim leaves its tasks Ready, to
//     run again: at least once, as after a node's crash. Results still wait
//     for the flush, so a reported result is never lost.
//   - enable_sort off, for the claim statement alone: the pick must walk
//     tasks_ready in its order. With statistics taken before the suite
//     existed (any new suite, until the next ANALYZE), the planner reckons
//     the suite has one task and would read all of them through
//     tasks_suite and sort them, on every claim. The statements after it
//     need their sorts back (the counts' upsert takes 30 ms without).
//     TestClaimPlanIgnoresStaleStatistics pins the plan.
//
// The batch starts with the claim's authorization (sqlrow.ClaimAuth), so
// checking costs no round trip of its own. A refused claim returns an
// error before its tasks are read, and the caller's transaction rolls the
// UPDATE back: its effect never commits.
func pickTasks(ctx context.Context, tx pgx.Tx, nodeID string, now int64, suiteID string, max int) ([]store.Task, error) {
	b := &pgx.Batch{}
	b.Queue(claimAuth, suiteID, nodeID)
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true), set_config('enable_sort', 'off', true)`)
	b.Queue(claimTasks, nodeID, now, suiteID, max)
	b.Queue(`SET LOCAL enable_sort TO DEFAULT`)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if err := authorizeClaim(br.QueryRow(), suiteID, nodeID); err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	claimed, err := scanTasks(rows)
	if err != nil {
		return nil, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return claimed, br.Close()
}

// claimAuth reads what decides whether the node may claim the suite's
// tasks; see sqlrow.ClaimAuth.
var claimAuth = fmt.Sprintf(sqlrow.ClaimAuth, "(s.spec::jsonb -> 'tags')::text", "$1", "$2")

// authorizeClaim checks the row of claimAuth: whatever the server's caches
// say, a node outside the suite's group, tags or assignment claims nothing.
func authorizeClaim(row pgx.Row, suiteID, nodeID string) error {
	return sqlrow.AuthorizeClaim(suiteID, nodeID, func(dest ...any) error {
		err := row.Scan(dest...)
		if noRows(err) {
			return errdefs.ErrNotFound
		}
		return err
	})
}

// ClaimTasks moves up to max Ready tasks of the suite to Running on the
// node, and returns them highest priority first, then oldest. Concurrent
// claims, from this store or another on the same database, take disjoint
// tasks without waiting for each other; a claim may then return fewer than
// max while others hold the rest. A suite that does not exist is
// errdefs.ErrNotFound, a node that may not run its tasks
// errdefs.ErrPermission, checked in the claim's transaction, and even when
// max <= 0 (which claims nothing).
func (s *Store) ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]store.Task, error) {
	if max <= 0 {
		err := s.read(ctx, func(tx pgx.Tx) error {
			return authorizeClaim(tx.QueryRow(ctx, claimAuth, suiteID, nodeID), suiteID, nodeID)
		})
		if err != nil {
			return nil, fmt.Errorf("claim tasks of suite %s for node %s: %w", suiteID, nodeID, err)
		}
		return []store.Task{}, nil
	}
	var claimed []store.Task
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		if claimed, err = pickTasks(ctx, tx, nodeID, s.now().UnixNano(), suiteID, max); err != nil || len(claimed) == 0 {
			return err
		}
		counts := tally{}
		counts.Move(suiteID, api.TaskReady, api.TaskRunning, len(claimed))
		// Only a task claimed before can have failed before.
		if err := addFailures(ctx, tx, claimed, 2); err != nil {
			return err
		}
		if err := readAfter(ctx, tx, claimed); err != nil {
			return err
		}
		// Last, so the counts row is held for as short a time as can be.
		return s.applyCounts(ctx, tx, counts)
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d tasks of suite %s for node %s: %w", max, suiteID, nodeID, err)
	}
	// RETURNING comes in no promised order.
	slices.SortFunc(claimed, func(a, b store.Task) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), cmp.Compare(a.Seq, b.Seq))
	})
	return claimed, nil
}

// ReturnTasks moves the node's Running tasks among ids back to Ready and
// takes back the attempt they were claimed with. The task keeps its NodeID.
func (s *Store) ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', attempt = attempt - 1, updated_at = $1
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND id = ANY($3)
		RETURNING suite_id, state`,
		planned, s.now().UnixNano(), nodeID, ids)
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
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = $1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND NOT (id = ANY($3))
		RETURNING suite_id, state`,
		s.now().UnixNano(), nodeID, keep)
	if err != nil {
		return 0, fmt.Errorf("reclaim tasks of node %s: %w", nodeID, err)
	}
	return n, nil
}

// ReclaimSuiteTasks moves the suite's tasks Running on the node back to
// Ready, as ReclaimNode does.
func (s *Store) ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (int, error) {
	n, err := s.moveTasks(ctx, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = $1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND suite_id = $3
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
	n, err := s.moveTasks(ctx, api.TaskReady, `UPDATE tasks SET state = '`+api.TaskRunning+`', node_id = $1,
			reclaimed_from = '', updated_at = $2
		WHERE id = ANY($3) AND state = '`+api.TaskReady+`'
			AND reclaimed_from = $1 AND reclaimed_attempt = attempt
		RETURNING suite_id, state`,
		planned, nodeID, s.now().UnixNano(), ids)
	if err != nil {
		return 0, fmt.Errorf("reattach %d tasks to node %s: %w", len(ids), nodeID, err)
	}
	return n, nil
}

// moveTasks runs an UPDATE ... RETURNING suite_id, state that moves tasks
// out of state from, counts them in their suites, and returns how many it
// moved. The UPDATE checks its conditions on each row as it locks it, so
// a task another transaction moved meanwhile is left alone.
func (s *Store) moveTasks(ctx context.Context, from, query string, a ...any) (int, error) {
	var n int
	err := s.write(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, a...)
		if err != nil {
			return err
		}
		counts := tally{}
		if n, err = scanMoves(rows, from, counts); err != nil {
			return err
		}
		return s.applyCounts(ctx, tx, counts)
	})
	return n, err
}

// scanMoves reads the (suite_id, state) rows that an UPDATE ... RETURNING
// gives for the tasks it moved out of state from, tallies them, closes the
// rows, and returns how many there were.
func scanMoves(rows pgx.Rows, from string, counts tally) (int, error) {
	defer rows.Close()
	n := 0
	var suite, state string
	for rows.Next() {
		if err := rows.Scan(&suite, &state); err != nil {
			return 0, err
		}
		counts.Move(suite, from, state, 1)
		n++
	}
	return n, rows.Err()
}

// CancelTask cancels a Pending, Ready or Running task, and the tasks that
// wait for it, and returns it as it was; any other state is
// errdefs.ErrConflict.
func (s *Store) CancelTask(ctx context.Context, id string) (store.Task, error) {
	var before store.Task
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		if before, err = getTask(ctx, tx, id, "FOR UPDATE"); err != nil {
			return err
		}
		if !slices.Contains([]string{api.TaskPending, api.TaskReady, api.TaskRunning}, before.State) {
			return errdefs.Conflict("task is %s", before.State)
		}
		now := s.now().UnixNano()
		_, err = tx.Exec(ctx, `UPDATE tasks SET state = $1, reason = 'cancelled by hand', updated_at = $2 WHERE id = $3`,
			api.TaskCancelled, now, id)
		if err != nil {
			return err
		}
		counts := tally{}
		counts.Move(before.SuiteID, before.State, api.TaskCancelled, 1)
		if _, err := settleDeps(ctx, tx, nil, []ended{{id, before.SuiteID, api.TaskCancelled}}, counts, now); err != nil {
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
func addFailures(ctx context.Context, q querier, tasks []store.Task, minAttempt int) error {
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
	rows, err := q.Query(ctx, `SELECT task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at
		FROM task_failures WHERE task_id = ANY($1) ORDER BY task_id, attempt`, ids)
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

func scanFailure(row scanner) (taskID string, f api.TaskFailure, err error) {
	var at int64
	var reason, stdout, stderr []byte
	if err := row.Scan(&taskID, &f.Attempt, &f.NodeID, &f.ExitCode, &f.Signal, &reason, &stdout, &stderr, &at); err != nil {
		return "", api.TaskFailure{}, err
	}
	f.Reason, f.Stdout, f.Stderr = string(reason), string(stdout), string(stderr)
	f.At = sqlrow.FromNanos(at)
	return taskID, f, nil
}

// scanTasks reads rows of taskColumns and closes them.
func scanTasks(rows pgx.Rows) ([]store.Task, error) {
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

// scanTask reads a row of taskColumns; Failures stay nil. A missing row is
// errdefs.ErrNotFound.
func scanTask(row scanner) (store.Task, error) {
	var (
		t                store.Task
		spec             string
		result           *string
		created, updated int64
	)
	err := row.Scan(&t.Seq, &t.ID, &t.SuiteID, &spec, &t.State, &t.Attempt, &t.NodeID, &result, &created, &updated, &t.Reason)
	if noRows(err) {
		return store.Task{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Task{}, err
	}
	if err := json.Unmarshal([]byte(spec), &t.Spec); err != nil {
		return store.Task{}, fmt.Errorf("task %s spec: %w", t.ID, err)
	}
	if result != nil {
		t.Result = new(api.TaskResult)
		if err := json.Unmarshal([]byte(*result), t.Result); err != nil {
			return store.Task{}, fmt.Errorf("task %s result: %w", t.ID, err)
		}
	}
	t.CreatedAt = sqlrow.FromNanos(created)
	t.UpdatedAt = sqlrow.FromNanos(updated)
	return t, nil
}
