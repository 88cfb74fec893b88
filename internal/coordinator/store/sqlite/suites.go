package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// Suites are sqlstore's; SQLite keeps one suite_counts row per suite, and
// GetSuite, which every fetch of a shared suite asks, prepared.

// getSuite reads one suite by ID.
var getSuite = rebind(sqlstore.SuiteSelect(driver{}) + ` WHERE s.id = $1`)

// GetSuite returns a suite with its task counts.
func (s *Store) GetSuite(ctx context.Context, id string) (store.Suite, error) {
	su, err := sqlstore.ScanSuite(s.rc.in(ctx, nil, getSuite).QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return store.Suite{}, fmt.Errorf("get suite %s: %w", id, classify(err))
	}
	return su, nil
}

func (driver) SuiteCounts() string    { return `JOIN suite_counts AS c ON c.suite_id = s.id` }
func (driver) NewSuiteCounts() string { return `INSERT INTO suite_counts (suite_id) VALUES ($1)` }
func (driver) InsertOrder() string    { return "rowid" }

// CancelSuiteTasks cancels the suite's tasks with one statement per
// state, each served by the partial index of tasks in that state (the
// suite's running tasks are among the few running anywhere), and moves
// the suite's counts to cancelled.
func (driver) CancelSuiteTasks(ctx context.Context, tx sqlstore.Querier, id string, now time.Time) error {
	for _, stmt := range []string{
		`UPDATE tasks SET state = '` + api.TaskCancelled + `', updated_at = $1
			WHERE suite_id = $2 AND state = '` + api.TaskReady + `'`,
		`UPDATE tasks INDEXED BY tasks_running SET state = '` + api.TaskCancelled + `', updated_at = $1
			WHERE suite_id = $2 AND state = '` + api.TaskRunning + `'`,
		// Pending tasks have no index of their own: they walk
		// tasks_suite, once, when a suite is cancelled.
		`UPDATE tasks SET state = '` + api.TaskCancelled + `', updated_at = $1, reason = 'the suite was cancelled'
			WHERE suite_id = $2 AND state = '` + api.TaskPending + `'`,
	} {
		if _, err := tx.Exec(ctx, stmt, now.UnixNano(), id); err != nil {
			return err
		}
	}
	// Every Pending, Ready and Running task of the suite is Cancelled now.
	_, err := tx.Exec(ctx, `UPDATE suite_counts
		SET cancelled = cancelled + pending + ready + running, pending = 0, ready = 0, running = 0
		WHERE suite_id = $1`, id)
	return err
}
