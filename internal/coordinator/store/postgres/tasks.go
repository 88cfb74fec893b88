package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// taskBatch is a submission as PostgreSQL inserts it: columns, made before
// the transaction, that one statement inserts.
type taskBatch struct {
	s                         *Store
	ids, specs, states, names []string
	priorities, waiting       []int32
	created                   []int64 // 0: now
	after                     map[string][]string
}

func (d driver) NewTasks(tasks []store.Task) (sqlstore.NewTasks, error) {
	b := &taskBatch{s: d.s, after: map[string][]string{}}
	for _, t := range tasks {
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

// Insert stores the batch in one statement, in order: seq is the order
// tasks were added in.
func (b *taskBatch) Insert(ctx context.Context, q sqlstore.Querier, suiteID string, now time.Time, counts tally) error {
	tx := txOf(q)
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
	if err != nil {
		return err
	}
	for _, st := range b.states {
		counts.Move(suiteID, "", st, 1)
	}
	return b.addDeps(ctx, tx, suiteID, counts, now.UnixNano())
}

// claimTasks claims the first Ready tasks of a suite, in dispatch order off
// the tasks_ready index. FOR UPDATE SKIP LOCKED passes over the tasks that
// a concurrent claim (another replica's, say) is taking, instead of waiting
// for it; and the update moves a task only at the attempt it was picked at,
// still Ready, so no attempt of a task is ever handed out twice.
//
// The update compares state with picked's, not with the literal 'ready':
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
	UPDATE tasks SET state = '` + api.TaskRunning + `', attempt = tasks.attempt + 1, handed_out = tasks.attempt + 1, node_id = $1, updated_at = $2
	FROM picked
	WHERE tasks.seq = picked.seq AND tasks.attempt = picked.attempt AND tasks.state = picked.state
	RETURNING ` + sqlstore.TaskColumns

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
	claimed, err := sqlstore.ScanTasks(rows)
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
		if err := sqlstore.AddFailures(ctx, driver{s}, pgQuerier{tx}, claimed, 2); err != nil {
			return err
		}
		if err := sqlstore.ReadAfter(ctx, driver{s}, pgQuerier{tx}, claimed); err != nil {
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
