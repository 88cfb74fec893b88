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
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

const poolMachineColumns = `id, pool, template, provider, state, state_reason, deployment_id, node_id,
	cpus, memory_mb, created_at, launched_at, ready_at, busy_at, updated_at, delivered_at`

// CreatePoolMachine stores a machine and its deployment in one transaction.
func (s *Store) CreatePoolMachine(ctx context.Context, m store.PoolMachine, d store.Deployment) error {
	if m.ID == "" || m.Pool == "" || m.State == "" {
		return fmt.Errorf("create pool machine: %w", errdefs.Field("machine", "id, pool and state are required"))
	}
	now := s.now()
	m.CreatedAt, m.UpdatedAt = sqlrow.OrNow(m.CreatedAt, now), now
	d.CreatedAt, d.UpdatedAt = sqlrow.OrNow(d.CreatedAt, now), now
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := insertDeployment(ctx, tx, d); err != nil {
			return err
		}
		return insertPoolMachine(ctx, tx, m)
	})
	if err != nil {
		return fmt.Errorf("create machine %s of pool %s: %w", m.ID, m.Pool, err)
	}
	return nil
}

func insertPoolMachine(ctx context.Context, tx *sql.Tx, m store.PoolMachine) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO pool_machines (`+poolMachineColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		m.ID, m.Pool, m.Template, m.Provider, m.State, m.StateReason, m.DeploymentID, m.NodeID,
		m.CPUs, m.MemoryMB, m.CreatedAt.UnixNano(), sqlrow.ZeroNano(m.LaunchedAt), sqlrow.ZeroNano(m.ReadyAt), sqlrow.ZeroNano(m.BusyAt), m.UpdatedAt.UnixNano(),
		sqlrow.ZeroNano(m.DeliveredAt))
	if isUnique(err) {
		return errdefs.Conflict("pool machine %s exists", m.ID)
	}
	return classify(err)
}

// GetPoolMachine reads one machine.
func (s *Store) GetPoolMachine(ctx context.Context, id string) (store.PoolMachine, error) {
	m, err := scanPoolMachine(s.r.QueryRowContext(ctx, `SELECT `+poolMachineColumns+` FROM pool_machines WHERE id = ?`, id))
	if err != nil {
		return m, fmt.Errorf("get pool machine %s: %w", id, err)
	}
	return m, nil
}

// ListPoolMachines lists machines oldest first.
func (s *Store) ListPoolMachines(ctx context.Context, f store.PoolMachineFilter) ([]store.PoolMachine, error) {
	q := `SELECT ` + poolMachineColumns + ` FROM pool_machines WHERE 1=1`
	var args []any
	if f.Pool != "" {
		q += ` AND pool = ?`
		args = append(args, f.Pool)
	}
	if f.Live {
		q += ` AND state NOT IN (?, ?)`
		args = append(args, api.MachineGone, api.MachineFailed)
	}
	if f.After != "" {
		var created int64
		var id string
		if err := store.DecodeCursor(f.After, &created, &id); err != nil {
			return nil, fmt.Errorf("list pool machines: %w", err)
		}
		q += ` AND (created_at, id) > (?, ?)`
		args = append(args, created, id)
	}
	lim, args := limitClause(f.Page, args)
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY created_at, id`+lim, args...)
	if err != nil {
		return nil, fmt.Errorf("list pool machines: %w", classify(err))
	}
	defer rows.Close()
	out := []store.PoolMachine{}
	for rows.Next() {
		m, err := scanPoolMachine(rows)
		if err != nil {
			return nil, fmt.Errorf("list pool machines: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// UpdatePoolMachine applies fn to a machine in one transaction.
func (s *Store) UpdatePoolMachine(ctx context.Context, id string, fn func(*store.PoolMachine) error) (store.PoolMachine, error) {
	var m store.PoolMachine
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = scanPoolMachine(tx.QueryRowContext(ctx, `SELECT `+poolMachineColumns+` FROM pool_machines WHERE id = ?`, id))
		if err != nil {
			return err
		}
		if err := fn(&m); err != nil {
			return err
		}
		if m.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		m.UpdatedAt = s.now()
		_, err = tx.ExecContext(ctx, `UPDATE pool_machines SET state = ?, state_reason = ?, deployment_id = ?, node_id = ?,
			cpus = ?, memory_mb = ?, launched_at = ?, ready_at = ?, busy_at = ?, updated_at = ?, delivered_at = ? WHERE id = ?`,
			m.State, m.StateReason, m.DeploymentID, m.NodeID, m.CPUs, m.MemoryMB,
			sqlrow.ZeroNano(m.LaunchedAt), sqlrow.ZeroNano(m.ReadyAt), sqlrow.ZeroNano(m.BusyAt), m.UpdatedAt.UnixNano(),
			sqlrow.ZeroNano(m.DeliveredAt), id)
		return classify(err)
	})
	if err != nil {
		return m, fmt.Errorf("update pool machine %s: %w", id, err)
	}
	return m, nil
}

// DeletePoolMachines forgets a pool's ended machines.
func (s *Store) DeletePoolMachines(ctx context.Context, pool string, cutoff time.Time) error {
	before := int64(1<<63 - 1)
	if !cutoff.IsZero() {
		before = cutoff.UnixNano()
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM pool_machines WHERE pool = ? AND state IN (?, ?) AND updated_at < ?`,
			pool, api.MachineGone, api.MachineFailed, before)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("delete machines of pool %s: %w", pool, err)
	}
	return nil
}

// AddPoolEvent appends a decision.
func (s *Store) AddPoolEvent(ctx context.Context, e api.PoolEvent) (api.PoolEvent, error) {
	if e.Pool == "" || e.Kind == "" {
		return e, fmt.Errorf("add pool event: %w", errdefs.Field("event", "pool and kind are required"))
	}
	e.At = sqlrow.OrNow(e.At, s.now())
	err := s.write(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO pool_events (pool, machine, at, kind, message) VALUES (?,?,?,?,?) RETURNING id`,
			e.Pool, e.Machine, e.At.UnixNano(), e.Kind, e.Message).Scan(&e.ID)
	})
	if err != nil {
		return e, fmt.Errorf("add event of pool %s: %w", e.Pool, classify(err))
	}
	return e, nil
}

// PoolEvents lists a pool's events oldest first.
func (s *Store) PoolEvents(ctx context.Context, pool string, p store.Page) ([]api.PoolEvent, error) {
	q := `SELECT id, pool, machine, at, kind, message FROM pool_events WHERE pool = ?`
	args := []any{pool}
	if p.After != "" {
		var id int64
		if err := store.DecodeCursor(p.After, &id); err != nil {
			return nil, fmt.Errorf("list events of pool %s: %w", pool, err)
		}
		q += ` AND id > ?`
		args = append(args, id)
	}
	lim, args := limitClause(p, args)
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY id`+lim, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of pool %s: %w", pool, classify(err))
	}
	defer rows.Close()
	out := []api.PoolEvent{}
	for rows.Next() {
		var e api.PoolEvent
		var at int64
		if err := rows.Scan(&e.ID, &e.Pool, &e.Machine, &at, &e.Kind, &e.Message); err != nil {
			return nil, fmt.Errorf("list events of pool %s: %w", pool, classify(err))
		}
		e.At = time.Unix(0, at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// DeletePoolEvents forgets a pool's events from before cutoff.
func (s *Store) DeletePoolEvents(ctx context.Context, pool string, cutoff time.Time) error {
	before := int64(1<<63 - 1)
	if !cutoff.IsZero() {
		before = cutoff.UnixNano()
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM pool_events WHERE pool = ? AND at < ?`, pool, before)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("delete events of pool %s: %w", pool, err)
	}
	return nil
}

func scanPoolMachine(row scanner) (store.PoolMachine, error) {
	var m store.PoolMachine
	var created, launched, ready, busy, updated, delivered int64
	err := row.Scan(&m.ID, &m.Pool, &m.Template, &m.Provider, &m.State, &m.StateReason, &m.DeploymentID, &m.NodeID,
		&m.CPUs, &m.MemoryMB, &created, &launched, &ready, &busy, &updated, &delivered)
	if errors.Is(err, sql.ErrNoRows) {
		return m, errdefs.ErrNotFound
	}
	if err != nil {
		return m, classify(err)
	}
	m.CreatedAt, m.UpdatedAt = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
	m.LaunchedAt, m.ReadyAt, m.BusyAt = sqlrow.NanoTime(launched), sqlrow.NanoTime(ready), sqlrow.NanoTime(busy)
	m.DeliveredAt = sqlrow.NanoTime(delivered)
	return m, nil
}
