package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// reports is a node's batch of reports as SQLite applies them (see
// sqlstore.FinishAttempts): the successes and stops as one JSON array,
// which one statement joins with the tasks it names; each failure is
// recorded with a statement of its own, since its texts are kept byte for
// byte, and one more statement moves their tasks on. The JSON is made
// before the writer is taken.
type reports struct {
	batch sqlstore.Batch
	s     *Store
	ends  []byte // [[task ID, attempt, new state, result or null], ...]
}

func (d driver) Reports(batch sqlstore.Batch) (sqlstore.Reports, error) {
	b := &reports{batch: batch, s: d.s}
	if len(batch.Ends) == 0 {
		return b, nil
	}
	b.ends = append(make([]byte, 0, 128*len(batch.Ends)), '[')
	for i, r := range batch.Ends {
		if i > 0 {
			b.ends = append(b.ends, ',')
		}
		var err error
		if b.ends, err = appendJSON(append(b.ends, '['), r.TaskID); err != nil {
			return nil, err
		}
		b.ends = strconv.AppendInt(append(b.ends, ','), int64(r.Attempt), 10)
		if r.Outcome == api.OutcomeSucceeded {
			result, err := sqlstore.ResultJSON(r.Result, batch.NodeID, batch.Now)
			if err != nil {
				return nil, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, err)
			}
			b.ends = append(append(b.ends, `,"`+api.TaskFinished+`",`...), result...)
		} else {
			b.ends = append(b.ends, `,"`+api.TaskReady+`",null`...)
		}
		b.ends = append(b.ends, ']')
	}
	b.ends = append(b.ends, ']')
	return b, nil
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

func (b *reports) Ends(ctx context.Context, q sqlstore.Querier, counts tally, fin *sqlstore.Endings) (int, error) {
	stmt, err := b.s.stmt(ctx, txOf(q), finishEnds)
	if err != nil {
		return 0, err
	}
	rows, err := stmt.QueryContext(ctx, b.batch.Now, b.ends, b.batch.NodeID)
	if err != nil {
		return 0, classify(err)
	}
	n, err := sqlstore.ScanEnds(sqlRows{rows}, api.TaskRunning, counts, fin)
	return n, classify(err)
}

// lostAttempts finds the successes in a finishEnds batch that finish an
// attempt the node lost when it was declared offline, with the task as it
// is now: Ready again, or Running its re-run elsewhere.
const lostAttempts = `SELECT tasks.id, tasks.suite_id, tasks.state, tasks.node_id, tasks.attempt, r.value ->> 3
	FROM jsonb_each(?1) AS r JOIN tasks ON tasks.id = r.value ->> 0
	WHERE r.value ->> 2 = '` + api.TaskFinished + `'
		AND tasks.reclaimed_from = ?2 AND tasks.reclaimed_attempt = r.value ->> 1
		AND tasks.state IN ('` + api.TaskReady + `', '` + api.TaskRunning + `')`

func (b *reports) Late(ctx context.Context, q sqlstore.Querier, counts tally, fin *sqlstore.Endings) ([]store.Superseded, int, error) {
	rows, err := txOf(q).QueryContext(ctx, lostAttempts, b.ends, b.batch.NodeID)
	if err != nil {
		return nil, 0, classify(err)
	}
	superseded, n, err := sqlstore.FinishLate(ctx, q, b.batch.NodeID, sqlRows{rows}, b.batch.Now, counts, fin)
	return superseded, n, classify(err)
}

func (b *reports) Failures(ctx context.Context, q sqlstore.Querier, decide func([]store.Attempt) ([]sqlstore.Retry, error), counts tally, fin *sqlstore.Endings) (int, error) {
	tx := txOf(q)
	record, err := b.s.stmt(ctx, tx, recordFailure)
	if err != nil {
		return 0, err
	}
	var held []store.Attempt // the reports whose failure counted
	for _, r := range b.batch.Failures {
		f := sqlstore.FailureOf(r)
		res, err := record.ExecContext(ctx, f.ExitCode, f.Signal, f.Reason, f.Stdout, f.Stderr, sqlrow.OrNanos(f.At, b.batch.Now),
			r.TaskID, r.Attempt, b.batch.NodeID)
		if err != nil {
			return 0, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, classify(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return 0, err
			}
			continue
		}
		held = append(held, r)
	}
	if len(held) == 0 {
		return 0, nil
	}
	retries, err := decide(held)
	if err != nil {
		return 0, err
	}
	// [task ID, new state, result or null, not before]
	next := append(make([]byte, 0, 64*len(retries)), '[')
	for i, r := range retries {
		if i > 0 {
			next = append(next, ',')
		}
		if next, err = appendJSON(append(next, '['), r.ID); err != nil {
			return 0, err
		}
		next = append(append(next, ',', '"'), r.State...)
		if r.Result != nil {
			next = append(append(next, '"', ','), r.Result...)
		} else {
			next = append(next, `",null`...)
		}
		next = strconv.AppendInt(append(next, ','), r.NotBefore, 10)
		next = append(next, ']')
	}
	next = append(next, ']')
	stmt, err := b.s.stmt(ctx, tx, afterFailures)
	if err != nil {
		return 0, err
	}
	rows, err := stmt.QueryContext(ctx, b.batch.Now, next)
	if err != nil {
		return 0, classify(err)
	}
	n, err := sqlstore.ScanEnds(sqlRows{rows}, api.TaskRunning, counts, fin)
	return n, classify(err)
}

// appendJSON appends v as JSON.
func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}
