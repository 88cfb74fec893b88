package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const suiteColumns = `id, spec, state, owner, assigned_nodes, stopped_nodes, created_at, updated_at, last_task_at`

// suiteSelect reads suiteColumns and the suite's counts.
const suiteSelect = `SELECT ` + suiteColumns + `, pending, ready, running, finished, failed, cancelled
	FROM suites JOIN suite_counts ON suite_counts.suite_id = suites.id`

// suiteOrder is how suites list: highest priority first, then oldest.
const suiteOrder = ` ORDER BY priority DESC, created_at, id`

// getSuite reads one suite by ID.
const getSuite = suiteSelect + ` WHERE id = ?`

// CreateSuite stores a new suite. An empty state means Open; a zero
// CreatedAt means now.
func (s *Store) CreateSuite(ctx context.Context, su store.Suite) error {
	if su.ID == "" {
		return fmt.Errorf("create suite: %w", errdefs.Field("id", "required"))
	}
	if su.State == "" {
		su.State = api.SuiteOpen
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		su.CreatedAt = sqlrow.OrNow(su.CreatedAt, now)
		su.UpdatedAt = now
		args, err := sqlrow.SuiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO suites (`+suiteColumns+`, name, group_name, priority)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, append([]any{su.ID}, args...)...)
		if isUnique(err) {
			return errdefs.Conflict("suite id %s or name %s is taken", su.ID, su.Spec.Name)
		}
		if err != nil {
			return classify(err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO suite_counts (suite_id) VALUES (?)`, su.ID)
		return classify(err)
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
func nameFree(ctx context.Context, tx *sql.Tx, su store.Suite) error {
	var other string
	err := tx.QueryRowContext(ctx, `SELECT id FROM suites
		WHERE name = ? AND state IN (?, ?) AND id <> ?`,
		su.Spec.Name, api.SuiteOpen, api.SuiteClosed, su.ID).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return classify(err)
	}
	return errdefs.Conflict("suite %s is already named %s", other, su.Spec.Name)
}

// GetSuite returns a suite with its task counts.
func (s *Store) GetSuite(ctx context.Context, id string) (store.Suite, error) {
	su, err := scanSuite(s.rstmts[getSuite].QueryRowContext(ctx, id))
	if err != nil {
		return store.Suite{}, fmt.Errorf("get suite %s: %w", id, err)
	}
	return su, nil
}

// SuiteByName returns the newest suite with this name, live or not.
func (s *Store) SuiteByName(ctx context.Context, name string) (store.Suite, error) {
	su, err := s.oneSuite(ctx, `id = (SELECT id FROM suites WHERE name = ?
		ORDER BY created_at DESC, rowid DESC LIMIT 1)`, name)
	if err != nil {
		return store.Suite{}, fmt.Errorf("suite by name %s: %w", name, err)
	}
	return su, nil
}

func (s *Store) oneSuite(ctx context.Context, where string, args ...any) (store.Suite, error) {
	suites, err := readSuites(ctx, s.r, []string{where}, args, "")
	if err != nil {
		return store.Suite{}, err
	}
	if len(suites) == 0 {
		return store.Suite{}, errdefs.ErrNotFound
	}
	return suites[0], nil
}

// ListSuites lists the suites that match f, highest priority first, then
// oldest first.
func (s *Store) ListSuites(ctx context.Context, f store.SuiteFilter) ([]store.Suite, error) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, `state IN (`+placeholders(len(f.States))+`)`)
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if len(f.Groups) > 0 {
		where = append(where, `group_name IN (`+placeholders(len(f.Groups))+`)`)
		for _, g := range f.Groups {
			args = append(args, g)
		}
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
		where = append(where, `(priority < ? OR (priority = ? AND (created_at, id) > (?, ?)))`)
		args = append(args, priority, priority, created, id)
	}
	lim, args := limitClause(f.Page, args)
	suites, err := readSuites(ctx, s.r, where, args, lim)
	if err != nil {
		return nil, fmt.Errorf("list suites: %w", err)
	}
	return suites, nil
}

// readSuites reads the suites that match all of where, with their counts, in
// one statement and so from one snapshot.
func readSuites(ctx context.Context, q querier, where []string, args []any, limit string) ([]store.Suite, error) {
	query := suiteSelect
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := q.QueryContext(ctx, query+suiteOrder+limit, args...)
	if err != nil {
		return nil, classify(err)
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
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	return suites, nil
}

// UpdateSuite applies fn to the suite inside one write transaction; a move
// to Cancelled cancels the suite's Ready and Running tasks in it too. Counts
// are the store's to keep, so fn's changes to them are dropped. fn runs while the
// store's only writer connection is held: it must not call the store.
func (s *Store) UpdateSuite(ctx context.Context, id string, fn func(*store.Suite) error) (store.Suite, error) {
	var out store.Suite
	err := s.write(ctx, func(tx *sql.Tx) error {
		got, err := readSuites(ctx, tx, []string{`id = ?`}, []any{id}, "")
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return errdefs.ErrNotFound
		}
		su := got[0]
		if err := fn(&su); err != nil {
			return err
		}
		if su.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		now := s.now()
		su.UpdatedAt = now
		args, err := sqlrow.SuiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE suites SET
				spec = ?, state = ?, owner = ?, assigned_nodes = ?, stopped_nodes = ?, created_at = ?, updated_at = ?,
				last_task_at = ?, name = ?, group_name = ?, priority = ?
			WHERE id = ?`, append(args, id)...)
		if isUnique(err) {
			return errdefs.Conflict("another live suite is named %s", su.Spec.Name)
		}
		if err != nil {
			return classify(err)
		}
		if su.State == api.SuiteCancelled {
			// One statement per state, each served by the partial index of
			// tasks in that state: the suite's running tasks are among the
			// few running anywhere.
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', updated_at = ?
				WHERE suite_id = ? AND state = '`+api.TaskReady+`'`, now.UnixNano(), id); err != nil {
				return classify(err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE tasks INDEXED BY tasks_running SET state = '`+api.TaskCancelled+`', updated_at = ?
				WHERE suite_id = ? AND state = '`+api.TaskRunning+`'`, now.UnixNano(), id); err != nil {
				return classify(err)
			}
			// Pending tasks have no index of their own: they walk
			// tasks_suite, once, when a suite is cancelled.
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = '`+api.TaskCancelled+`', updated_at = ?,
				reason = 'the suite was cancelled'
				WHERE suite_id = ? AND state = '`+api.TaskPending+`'`, now.UnixNano(), id); err != nil {
				return classify(err)
			}
			// Every Pending, Ready and Running task of the suite is Cancelled now.
			if _, err := tx.ExecContext(ctx, `UPDATE suite_counts
				SET cancelled = cancelled + pending + ready + running, pending = 0, ready = 0, running = 0
				WHERE suite_id = ?`, id); err != nil {
				return classify(err)
			}
		}
		got, err = readSuites(ctx, tx, []string{`id = ?`}, []any{id}, "")
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

// CloseIdleSuites closes the Open suites that got no task since cutoff, and
// returns their IDs in order.
func (s *Store) CloseIdleSuites(ctx context.Context, cutoff time.Time) ([]string, error) {
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = ?1, updated_at = ?2
		WHERE state = ?3 AND COALESCE(last_task_at, created_at) < ?4 RETURNING id`,
		api.SuiteClosed, s.now().UnixNano(), api.SuiteOpen, cutoff.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("close suites idle since %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return ids, nil
}

// CompleteSuites completes the Closed suites that have no task left to run,
// and returns their IDs in order.
func (s *Store) CompleteSuites(ctx context.Context) ([]string, error) {
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = ?1, updated_at = ?2
		WHERE state = ?3 AND id IN (SELECT suite_id FROM suite_counts WHERE pending = 0 AND ready = 0 AND running = 0)
		RETURNING id`,
		api.SuiteComplete, s.now().UnixNano(), api.SuiteClosed)
	if err != nil {
		return nil, fmt.Errorf("complete suites: %w", err)
	}
	return ids, nil
}

// moveSuites runs an UPDATE ... RETURNING id and returns the IDs, sorted.
func (s *Store) moveSuites(ctx context.Context, query string, args ...any) ([]string, error) {
	ids := []string{}
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return classify(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return classify(err)
			}
			ids = append(ids, id)
		}
		return classify(rows.Err())
	})
	if err != nil {
		return nil, err
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
		lastTask         sql.NullInt64
	)
	c := &su.Counts
	err := row.Scan(&su.ID, &spec, &su.State, &su.Owner, &assigned, &stopped, &created, &updated, &lastTask,
		&c.Pending, &c.Ready, &c.Running, &c.Finished, &c.Failed, &c.Cancelled)
	if errors.Is(err, sql.ErrNoRows) {
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
	su.LastTaskAt = timeOf(lastTask)
	return su, nil
}
