package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Suites. Their task counts live in suite_counts, which each database
// keeps its own way (SQLite one row per suite, PostgreSQL shards summed):
// the Driver's SuiteCounts reads them as c; cancelling a suite's tasks is
// the Driver's too, since it counts what it moved.

// SuiteSelect reads suites (as s) with their counts (as c), for a
// database's own hot reads of one suite.
func SuiteSelect(d Driver) string {
	return `SELECT s.id, s.spec, s.state, s.owner, s.assigned_nodes, s.stopped_nodes,
		s.created_at, s.updated_at, s.last_task_at,
		c.pending, c.ready, c.running, c.finished, c.failed, c.cancelled
	FROM suites AS s ` + d.SuiteCounts()
}

// suiteOrder is how suites list: highest priority first, then oldest.
const suiteOrder = ` ORDER BY s.priority DESC, s.created_at, s.id`

// CreateSuite stores a new suite and its counts. An empty state means
// Open; a zero CreatedAt means now.
func (s *Store) CreateSuite(ctx context.Context, su store.Suite) error {
	if su.ID == "" {
		return fmt.Errorf("create suite: %w", errdefs.Field("id", "required"))
	}
	if su.State == "" {
		su.State = api.SuiteOpen
	}
	err := s.d.Write(ctx, func(tx Querier) error {
		now := s.d.Now()
		su.CreatedAt = sqlrow.OrNow(su.CreatedAt, now)
		su.UpdatedAt = now
		a, err := suiteRow(ctx, s.d, tx, su)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO suites (id, spec, state, owner, assigned_nodes, stopped_nodes,
				created_at, updated_at, last_task_at, name, group_name, priority)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, append([]any{su.ID}, a...)...)
		if s.d.IsUnique(err) {
			return errdefs.Conflict("suite id %s or name %s is taken", su.ID, su.Spec.Name)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.d.NewSuiteCounts(), su.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("create suite %s (%s): %w", su.ID, su.Spec.Name, err)
	}
	return nil
}

// live reports whether a suite in this state holds its name.
func live(state string) bool { return state == api.SuiteOpen || state == api.SuiteClosed }

// suiteRow is su's column values to write, after checking that no other
// live suite has its name, for an insert and an update alike.
func suiteRow(ctx context.Context, d Driver, tx Querier, su store.Suite) ([]any, error) {
	a, err := sqlrow.SuiteArgs(su)
	if err != nil {
		return nil, err
	}
	if live(su.State) {
		if err := nameFree(ctx, d, tx, su); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// nameFree is nil unless another live suite has su's name, which the partial
// unique index would refuse too; this says which suite has it.
func nameFree(ctx context.Context, d Driver, tx Querier, su store.Suite) error {
	var other string
	err := tx.QueryRow(ctx, `SELECT id FROM suites WHERE name = $1 AND state IN ($2, $3) AND id <> $4`,
		su.Spec.Name, api.SuiteOpen, api.SuiteClosed, su.ID).Scan(&other)
	switch {
	case d.NoRows(err):
		return nil
	case err != nil:
		return d.Classify(err)
	}
	return errdefs.Conflict("suite %s is already named %s", other, su.Spec.Name)
}

// GetSuite returns a suite with its task counts.
func (s *Store) GetSuite(ctx context.Context, id string) (store.Suite, error) {
	su, err := ScanSuite(s.d.Reader().QueryRow(ctx, SuiteSelect(s.d)+` WHERE s.id = $1`, id))
	if s.d.NoRows(err) {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return store.Suite{}, fmt.Errorf("get suite %s: %w", id, s.d.Classify(err))
	}
	return su, nil
}

// SuiteByName returns the newest suite with this name, live or not.
func (s *Store) SuiteByName(ctx context.Context, name string) (store.Suite, error) {
	got, err := s.readSuites(ctx, s.d.Reader(), []string{`s.id = (SELECT id FROM suites WHERE name = $1
		ORDER BY created_at DESC, ` + s.d.InsertOrder() + ` DESC LIMIT 1)`}, args{name}, store.Page{})
	if err == nil && len(got) == 0 {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return store.Suite{}, fmt.Errorf("suite by name %s: %w", name, err)
	}
	return got[0], nil
}

// ListSuites lists the suites that match f, highest priority first, then
// oldest first.
func (s *Store) ListSuites(ctx context.Context, f store.SuiteFilter) ([]store.Suite, error) {
	var where []string
	var a args
	if len(f.States) > 0 {
		where = append(where, `s.state IN `+list(&a, f.States))
	}
	if len(f.Groups) > 0 {
		where = append(where, `s.group_name IN `+list(&a, f.Groups))
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
	suites, err := s.readSuites(ctx, s.d.Reader(), where, a, f.Page)
	if err != nil {
		return nil, fmt.Errorf("list suites: %w", err)
	}
	return suites, nil
}

// readSuites reads the suites that match all of where, with their counts,
// in one statement and so from one snapshot.
func (s *Store) readSuites(ctx context.Context, q Querier, where []string, a args, p store.Page) ([]store.Suite, error) {
	query := SuiteSelect(s.d)
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := q.Query(ctx, query+suiteOrder+a.limit(p), a...)
	if err != nil {
		return nil, s.d.Classify(err)
	}
	defer rows.Close()
	suites := []store.Suite{}
	for rows.Next() {
		su, err := ScanSuite(rows)
		if err != nil {
			return nil, s.d.Classify(err)
		}
		suites = append(suites, su)
	}
	return suites, s.d.Classify(rows.Err())
}

// UpdateSuite applies fn to the suite inside one write transaction, with
// the suite's row locked where the database locks rows; a move to
// Cancelled cancels the suite's Pending, Ready and Running tasks too.
// Counts are the store's to keep, so fn's changes to them are dropped. fn
// must not write through the store (it holds the writer, or the row's
// lock); it may run again where the database aborts the transaction to
// break a deadlock.
func (s *Store) UpdateSuite(ctx context.Context, id string, fn func(*store.Suite) error) (store.Suite, error) {
	var out store.Suite
	err := s.d.Write(ctx, func(tx Querier) error {
		// FOR NO KEY UPDATE: tasks may still be inserted under the row.
		if lock := s.d.Lock("FOR NO KEY UPDATE"); lock != "" {
			if _, err := tx.Exec(ctx, `SELECT 1 FROM suites WHERE id = $1`+lock, id); err != nil {
				return err
			}
		}
		got, err := s.readSuites(ctx, tx, []string{`s.id = $1`}, args{id}, store.Page{})
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
		now := s.d.Now()
		su.UpdatedAt = now
		a, err := suiteRow(ctx, s.d, tx, su)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE suites SET
				spec = $1, state = $2, owner = $3, assigned_nodes = $4, stopped_nodes = $5, created_at = $6, updated_at = $7,
				last_task_at = $8, name = $9, group_name = $10, priority = $11
			WHERE id = $12`, append(a, id)...)
		if s.d.IsUnique(err) {
			return errdefs.Conflict("another live suite is named %s", su.Spec.Name)
		}
		if err != nil {
			return err
		}
		if su.State == api.SuiteCancelled {
			if err := s.d.CancelSuiteTasks(ctx, tx, id, now); err != nil {
				return err
			}
		}
		got, err = s.readSuites(ctx, tx, []string{`s.id = $1`}, args{id}, store.Page{})
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
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = $1, updated_at = $2
		WHERE state = $3 AND COALESCE(last_task_at, created_at) < $4 RETURNING id`,
		api.SuiteClosed, s.d.Now().UnixNano(), api.SuiteOpen, cutoff.UnixNano())
	if err != nil {
		return nil, fmt.Errorf("close suites idle since %s: %w", cutoff.Format(time.RFC3339), err)
	}
	return ids, nil
}

// CompleteSuites completes the Closed suites that have no task left to run,
// and returns their IDs in order.
func (s *Store) CompleteSuites(ctx context.Context) ([]string, error) {
	ids, err := s.moveSuites(ctx, `UPDATE suites SET state = $1, updated_at = $2
		WHERE state = $3 AND id IN (SELECT s.id FROM suites AS s `+s.d.SuiteCounts()+`
			WHERE s.state = $3 AND c.pending + c.ready + c.running = 0)
		RETURNING id`,
		api.SuiteComplete, s.d.Now().UnixNano(), api.SuiteClosed)
	if err != nil {
		return nil, fmt.Errorf("complete suites: %w", err)
	}
	return ids, nil
}

// moveSuites runs an UPDATE ... RETURNING id and returns the IDs, sorted.
func (s *Store) moveSuites(ctx context.Context, query string, a ...any) ([]string, error) {
	ids := []string{}
	err := s.d.Write(ctx, func(tx Querier) error {
		ids = ids[:0] // a retried transaction starts again
		rows, err := tx.Query(ctx, query, a...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// ScanSuite reads a row of SuiteSelect.
func ScanSuite(row Row) (store.Suite, error) {
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
	if err != nil {
		return store.Suite{}, err
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
