package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// The dispatch loop's statements must keep their plans when the planner's
// statistics are stale, as they are for every suite made since the last
// ANALYZE. These tests make them as stale as they get (taken while no task
// was Ready or Pending, autovacuum off) and read the plans.

// staleStore returns a store whose statistics were taken with the 5,000
// tasks of suite "done" all Finished, and suite "next" of 5,000 Ready
// tasks made after.
func staleStore(t *testing.T) *Store {
	t.Helper()
	ctx := t.Context()
	s := open(t, newDatabase(t))
	exec := func(sql string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER TABLE tasks SET (autovacuum_enabled = false)`)
	addSuite := func(id string, n int) {
		t.Helper()
		if err := s.CreateSuite(ctx, store.Suite{ID: id, Spec: api.SuiteSpec{Name: id}}); err != nil {
			t.Fatal(err)
		}
		batch := make([]store.Task, n)
		for i := range batch {
			batch[i] = store.Task{ID: fmt.Sprintf("%s-%05d", id, i), Spec: api.TaskSpec{Argv: []string{"true"}}}
		}
		if err := s.AddTasks(ctx, id, batch); err != nil {
			t.Fatal(err)
		}
	}
	addSuite("done", 5000)
	exec(`UPDATE tasks SET state = 'Finished' WHERE suite_id = 'done'`)
	exec(`ANALYZE tasks`)
	addSuite("next", 5000)
	return s
}

// explain returns the plan of query in a transaction that first runs set.
func explain(t *testing.T, s *Store, set, query string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	var plan []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if set != "" {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, `EXPLAIN `+query, args...)
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestClaimPlanIgnoresStaleStatistics: the pick must walk tasks_ready
// (not read the whole suite and sort it), and the update must find the
// picked tasks by key, not walk tasks_ready for each of them. Both
// happened: dispatch fell from 5,000 to 600 tasks/s.
func TestClaimPlanIgnoresStaleStatistics(t *testing.T) {
	s := staleStore(t)
	plan := explain(t, s, `SET LOCAL enable_sort = off`, // as pickTasks does
		claimTasks, "n1", int64(1<<62), "next", 32)
	if strings.Count(plan, "tasks_ready") != 1 || !strings.Contains(plan, "tasks_pkey") {
		t.Errorf("the claim's plan walks tasks_ready outside the pick, or finds the picked tasks otherwise than by key:\n%s", plan)
	}
}

// TestReleasePlanReadsTasksByKey: counting down the dependents of a report's
// tasks must not read the tasks table, which every report does, most with
// no dependent at all.
func TestReleasePlanReadsTasksByKey(t *testing.T) {
	s := staleStore(t)
	ids := []string{"next-00000", "next-00001"}
	plan := explain(t, s, "", releaseDeps, ids, int64(1))
	if strings.Contains(plan, "Seq Scan on tasks") || !strings.Contains(plan, "tasks_id_key") {
		t.Errorf("releasing dependents reads the tasks table:\n%s", plan)
	}
}
