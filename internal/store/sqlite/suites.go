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
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/store"
)

const suiteColumns = `id, spec, state, owner, assigned_nodes, created_at, updated_at, last_task_at`

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
		su.CreatedAt = orNow(su.CreatedAt, now)
		su.UpdatedAt = now
		args, err := suiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO suites (`+suiteColumns+`, name, group_name, priority)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, append([]any{su.ID}, args...)...)
		if isUnique(err) {
			return errdefs.Conflict("suite id %s or name %s is taken", su.ID, su.Spec.Name)
		}
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
	su, err := s.oneSuite(ctx, `id = ?`, id)
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
	suites, err := s.querySuites(ctx, []string{where}, args)
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
	suites, err := s.querySuites(ctx, where, args)
	if err != nil {
		return nil, fmt.Errorf("list suites: %w", err)
	}
	return suites, nil
}

// querySuites reads suites and their counts from one snapshot.
func (s *Store) querySuites(ctx context.Context, where []string, args []any) ([]store.Suite, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, classify(err)
	}
	defer tx.Rollback()
	return readSuites(ctx, tx, where, args)
}

func readSuites(ctx context.Context, q querier, where []string, args []any) ([]store.Suite, error) {
	query := `SELECT ` + suiteColumns + ` FROM suites`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY priority DESC, created_at, id`
	rows, err := q.QueryContext(ctx, query, args...)
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
	if err := addCounts(ctx, q, suites); err != nil {
		return nil, err
	}
	return suites, nil
}

// addCounts fills in the suites' task counts with one grouped query, which
// the (suite_id, state, ...) index answers without reading the tasks.
func addCounts(ctx context.Context, q querier, suites []store.Suite) error {
	if len(suites) == 0 {
		return nil
	}
	index := make(map[string]int, len(suites))
	ids := make([]string, len(suites))
	for i, su := range suites {
		index[su.ID] = i
		ids[i] = su.ID
	}
	idList, err := jsonArg(ids)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, `SELECT suite_id, state, COUNT(*) FROM tasks
		WHERE suite_id IN (SELECT value FROM json_each(?)) GROUP BY suite_id, state`, idList)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		var n int
		if err := rows.Scan(&id, &state, &n); err != nil {
			return classify(err)
		}
		c := &suites[index[id]].Counts
		switch state {
		case api.TaskReady:
			c.Ready = n
		case api.TaskRunning:
			c.Running = n
		case api.TaskFinished:
			c.Finished = n
		case api.TaskFailed:
			c.Failed = n
		case api.TaskCancelled:
			c.Cancelled = n
		}
	}
	return classify(rows.Err())
}

// UpdateSuite applies fn to the suite inside one write transaction; a move
// to Cancelled cancels the suite's Ready and Running tasks in it too. Counts
// are computed, so fn's changes to them are dropped. fn runs while the
// store's only writer connection is held: it must not call the store.
func (s *Store) UpdateSuite(ctx context.Context, id string, fn func(*store.Suite) error) (store.Suite, error) {
	var out store.Suite
	err := s.write(ctx, func(tx *sql.Tx) error {
		got, err := readSuites(ctx, tx, []string{`id = ?`}, []any{id})
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
		args, err := suiteArgs(su)
		if err != nil {
			return err
		}
		if live(su.State) {
			if err := nameFree(ctx, tx, su); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE suites SET
				spec = ?, state = ?, owner = ?, assigned_nodes = ?, created_at = ?, updated_at = ?,
				last_task_at = ?, name = ?, group_name = ?, priority = ?
			WHERE id = ?`, append(args, id)...)
		if isUnique(err) {
			return errdefs.Conflict("another live suite is named %s", su.Spec.Name)
		}
		if err != nil {
			return classify(err)
		}
		if su.State == api.SuiteCancelled {
			if _, err := tx.ExecContext(ctx, `UPDATE tasks SET state = ?, updated_at = ?
				WHERE suite_id = ? AND state IN (?, ?)`,
				api.TaskCancelled, now.UnixNano(), id, api.TaskReady, api.TaskRunning); err != nil {
				return classify(err)
			}
		}
		got, err = readSuites(ctx, tx, []string{`id = ?`}, []any{id})
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
		WHERE state = ?3 AND NOT EXISTS (SELECT 1 FROM tasks
			WHERE tasks.suite_id = suites.id AND tasks.state IN (?4, ?5))
		RETURNING id`,
		api.SuiteComplete, s.now().UnixNano(), api.SuiteClosed, api.TaskReady, api.TaskRunning)
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

// suiteArgs are su's columns after id, in suiteColumns order, then name,
// group_name and priority, copied out of the spec.
func suiteArgs(su store.Suite) ([]any, error) {
	switch {
	case su.Spec.Name == "":
		return nil, errdefs.Field("spec.name", "required")
	case !validSuiteState(su.State):
		return nil, errdefs.Field("state", "unknown state %q", su.State)
	}
	spec, err := json.Marshal(su.Spec)
	if err != nil {
		return nil, err
	}
	assigned, err := jsonArg(su.AssignedNodes)
	if err != nil {
		return nil, err
	}
	return []any{
		string(spec), su.State, su.Owner, assigned,
		su.CreatedAt.UnixNano(), su.UpdatedAt.UnixNano(), timeArg(su.LastTaskAt),
		su.Spec.Name, su.Spec.Group, su.Spec.Priority,
	}, nil
}

func validSuiteState(state string) bool {
	switch state {
	case api.SuiteOpen, api.SuiteClosed, api.SuiteComplete, api.SuiteCancelled:
		return true
	}
	return false
}

// scanSuite reads a row of suiteColumns; Counts stay zero.
func scanSuite(row scanner) (store.Suite, error) {
	var (
		su               store.Suite
		spec, assigned   string
		created, updated int64
		lastTask         sql.NullInt64
	)
	err := row.Scan(&su.ID, &spec, &su.State, &su.Owner, &assigned, &created, &updated, &lastTask)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Suite{}, errdefs.ErrNotFound
	}
	if err != nil {
		return store.Suite{}, classify(err)
	}
	if err := json.Unmarshal([]byte(spec), &su.Spec); err != nil {
		return store.Suite{}, fmt.Errorf("suite %s spec: %w", su.ID, err)
	}
	if su.AssignedNodes, err = stringsOf(assigned); err != nil {
		return store.Suite{}, fmt.Errorf("suite %s assigned nodes: %w", su.ID, err)
	}
	su.CreatedAt = fromNanos(created)
	su.UpdatedAt = fromNanos(updated)
	su.LastTaskAt = timeOf(lastTask)
	return su, nil
}
