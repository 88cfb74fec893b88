package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// suiteSelect reads a suite and its counts, summed over their shards.
const suiteSelect = `SELECT s.id, s.spec, s.state, s.owner, s.assigned_nodes, s.stopped_nodes,
		s.created_at, s.updated_at, s.last_task_at,
		c.pending, c.ready, c.running, c.finished, c.failed, c.cancelled
	FROM suites AS s ` + countsOf

// suiteOrder is how suites list: highest priority first, then oldest.
const suiteOrder = ` ORDER BY s.priority DESC, s.created_at, s.id`

// CreateSuite stores a new suite and its first counts shard. An empty
// state means Open; a zero CreatedAt means now.
func (s *Store) CreateSuite(ctx context.Context, su store.Suite) error {
	if su.ID == "" {
		return fmt.Errorf("create suite: %w", errdefs.Field("id", "required"))
	}
	if su.State == "" {
		su.State = api.SuiteOpen
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		now := s.now()
		su.CreatedAt = sqlrow.OrNow(su.CreatedAt, now)
		su.UpdatedAt = now
		a, err := sqlrow.SuiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO suites (id, spec, state, owner, assigned_nodes, stopped_nodes,
				created_at, updated_at, last_task_at, name, group_name, priority)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, append([]any{su.ID}, a...)...)
		if isUnique(err) {
			return errdefs.Conflict("suite id %s or name %s is taken", su.ID, su.Spec.Name)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO suite_counts (suite_id, shard) VALUES ($1, 0)`, su.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("create suite %s (%s): %w", su.ID, su.Spec.Name, err)
	}
	return nil
}

// live reports whether a suite in this state holds its name.
func live(state string) bool { return state == api.SuiteOpen || state == api.SuiteClosed }

// nameFree is nil unless another live suite has su's name, which the partial
// unique index would refuse too; this says which suite has it.
func nameFree(ctx context.Context, tx pgx.Tx, su store.Suite) error {
	var other string
	err := tx.QueryRow(ctx, `SELECT id FROM suites WHERE name = $1 AND state IN ($2, $3) AND id <> $4`,
		su.Spec.Name, api.SuiteOpen, api.SuiteClosed, su.ID).Scan(&other)
	switch {
	case noRows(err):
		return nil
	case err != nil:
		return err
	}
	return errdefs.Conflict("suite %s is already named %s", other, su.Spec.Name)
}

// GetSuite returns a suite with its task counts.
func (s *Store) GetSuite(ctx context.Context, id string) (store.Suite, error) {
	su, err := scanSuite(s.pool.QueryRow(ctx, suiteSelect+` WHERE s.id = $1`, id))
	if err != nil {
		return store.Suite{}, fmt.Errorf("get suite %s: %w", id, err)
	}
	return su, nil
}

// SuiteByName returns the newest suite with this name, live or not.
func (s *Store) SuiteByName(ctx context.Context, name string) (store.Suite, error) {
	su, err := scanSuite(s.pool.QueryRow(ctx, suiteSelect+` WHERE s.id = (SELECT id FROM suites WHERE name = $1
		ORDER BY created_at DESC, seq DESC LIMIT 1)`, name))
	if err != nil {
		return store.Suite{}, fmt.Errorf("suite by name %s: %w", name, err)
	}
	return su, nil
}

// ListSuites lists the suites that match f, highest priority first, then
// oldest first.
func (s *Store) ListSuites(ctx context.Context, f store.SuiteFilter) ([]store.Suite, error) {
	var where []string
	var a args
	if len(f.States) > 0 {
		where = append(where, `s.state = ANY(`+a.add(f.States)+`)`)
	}
	if len(f.Groups) > 0 {
		where = append(where, `s.group_name = ANY(`+a.add(f.Groups)+`)`)
	}
	if f.After != "" {
		var priority int
		var created int64
		var id string
		if err := store.DecodeCursor(f.After, &priority, &created, &id); err != nil {
			return nil, fmt.Errorf("list suites: %w", err)
		}
		// suiteOrder with a mixed direction: lower priority, or the same
		// priority and later (created_at, id).
		p := a.add(priority)
		where = append(where, `(s.priority < `+p+` OR (s.priority = `+p+` AND (s.created_at, s.id) > (`+a.add(created)+`, `+a.add(id)+`)))`)
	}
	suites, err := readSuites(ctx, s.pool, where, a, f.Page)
	if err != nil {
		return nil, fmt.Errorf("list suites: %w", err)
	}
	return suites, nil
}

// readSuites reads the suites that match all of where, with their counts,
// in one statement and so from one snapshot.
func readSuites(ctx context.Context, q querier, where []string, a args, p store.Page) ([]store.Suite, error) {
	query := suiteSelect
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := q.Query(ctx, query+suiteOrder+a.limit(p), a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	suites := []store.Suite{}
	for rows.Next() {
		su, err := scanSuite(rows)
		if err != nil {
			return nil, err
		}
		suites = append(suites, su)
	}
	return suites, classify(rows.Err())
}

// UpdateSuite applies fn to the suite inside one transaction, with the
// suite's row locked; a move to Cancelled cancels the suite's Pending,
// Ready and Running tasks too. Counts are the store's to keep, so fn's
// changes to them are dropped. fn must not write the suite through the
// store (it would wait for the lock forever); it runs again if PostgreSQL
// aborts the transaction to break a deadlock.
func (s *Store) UpdateSuite(ctx context.Context, id string, fn func(*store.Suite) error) (store.Suite, error) {
	var out store.Suite
	err := s.write(ctx, func(tx pgx.Tx) error {
		su, err := lockSuite(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := fn(&su); err != nil {
			return err
		}
		if su.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		now := s.now()
		su.UpdatedAt = now
		a, err := sqlrow.SuiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE suites SET
				spec = $1, state = $2, owner = $3, assigned_nodes = $4, stopped_nodes = $5, created_at = $6, updated_at = $7,
				last_task_at = $8, name = $9, group_name = $10, priority = $11
			WHERE id = $12`, append(a, id)...)
		if isUnique(err) {
			return errdefs.Conflict("another live suite is named %s", su.Spec.Name)
		}
		if err != nil {
			return err
		}
		if su.State == api.SuiteCancelled {
			if err := s.cancelSuiteTasks(ctx, tx, id, now); err != nil {
				return err
			}
		}
		got, err := readSuites(ctx, tx, []string{`s.id = $1`}, args{id}, store.Page{})
		if err != nil {
			return err
		}
		out = got[0]
		return nil
	})
	if err != nil {
		return store.Suite{}, fmt.Errorf("update suite %s: %w", id, err)
	}
	return out, nil
}

// lockSuite reads a suite with its row locked against other writers until
// the transaction ends (FOR NO KEY UPDATE: tasks may still be inserted
// under it).
func lockSuite(ctx context.Context, tx pgx.Tx, id string) (store.Suite, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM suites WHERE id = $1 FOR NO KEY UPDATE`, id); err != nil {
		return store.Suite{}, err
	}
	got, err := readSuites(ctx, tx, []string{`s.id = $1`}, args{id}, store.Page{})
	if err != nil {
		return store.Suite{}, err
	}
	if len(got) == 0 {
		return store.Suite{}, errdefs.ErrNotFound
	}
	return got[0], nil
}

// cancelSuiteTasks cancels a suite's Pending, Ready and Running tasks and
// counts what it moved. It locks them first and reads their states as it
// locks them: a task that a stop or a reclaim on another replica moves from
// Running to Ready meanwhile is cancelled all the same, and counted from
// the state it left. No task can enter those states after the lock: the
// others are final, and AddTasks waits for the suite's row.
func (s *Store) cancelSuiteTasks(ctx context.Context, tx pgx.Tx, id string, now time.Time) error {
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
	return s.applyCounts(ctx, tx, counts)
}

// CloseIdleSuites closes the Open suites that got no task since cutoff, and
// returns their IDs in order.
func (s *Store) CloseIdleSuites(ctx context.Context, cutoff time.Time) ([]string, error) {
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = $1, updated_at = $2
		WHERE state = $3 AND COALESCE(last_task_at, created_at) < $4 RETURNING id`,
		api.SuiteClosed, s.now().UnixNano(), api.SuiteOpen, cutoff.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("close suites idle since %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return ids, nil
}

// CompleteSuites completes the Closed suites that have no task left to run,
// and returns their IDs in order.
func (s *Store) CompleteSuites(ctx context.Context) ([]string, error) {
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = $1, updated_at = $2
		WHERE state = $3 AND (SELECT coalesce(sum(pending + ready + running), 0)
			FROM suite_counts WHERE suite_counts.suite_id = suites.id) = 0
		RETURNING id`,
		api.SuiteComplete, s.now().UnixNano(), api.SuiteClosed)
	if err != nil {
		return nil, fmt.Errorf("complete suites: %w", err)
	}
	return ids, nil
}

// moveSuites runs an UPDATE ... RETURNING id and returns the IDs, sorted.
func (s *Store) moveSuites(ctx context.Context, query string, a ...any) ([]string, error) {
	var ids []string
	err := s.write(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, a...)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, err
	}
	if ids == nil {
		ids = []string{}
	}
	slices.Sort(ids)
	return ids, nil
}

// scanSuite reads a row of suiteSelect.
func scanSuite(row scanner) (store.Suite, error) {
	var (
		su               store.Suite
		spec, assigned   string
		stopped          string
		created, updated int64
		lastTask         *int64
	)
	c := &su.Counts
	err := row.Scan(&su.ID, &spec, &su.State, &su.Owner, &assigned, &stopped, &created, &updated, &lastTask,
		&c.Pending, &c.Ready, &c.Running, &c.Finished, &c.Failed, &c.Cancelled)
	if noRows(err) {
		return store.Suite{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Suite{}, classify(err)
	}
	if err := json.Unmarshal([]byte(spec), &su.Spec); err != nil {
		return store.Suite{}, fmt.Errorf("suite %s spec: %w", su.ID, err)
	}
	if su.AssignedNodes, err = sqlrow.Strings(assigned); err != nil {
		return store.Suite{}, fmt.Errorf("suite %s assigned nodes: %w", su.ID, err)
	}
	if su.StoppedNodes, err = sqlrow.Strings(stopped); err != nil {
		return store.Suite{}, fmt.Errorf("suite %s stopped nodes: %w", su.ID, err)
	}
	if len(su.StoppedNodes) == 0 {
		su.StoppedNodes = nil // rare; nil reads as none
	}
	su.CreatedAt = sqlrow.FromNanos(created)
	su.UpdatedAt = sqlrow.FromNanos(updated)
	su.LastTaskAt = sqlrow.TimeOf(lastTask)
	return su, nil
}
