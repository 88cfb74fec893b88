package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// PostgreSQL sends the successes and stops of sqlstore.FinishAttempts's
// batch as columns, which one statement joins with the tasks they name;
// the failures lock the tasks they hold first, then go in with one
// statement, and one more moves their tasks on.
type reports struct {
	batch sqlstore.Batch
	ends  endBatch
}

// endBatch is the successes and stops of a batch, as columns.
type endBatch struct {
	ids      []string
	attempts []int32
	states   []string  // Finished or Ready
	results  []*string // JSON; nil for a stop, which keeps the task's result
}

func (d driver) Reports(batch sqlstore.Batch) (sqlstore.Reports, error) {
	b := &reports{batch: batch}
	e := &b.ends
	for _, r := range batch.Ends {
		state, result := api.TaskReady, (*string)(nil)
		if r.Outcome == api.OutcomeSucceeded {
			j, err := sqlstore.ResultJSON(r.Result, batch.NodeID, batch.Now)
			if err != nil {
				return nil, fmt.Errorf("task %s attempt %d: %w", r.TaskID, r.Attempt, err)
			}
			state, result = api.TaskFinished, new(string(j))
		}
		e.ids, e.attempts = append(e.ids, r.TaskID), append(e.attempts, int32(r.Attempt))
		e.states, e.results = append(e.states, state), append(e.results, result)
	}
	return b, nil
}

func (b *reports) Ends(ctx context.Context, q sqlstore.Querier, counts tally, fin *sqlstore.Endings) (int, error) {
	rows, err := txOf(q).Query(ctx, `UPDATE tasks SET state = r.state, result = COALESCE(r.result, tasks.result), updated_at = $1
		FROM unnest($2::text[], $3::int[], $4::text[], $5::text[]) AS r(id, attempt, state, result)
		WHERE tasks.id = r.id AND tasks.attempt = r.attempt
			AND tasks.state = '`+api.TaskRunning+`' AND tasks.node_id = $6
		RETURNING tasks.suite_id, tasks.state, tasks.id`,
		planned, b.batch.Now, b.ends.ids, b.ends.attempts, b.ends.states, b.ends.results, b.batch.NodeID)
	if err != nil {
		return 0, err
	}
	return sqlstore.ScanEnds(rows, api.TaskRunning, counts, fin)
}

// Late locks the tasks as it reads them, so that a claim or a report
// elsewhere cannot move one between the read and the write.
func (b *reports) Late(ctx context.Context, q sqlstore.Querier, counts tally, fin *sqlstore.Endings) ([]store.Superseded, int, error) {
	rows, err := txOf(q).Query(ctx, `SELECT tasks.id, tasks.suite_id, tasks.state, tasks.node_id, tasks.attempt, r.result
		FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS r(id, attempt, state, result)
		JOIN tasks ON tasks.id = r.id
		WHERE r.state = '`+api.TaskFinished+`'
			AND tasks.reclaimed_from = $5 AND tasks.reclaimed_attempt = r.attempt
			AND tasks.state IN ('`+api.TaskReady+`', '`+api.TaskRunning+`')
		ORDER BY tasks.id
		FOR UPDATE OF tasks`,
		planned, b.ends.ids, b.ends.attempts, b.ends.states, b.ends.results, b.batch.NodeID)
	if err != nil {
		return nil, 0, err
	}
	return sqlstore.FinishLate(ctx, q, b.batch.NodeID, rows, b.batch.Now, counts, fin)
}

func (b *reports) Failures(ctx context.Context, q sqlstore.Querier, decide func([]store.Attempt) ([]sqlstore.Retry, error), counts tally, fin *sqlstore.Endings) (int, error) {
	tx := txOf(q)
	held, err := lockHeld(ctx, tx, b.batch.NodeID, b.batch.Failures)
	if err != nil || len(held) == 0 {
		return 0, err
	}
	if err := recordFailures(ctx, tx, b.batch.NodeID, held, b.batch.Now); err != nil {
		return 0, err
	}
	retries, err := decide(held)
	if err != nil {
		return 0, err
	}
	n := len(retries)
	ids, states, results, notBefore := make([]string, n), make([]string, n), make([]*string, n), make([]int64, n)
	for i, r := range retries {
		ids[i], states[i], notBefore[i] = r.ID, r.State, r.NotBefore
		if r.Result != nil {
			result := string(r.Result)
			results[i] = &result
		}
	}
	rows, err := tx.Query(ctx, `UPDATE tasks SET state = r.state, result = r.result, not_before = r.not_before, updated_at = $1
		FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS r(id, state, result, not_before)
		WHERE tasks.id = r.id
		RETURNING tasks.suite_id, tasks.state, tasks.id`,
		planned, b.batch.Now, ids, states, results, notBefore)
	if err != nil {
		return 0, err
	}
	return sqlstore.ScanEnds(rows, api.TaskRunning, counts, fin)
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

// recordFailures stores one failure row per held report
// (sqlstore.FailureOf).
func recordFailures(ctx context.Context, tx pgx.Tx, nodeID string, held []store.Attempt, now int64) error {
	n := len(held)
	ids, signals := make([]string, n), make([]string, n)
	attempts, codes := make([]int32, n), make([]int32, n)
	reasons, stdouts, stderrs := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	ats := make([]int64, n)
	for i, r := range held {
		f := sqlstore.FailureOf(r)
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
