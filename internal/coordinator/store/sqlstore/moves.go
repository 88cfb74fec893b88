package sqlstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Moving tasks between Ready and Running outside claims and reports: a
// node handing tasks back, losing them, or getting them back. States are
// written into the statements, not bound, wherever a partial index of
// tasks in that state should serve them.

// ReturnTasks moves the node's Running tasks among ids back to Ready and
// takes back the attempt they were claimed with. The task keeps its NodeID.
func (s *Store) ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.moveTasks(ctx, true, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', attempt = attempt - 1, handed_out = attempt - 1, updated_at = $1
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND `+s.d.In(`id`, `$3`)+`
		RETURNING suite_id, state`,
		s.d.Now().UnixNano(), nodeID, s.d.TextList(ids))
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
	n, err := s.moveTasks(ctx, false, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = $1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND NOT (`+s.d.In(`id`, `$3`)+`)
		RETURNING suite_id, state`,
		s.d.Now().UnixNano(), nodeID, s.d.TextList(keep))
	if err != nil {
		return 0, fmt.Errorf("reclaim tasks of node %s: %w", nodeID, err)
	}
	return n, nil
}

// ReclaimSuiteTasks moves the suite's tasks Running on the node back to
// Ready, as ReclaimNode does.
func (s *Store) ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (int, error) {
	n, err := s.moveTasks(ctx, false, api.TaskRunning, `UPDATE tasks SET state = '`+api.TaskReady+`', updated_at = $1,
			reclaimed_from = node_id, reclaimed_attempt = attempt
		WHERE node_id = $2 AND state = '`+api.TaskRunning+`' AND suite_id = $3
		RETURNING suite_id, state`,
		s.d.Now().UnixNano(), nodeID, suiteID)
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
	n, err := s.moveTasks(ctx, true, api.TaskReady, `UPDATE tasks SET state = '`+api.TaskRunning+`', node_id = $1,
			reclaimed_from = '', updated_at = $2
		WHERE `+s.d.In(`id`, `$3`)+` AND state = '`+api.TaskReady+`'
			AND reclaimed_from = $1 AND reclaimed_attempt = attempt
		RETURNING suite_id, state`,
		nodeID, s.d.Now().UnixNano(), s.d.TextList(ids))
	if err != nil {
		return 0, fmt.Errorf("reattach %d tasks to node %s: %w", len(ids), nodeID, err)
	}
	return n, nil
}

// moveTasks runs an UPDATE ... RETURNING suite_id, state that moves tasks
// out of state from, counts them in their suites, and returns how many it
// moved; byID says the statement names its tasks in a list, to be planned
// for its length (Driver.PlanEach). Where the database locks rows, the
// UPDATE checks its conditions on each row as it locks it, so a task
// another transaction moved meanwhile is left alone.
func (s *Store) moveTasks(ctx context.Context, byID bool, from, query string, a ...any) (int, error) {
	var n int
	err := s.d.Write(ctx, func(tx Querier) error {
		q := tx
		if byID {
			q = s.d.PlanEach(tx)
		}
		rows, err := q.Query(ctx, query, a...)
		if err != nil {
			return err
		}
		counts := sqlrow.Tally{}
		if n, err = scanMoves(rows, from, counts); err != nil {
			return err
		}
		return s.d.ApplyCounts(ctx, tx, counts)
	})
	return n, err
}

// scanMoves reads the (suite_id, state) rows that an UPDATE ... RETURNING
// gives for the tasks it moved out of state from, tallies them, closes the
// rows, and returns how many there were.
func scanMoves(rows Rows, from string, counts sqlrow.Tally) (int, error) {
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
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		if before, err = s.getTask(ctx, tx, id, s.d.Lock("FOR UPDATE")); err != nil {
			return err
		}
		if !slices.Contains([]string{api.TaskPending, api.TaskReady, api.TaskRunning}, before.State) {
			return errdefs.Conflict("task is %s", before.State)
		}
		now := s.d.Now().UnixNano()
		_, err = tx.Exec(ctx, `UPDATE tasks SET state = $1, reason = 'cancelled by hand', updated_at = $2 WHERE id = $3`,
			api.TaskCancelled, now, id)
		if err != nil {
			return err
		}
		counts := sqlrow.Tally{}
		counts.Move(before.SuiteID, before.State, api.TaskCancelled, 1)
		ended := Endings{failed: []ended{{before.ID, before.SuiteID, api.TaskCancelled}}}
		if _, err := SettleDeps(ctx, s.d, tx, ended, counts, now); err != nil {
			return err
		}
		return s.d.ApplyCounts(ctx, tx, counts)
	})
	if err != nil {
		return store.Task{}, fmt.Errorf("cancel task %s: %w", id, err)
	}
	return before, nil
}
