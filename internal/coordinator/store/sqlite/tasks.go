package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// Tasks are sqlstore's, but for the statements that carry the dispatch
// load: adding tasks, claiming them (here) and applying reports
// (finish.go), each prepared once where it runs often.

// newTasks is a submission as SQLite inserts it: with one statement
// (insertTask), run per task.
type newTasks struct {
	s     *Store
	tasks []store.Task
}

func (d driver) NewTasks(tasks []store.Task) (sqlstore.NewTasks, error) {
	return newTasks{d.s, tasks}, nil
}

func (b newTasks) Insert(ctx context.Context, q sqlstore.Querier, suiteID string, now time.Time, counts tally) error {
	tx := txOf(q)
	stmt, err := b.s.stmt(ctx, tx, insertTask)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i := range b.tasks {
		t := &b.tasks[i]
		slices.Sort(t.After)
		t.After = slices.Compact(t.After)
		state := api.TaskReady
		if len(t.After) > 0 {
			state = api.TaskPending
		}
		spec, err := json.Marshal(t.Spec)
		if err != nil {
			return fmt.Errorf("task %s spec: %w", t.ID, err)
		}
		_, err = stmt.ExecContext(ctx, t.ID, suiteID, string(spec), t.Spec.Priority, state,
			sqlrow.OrNow(t.CreatedAt, now).UnixNano(), now.UnixNano(), t.Spec.Name, len(t.After))
		if isUnique(err) {
			if t.Spec.Name != "" {
				return errdefs.Conflict("task id %s or name %q is taken in the suite", t.ID, t.Spec.Name)
			}
			return errdefs.Conflict("task id %s is taken", t.ID)
		}
		if err != nil {
			return classify(err)
		}
		counts.Move(suiteID, "", state, 1)
	}
	return b.s.addDeps(ctx, tx, suiteID, b.tasks, counts, now.UnixNano())
}

const insertTask = `INSERT INTO tasks
		(id, suite_id, spec, priority, state, attempt, node_id, result, created_at, updated_at, name, waiting)
	VALUES (?, ?, ?, ?, ?, 0, '', NULL, ?, ?, ?, ?)`

// claimTasks claims the first Ready tasks of a suite, which the claim index
// hands over in order. The limit is +?4, not ?4: SQLite plans for the value
// bound to a bare LIMIT parameter, and so prepares the statement again each
// time a new value is bound.
const claimTasks = `UPDATE tasks SET state = '` + api.TaskRunning + `', attempt = attempt + 1, handed_out = attempt + 1, node_id = ?1, updated_at = ?2
	WHERE seq IN (SELECT seq FROM tasks WHERE suite_id = ?3 AND state = '` + api.TaskReady + `' AND not_before <= ?2
		ORDER BY priority DESC, seq LIMIT +?4)
	RETURNING ` + sqlstore.TaskColumns

// claimAuth reads what decides whether the node may claim the suite's
// tasks; see sqlrow.ClaimAuth.
var claimAuth = fmt.Sprintf(sqlrow.ClaimAuth, "s.spec ->> '$.tags'", "?1", "?2")

// authorizeClaim checks the row of claimAuth: whatever the server's
// caches say, a node outside the suite's group, tags or assignment claims
// nothing.
func authorizeClaim(row *sql.Row, suiteID, nodeID string) error {
	return sqlrow.AuthorizeClaim(suiteID, nodeID, func(dest ...any) error {
		err := row.Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.ErrNotFound
		}
		return classify(err)
	})
}

// ClaimTasks moves up to max Ready tasks of the suite to Running on the node
// with one UPDATE ... RETURNING, and returns them highest priority first,
// then oldest. The single writer makes concurrent claims take turns. A
// suite that does not exist is errdefs.ErrNotFound, a node that may not
// run its tasks errdefs.ErrPermission, checked in the claim's transaction,
// and even when max <= 0 (which claims nothing, on the reader).
func (s *Store) ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]store.Task, error) {
	if max <= 0 { // a question, not a claim: the writer is not needed
		if err := authorizeClaim(s.rc.in(ctx, nil, claimAuth).QueryRowContext(ctx, suiteID, nodeID), suiteID, nodeID); err != nil {
			return nil, fmt.Errorf("claim tasks of suite %s for node %s: %w", suiteID, nodeID, err)
		}
		return []store.Task{}, nil
	}
	var claimed []store.Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		auth, err := s.stmt(ctx, tx, claimAuth)
		if err != nil {
			return err
		}
		if err := authorizeClaim(auth.QueryRowContext(ctx, suiteID, nodeID), suiteID, nodeID); err != nil {
			return err
		}
		stmt, err := s.stmt(ctx, tx, claimTasks)
		if err != nil {
			return err
		}
		rows, err := stmt.QueryContext(ctx, nodeID, s.now().UnixNano(), suiteID, max)
		if err != nil {
			return classify(err)
		}
		if claimed, err = sqlstore.ScanTasks(sqlRows{rows}); err != nil || len(claimed) == 0 {
			return err
		}
		counts := tally{}
		counts.Move(suiteID, api.TaskReady, api.TaskRunning, len(claimed))
		if err := s.applyCounts(ctx, tx, counts); err != nil {
			return err
		}
		// Only a task claimed before can have failed before.
		return sqlstore.AddFailures(ctx, driver{s}, s.writeQ(tx), claimed, 2)
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
