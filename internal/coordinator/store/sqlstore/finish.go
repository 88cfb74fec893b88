package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// FinishAttempts applies a node's reports in one transaction; see
// store.Tasks. A report counts only while its task is Running on nodeID at
// its attempt, which the statements that apply it check (on the task's
// row as they lock it, where the database locks rows), so a late or
// repeated report changes nothing, whichever replica applies it. Only the
// first of several reports of the same attempt can count, so the others
// are dropped first (splitReports).
//
// The database applies the batch with its own statements, tuned for the
// dispatch load (Driver.Reports); the steps are the same: successes and
// stops, then the successes of lost attempts if some did not count, then
// failures, then the tasks that wait for those that ended.
//
// The store fills in what only it can vouch for: a result's NodeID is
// nodeID, a zero FinishedAt or failure time is now, and a failure's Attempt
// and NodeID are the report's. A failed report without a Failure is
// recorded from its Result (FailureOf). A task that ends Failed keeps the
// last attempt's result; one that is retried keeps none from it but the
// failure. retry runs inside the transaction and must not call the store
// (SQLite's one writer connection is held); it runs again where the
// database aborts the transaction to break a deadlock.
func (s *Store) FinishAttempts(ctx context.Context, nodeID string, reports []store.Attempt, retry store.RetryPolicy) (store.Finished, error) {
	if err := checkOutcomes(nodeID, reports); err != nil || len(reports) == 0 {
		return store.Finished{}, err
	}
	now := s.d.Now().UnixNano()
	ends, failures := splitReports(reports)
	successes := 0
	for _, r := range ends {
		if r.Outcome == api.OutcomeSucceeded {
			successes++
		}
	}
	batch, err := s.d.Reports(Batch{NodeID: nodeID, Now: now, Ends: ends, Failures: failures})
	if err != nil {
		return store.Finished{}, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	var out store.Finished
	err = s.d.Write(ctx, func(tx Querier) error {
		out = store.Finished{} // a retried transaction starts again
		counts := sqlrow.Tally{}
		var fin Endings
		if len(ends) > 0 {
			n, err := batch.Ends(ctx, tx, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
			if n < successes { // some may be late: a lost attempt finishing
				if out.Superseded, n, err = batch.Late(ctx, tx, counts, &fin); err != nil {
					return err
				}
				out.Applied += n
			}
		}
		if len(failures) > 0 {
			decide := func(held []store.Attempt) ([]Retry, error) {
				return s.retries(ctx, tx, nodeID, held, retry, now)
			}
			n, err := batch.Failures(ctx, tx, decide, counts, &fin)
			if err != nil {
				return err
			}
			out.Applied += n
		}
		if err := recordLogs(ctx, tx, reports); err != nil {
			return err
		}
		released, err := SettleDeps(ctx, s.d, tx, fin, counts, now)
		if err != nil {
			return err
		}
		out.Released = released
		return s.d.ApplyCounts(ctx, tx, counts)
	})
	if err != nil {
		return store.Finished{}, fmt.Errorf("finish %d attempts of node %s: %w", len(reports), nodeID, err)
	}
	return out, nil
}

// Batch is a node's reports, split by splitReports.
type Batch struct {
	NodeID         string
	Now            int64 // the store's clock, in nanoseconds
	Ends, Failures []store.Attempt
}

// Reports is a node's batch of reports as one database applies them, made
// before the write transaction; each step tallies what it changed in
// counts and notes the tasks it ended in fin.
type Reports interface {
	// Ends applies the successes and stops and returns how many counted.
	Ends(ctx context.Context, tx Querier, counts sqlrow.Tally, fin *Endings) (int, error)
	// Late applies the successes of attempts the node lost (FinishLate).
	Late(ctx context.Context, tx Querier, counts sqlrow.Tally, fin *Endings) ([]store.Superseded, int, error)
	// Failures records the failures whose attempts hold their tasks, moves
	// those tasks on as decide says for those reports, and returns how
	// many counted.
	Failures(ctx context.Context, tx Querier, decide func(held []store.Attempt) ([]Retry, error), counts sqlrow.Tally, fin *Endings) (int, error)
}

// checkOutcomes refuses a batch with a report of an unknown outcome.
func checkOutcomes(nodeID string, reports []store.Attempt) error {
	for i, r := range reports {
		switch r.Outcome {
		case api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped:
		default:
			return fmt.Errorf("finish attempts of node %s: %w", nodeID,
				errdefs.Field(fmt.Sprintf("reports[%d].outcome", i), "unknown outcome %q", r.Outcome))
		}
	}
	return nil
}

// splitReports drops repeated reports of an attempt, keeping the first
// (only it can count), and returns the successes and stops, and the
// failures, each in order. After that at most one report per task can
// count (the one of the attempt that holds it), so the order in which
// they apply does not matter.
func splitReports(reports []store.Attempt) (ends, failures []store.Attempt) {
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
		} else {
			ends = append(ends, r)
		}
	}
	return ends, failures
}

// ResultJSON is the JSON of a result as reported by nodeID: the store
// vouches for its NodeID, and a zero FinishedAt is now.
func ResultJSON(r api.TaskResult, nodeID string, now int64) ([]byte, error) {
	r.NodeID = nodeID
	if r.FinishedAt.IsZero() {
		r.FinishedAt = sqlrow.FromNanos(now)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return b, nil
}

// FailureOf is the failure a failed report records: its Failure, or else
// what its Result says.
func FailureOf(r store.Attempt) api.TaskFailure {
	if r.Failure != nil {
		return *r.Failure
	}
	return api.TaskFailure{ExitCode: r.Result.ExitCode, Signal: r.Result.Signal, Stdout: r.Result.Stdout, Stderr: r.Result.Stderr,
		Log: r.Result.Log}
}

// ScanEnds is scanMoves for rows of (suite_id, state, id), which also
// notes the tasks that ended.
func ScanEnds(rows Rows, from string, counts sqlrow.Tally, fin *Endings) (int, error) {
	defer rows.Close()
	n := 0
	var suite, state, id string
	for rows.Next() {
		if err := rows.Scan(&suite, &state, &id); err != nil {
			return 0, err
		}
		counts.Move(suite, from, state, 1)
		fin.Add(id, suite, state)
		n++
	}
	return n, rows.Err()
}

// FinishLate applies the successes of attempts the node lost when it was
// declared offline (first completion wins), which the database's query
// found as rows of (id, suite_id, state, node_id, attempt, result) and
// locked where it locks rows; it closes them and returns the re-runs they
// supersede and how many it applied. Rare: a node cut off, not dead, so it
// goes task by task.
func FinishLate(ctx context.Context, tx Querier, nodeID string, rows Rows, now int64, counts sqlrow.Tally, fin *Endings) ([]store.Superseded, int, error) {
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
		fin.Add(l.id, l.suite, api.TaskFinished)
		if l.state == api.TaskRunning {
			superseded = append(superseded, store.Superseded{TaskID: l.id, NodeID: l.node, Attempt: l.attempt})
		}
	}
	return superseded, len(found), nil
}

// Retry is what becomes of a task whose failed attempt counted.
type Retry struct {
	ID        string
	State     string // Ready, to run again, or Failed
	Result    []byte // JSON, when it Failed: the last attempt's result
	NotBefore int64  // when it may run again
}

// retries asks retry (nil: always run again, at once) what becomes of the
// tasks that the held reports' failed attempts hold, their failures
// recorded already.
func (s *Store) retries(ctx context.Context, tx Querier, nodeID string, held []store.Attempt, retry store.RetryPolicy, now int64) ([]Retry, error) {
	tasks := make([]store.Task, len(held))
	for i, r := range held {
		tasks[i] = store.Task{ID: r.TaskID, Attempt: r.Attempt}
	}
	var policies map[string][2]*api.RetryPolicy
	if retry != nil {
		if err := AddFailures(ctx, s.d, tx, tasks, 1); err != nil {
			return nil, err
		}
		var err error
		if policies, err = s.retryPolicies(ctx, tx, tasks); err != nil {
			return nil, err
		}
	}
	out := make([]Retry, len(tasks))
	for i, t := range tasks {
		giveUp, wait := false, time.Duration(0)
		if retry != nil {
			p := policies[t.ID]
			giveUp, wait = retry(p[0], p[1], t.Failures)
		}
		out[i] = Retry{ID: t.ID, State: api.TaskReady, NotBefore: now + max(0, wait.Nanoseconds())}
		if giveUp {
			result, err := ResultJSON(held[i].Result, nodeID, now)
			if err != nil {
				return nil, fmt.Errorf("task %s attempt %d: %w", t.ID, t.Attempt, err)
			}
			out[i].State, out[i].Result = api.TaskFailed, result
		}
	}
	return out, nil
}

// retryPolicies reads the retry policies of the suites and of the tasks,
// by task ID: [suite's, task's], either nil.
func (s *Store) retryPolicies(ctx context.Context, tx Querier, tasks []store.Task) (map[string][2]*api.RetryPolicy, error) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	rows, err := tx.Query(ctx, `SELECT tasks.id,
			CAST(`+s.d.JSON("suites.spec")+` -> 'retry' AS TEXT), CAST(`+s.d.JSON("tasks.spec")+` -> 'retry' AS TEXT)
		FROM tasks JOIN suites ON suites.id = tasks.suite_id
		WHERE `+s.d.In(`tasks.id`, `$1`), s.d.TextList(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][2]*api.RetryPolicy{}
	for rows.Next() {
		var id string
		var js [2][]byte
		if err := rows.Scan(&id, &js[0], &js[1]); err != nil {
			return nil, err
		}
		var p [2]*api.RetryPolicy
		for i, j := range js {
			if len(j) > 0 && string(j) != "null" {
				p[i] = new(api.RetryPolicy)
				if err := json.Unmarshal(j, p[i]); err != nil {
					return nil, fmt.Errorf("task %s retry policy: %w", id, err)
				}
			}
		}
		out[id] = p
	}
	return out, rows.Err()
}
