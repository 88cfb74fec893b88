package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// Suites are sqlstore's; PostgreSQL shards a suite's counts (counts.go)
// and locks the tasks it cancels.

func (driver) SuiteCounts() string { return countsOf }
func (driver) NewSuiteCounts() string {
	return `INSERT INTO suite_counts (suite_id, shard) VALUES ($1, 0)`
}
func (driver) InsertOrder() string { return "seq" }

// CancelSuiteTasks cancels a suite's Pending, Ready and Running tasks and
// counts what it moved. It locks them first and reads their states as it
// locks them: a task that a stop or a reclaim on another replica moves from
// Running to Ready meanwhile is cancelled all the same, and counted from
// the state it left. No task can enter those states after the lock: the
// others are final, and AddTasks waits for the suite's row.
func (d driver) CancelSuiteTasks(ctx context.Context, q sqlstore.Querier, id string, now time.Time) error {
	tx := txOf(q)
	const live = `suite_id = $1 AND state IN ('` + api.TaskPending + `', '` + api.TaskReady + `', '` + api.TaskRunning + `')`
	rows, err := tx.Query(ctx, `SELECT state FROM tasks WHERE `+live+` ORDER BY seq FOR UPDATE`, id)
	if err != nil {
		return err
	}
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(states) == 0 {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', updated_at = $2,
			reason = CASE WHEN state = '`+api.TaskPending+`' THEN 'the suite was cancelled' ELSE reason END
		WHERE `+live, id, now.UnixNano())
	if err != nil {
		return err
	}
	counts := tally{}
	for _, st := range states {
		counts.Move(id, st, api.TaskCancelled, 1)
	}
	return d.s.applyCounts(ctx, tx, counts)
}
