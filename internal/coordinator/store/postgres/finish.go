package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// FinishAttempts applies a node's reports in one transaction; see
// store.Tasks. A report counts only while its task is Running on nodeID at
// its attempt, which the statements that apply it check on the task's row
// as they lock it, so a late or repeated report changes nothing, whichever
// replica applies it.
//
// Successes and stops are applied together by one statement that joins the
// batch, sent as arrays, with the tasks it names. Failures lock the tasks
// they hold first, then record the failures in one statement; the retry
// policy sees each failed task's failures, and one more statement moves
// the failed tasks on. Only the first of several reports of the same
// attempt can count, so the others are dropped first.
//
// The store fills in what only it can vouch for: a result's NodeID is
// nodeID, a zero FinishedAt or failure time is now, and a failure's Attempt
// and NodeID are the report's. A failed report without a Failure is
// recorded from its Result. A task that ends Failed keeps the last attempt's
// result; one that is retried keeps none from it but the failure. retry
// runs inside the transaction and must not call the store; it runs again
// if PostgreSQL aborts the transaction to break a deadlock.
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
	ends, failures, err := splitReports(reports, nodeID, now)
	if err != nil {
		return store.Finished{}, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	var out store.Finished
	err = s.write(ctx, func(tx pgx.Tx) error {
		out = store.Finished{}
		counts := tally{}
		var fin endings
		if len(ends.ids) > 0 {
			n, err := finishEnds(ctx, tx, nodeID, ends, now, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
			if n < ends.successes { // some may be late: a lost attempt finishing
				if out.Superseded, n, err = finishLate(ctx, tx, nodeID, ends, now, counts, &fin); err != nil {
					return err
				}
				out.Applied += n
			}
		}
		if len(failures) > 0 {
			n, err := finishFailures(ctx, tx, nodeID, failures, retry, now, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
		}
		released, err := settleDeps(ctx, tx, fin.done, fin.failed, counts, now)
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

// endBatch is the successes and stops of a batch, as columns.
type endBatch struct {
	ids       []string
	attempts  []int32
	states    []string  // Finished or Ready
	results   []*string // JSON; nil for a stop, which keeps the task's result
	successes int
}

// splitReports drops repeated reports of an attempt, keeping the first, and
// returns the successes and stops as columns, and the failures in order.
func splitReports(reports []store.Attempt, nodeID string, now int64) (endBatch, []store.Attempt, error) {
	type attempt struct {
		task string
		n    int
	}
	var ends endBatch
	var failures []store.Attempt
	seen := make(map[attempt]bool, len(reports))
	for _, r := range reports {
		if seen[attempt{r.TaskID, r.Attempt}] {
			continue
		}
		seen[attempt{r.TaskID, r.Attempt}] = true
		switch r.Outcome {
		case api.OutcomeFailed:
			failures = append(failures, r)
			continue
		case api.OutcomeSucceeded:
			result, err := resultJSON(r.Result, nodeID, now)
			if err != nil {
				return endBatch{}, nil, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, err)
			}
			ends.states, ends.results = append(ends.states, api.TaskFinished), append(ends.results, &result)
			ends.successes++
		default:
			ends.states, ends.results = append(ends.states, api.TaskReady), append(ends.results, nil)
		}
		ends.ids, ends.attempts = append(ends.ids, r.TaskID), append(ends.attempts, int32(r.Attempt))
	}
	return ends, failures, nil
}

// resultJSON is the JSON of a result as reported by nodeID.
func resultJSON(r api.TaskResult, nodeID string, now int64) (string, error) {
	r.NodeID = nodeID
	if r.FinishedAt.IsZero() {
		r.FinishedAt = sqlrow.FromNanos(now)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("result: %w", err)
	}
	return string(b), nil
}

// finishEnds applies successes and stops and returns how many counted.
func finishEnds(ctx context.Context, tx pgx.Tx, nodeID string, ends endBatch, now int64, counts tally, fin *endings) (int, error) {
	rows, err := tx.Query(ctx, `UPDATE tasks SET state = r.state, result = COALESCE(r.result, tasks.result), updated_at = $1
		FROM unnest($2::text[], $3::int[], $4::text[], $5::text[]) AS r(id, attempt, state, result)
		WHERE tasks.id = r.id AND tasks.attempt = r.attempt
			AND tasks.state = '`+api.TaskRunning+`' AND tasks.node_id = $6
		RETURNING tasks.suite_id, tasks.state, tasks.id`,
		planned, now, ends.ids, ends.attempts, ends.states, ends.results, nodeID)
	if err != nil {
		return 0, err
	}
	return scanEnds(rows, api.TaskRunning, counts, fin)
}

// finishLate applies the successes of attempts the node lost when it was
// declared offline (first completion wins), and returns the re-runs they
// supersede. The tasks are locked as they are read, so that a claim or a
// report elsewhere cannot move one between the read and the write. Rare: a
// node cut off, not dead, so it goes task by task.
func finishLate(ctx context.Context, tx pgx.Tx, nodeID string, ends endBatch, now int64, counts tally, fin *endings) ([]store.Superseded, int, error) {
	rows, err := tx.Query(ctx, `SELECT tasks.id, tasks.suite_id, tasks.state, tasks.node_id, tasks.attempt, r.result
		FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS r(id, attempt, state, result)
		JOIN tasks ON tasks.id = r.id
		WHERE r.state = '`+api.TaskFinished+`'
			AND tasks.reclaimed_from = $5 AND tasks.reclaimed_attempt = r.attempt
			AND tasks.state IN ('`+api.TaskReady+`', '`+api.TaskRunning+`')
		ORDER BY tasks.id
		FOR UPDATE OF tasks`,
		planned, ends.ids, ends.attempts, ends.states, ends.results, nodeID)
	if err != nil {
		return nil, 0, err
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
			return nil, 0, err
		}
		found = append(found, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var superseded []store.Superseded
	for _, l := range found {
		_, err := tx.Exec(ctx, `UPDATE tasks SET state = $1, result = $2, node_id = $3, reclaimed_from = '', updated_at = $4 WHERE id = $5`,
			api.TaskFinished, l.result, nodeID, now, l.id)
		if err != nil {
			return nil, 0, err
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
func finishFailures(ctx context.Context, tx pgx.Tx, nodeID string, reports []store.Attempt, retry store.RetryPolicy, now int64, counts tally, fin *endings) (int, error) {
	held, err := lockHeld(ctx, tx, nodeID, reports)
	if err != nil || len(held) == 0 {
		return 0, err
	}
	if err := recordFailures(ctx, tx, nodeID, held, now); err != nil {
		return 0, err
	}
	tasks := make([]store.Task, len(held))
	for i, r := range held {
		tasks[i] = store.Task{ID: r.TaskID, Attempt: r.Attempt}
	}
	var policies map[string][2]*api.RetryPolicy
	if retry != nil {
		if err := addFailures(ctx, tx, tasks, 1); err != nil {
			return 0, err
		}
		if policies, err = retryPolicies(ctx, tx, tasks); err != nil {
			return 0, err
		}
	}
	var ids, states []string
	var results []*string
	var notBefore []int64
	for i, t := range tasks {
		giveUp, wait := false, time.Duration(0)
		if retry != nil {
			p := policies[t.ID]
			giveUp, wait = retry(p[0], p[1], t.Failures)
		}
		var result *string
		state := api.TaskReady
		if giveUp {
			r, err := resultJSON(held[i].Result, nodeID, now)
			if err != nil {
				return 0, fmt.Errorf("task %s attempt %d: %w", t.ID, t.Attempt, err)
			}
			state, result = api.TaskFailed, &r
		}
		ids, states, results = append(ids, t.ID), append(states, state), append(results, result)
		notBefore = append(notBefore, now+max(0, wait.Nanoseconds()))
	}
	rows, err := tx.Query(ctx, `UPDATE tasks SET state = r.state, result = r.result, not_before = r.not_before, updated_at = $1
		FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS r(id, state, result, not_before)
		WHERE tasks.id = r.id
		RETURNING tasks.suite_id, tasks.state, tasks.id`,
		planned, now, ids, states, results, notBefore)
	if err != nil {
		return 0, err
	}
	return scanEnds(rows, api.TaskRunning, counts, fin)
}

// lockHeld locks the tasks that the failed reports' attempts hold (Running
// on the node at that attempt) and returns those reports, in order.
func lockHeld(ctx context.Context, tx pgx.Tx, nodeID string, reports []store.Attempt) ([]store.Attempt, error) {
	ids := make([]string, len(reports))
	attempts := make([]int32, len(reports))
	for i, r := range reports {
		ids[i], attempts[i] = r.TaskID, int32(r.Attempt)
	}
	rows, err := tx.Query(ctx, `SELECT tasks.id FROM tasks
		JOIN unnest($1::text[], $2::int[]) AS r(id, attempt) ON tasks.id = r.id AND tasks.attempt = r.attempt
		WHERE tasks.state = '`+api.TaskRunning+`' AND tasks.node_id = $3
		ORDER BY tasks.id
		FOR UPDATE OF tasks`, planned, ids, attempts, nodeID)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	holds := make(map[string]bool, len(got))
	for _, id := range got {
		holds[id] = true
	}
	var held []store.Attempt
	for _, r := range reports {
		if holds[r.TaskID] {
			held = append(held, r)
		}
	}
	return held, nil
}

// recordFailures stores one failure row per held report. A report without
// a Failure is recorded from its Result.
func recordFailures(ctx context.Context, tx pgx.Tx, nodeID string, held []store.Attempt, now int64) error {
	n := len(held)
	ids, signals := make([]string, n), make([]string, n)
	attempts, codes := make([]int32, n), make([]int32, n)
	reasons, stdouts, stderrs := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	ats := make([]int64, n)
	for i, r := range held {
		f := api.TaskFailure{ExitCode: r.Result.ExitCode, Signal: r.Result.Signal, Stdout: r.Result.Stdout, Stderr: r.Result.Stderr}
		if r.Failure != nil {
			f = *r.Failure
		}
		ids[i], attempts[i], codes[i], signals[i] = r.TaskID, int32(r.Attempt), int32(f.ExitCode), f.Signal
		reasons[i], stdouts[i], stderrs[i] = []byte(f.Reason), []byte(f.Stdout), []byte(f.Stderr)
		ats[i] = sqlrow.OrNanos(f.At, now)
	}
	_, err := tx.Exec(ctx, `INSERT INTO task_failures (task_id, attempt, node_id, exit_code, signal, reason, stdout, stderr, at)
		SELECT f.id, f.attempt, $1, f.code, f.signal, f.reason, f.stdout, f.stderr, f.at
		FROM unnest($2::text[], $3::int[], $4::int[], $5::text[], $6::bytea[], $7::bytea[], $8::bytea[], $9::bigint[])
			AS f(id, attempt, code, signal, reason, stdout, stderr, at)`,
		nodeID, ids, attempts, codes, signals, reasons, stdouts, stderrs, ats)
	return err
}

// retryPolicies reads the retry policies of the suites and of the tasks,
// by task ID: [suite's, task's], either nil.
func retryPolicies(ctx context.Context, tx pgx.Tx, tasks []store.Task) (map[string][2]*api.RetryPolicy, error) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	rows, err := tx.Query(ctx, `SELECT tasks.id, (`+asJSON("suites.spec")+` -> 'retry')::text, (`+asJSON("tasks.spec")+` -> 'retry')::text
		FROM tasks JOIN suites ON suites.id = tasks.suite_id
		WHERE tasks.id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][2]*api.RetryPolicy{}
	for rows.Next() {
		var id string
		var js [2]*string
		if err := rows.Scan(&id, &js[0], &js[1]); err != nil {
			return nil, err
		}
		var p [2]*api.RetryPolicy
		for i, j := range js {
			if j != nil && *j != "" && *j != "null" {
				p[i] = new(api.RetryPolicy)
				if err := json.Unmarshal([]byte(*j), p[i]); err != nil {
					return nil, fmt.Errorf("task %s retry policy: %w", id, err)
				}
			}
		}
		out[id] = p
	}
	return out, rows.Err()
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
func scanEnds(rows pgx.Rows, from string, counts tally, fin *endings) (int, error) {
	defer rows.Close()
	n := 0
	var suite, state, id string
	for rows.Next() {
		if err := rows.Scan(&suite, &state, &id); err != nil {
			return 0, err
		}
		counts.Move(suite, from, state, 1)
		fin.add(id, suite, state)
		n++
	}
	return n, rows.Err()
}
