package sqlstore

import (
	"context"
	"fmt"
	"strings"
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
	now := s.d.Now()
	m.CreatedAt, m.UpdatedAt = sqlrow.OrNow(m.CreatedAt, now), now
	d.CreatedAt, d.UpdatedAt = sqlrow.OrNow(d.CreatedAt, now), now
	err := s.d.Write(ctx, func(tx Querier) error {
		if err := s.insertDeployment(ctx, tx, d); err != nil {
			return err
		}
		return s.insertPoolMachine(ctx, tx, m)
	})
	if err != nil {
		return fmt.Errorf("create machine %s of pool %s: %w", m.ID, m.Pool, err)
	}
	return nil
}

func (s *Store) insertPoolMachine(ctx context.Context, tx Querier, m store.PoolMachine) error {
	_, err := tx.Exec(ctx, `INSERT INTO pool_machines (`+poolMachineColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		m.ID, m.Pool, m.Template, m.Provider, m.State, m.StateReason, m.DeploymentID, m.NodeID,
		m.CPUs, m.MemoryMB, m.CreatedAt.UnixNano(), sqlrow.ZeroNano(m.LaunchedAt), sqlrow.ZeroNano(m.ReadyAt), sqlrow.ZeroNano(m.BusyAt), m.UpdatedAt.UnixNano(),
		sqlrow.ZeroNano(m.DeliveredAt))
	if s.d.IsUnique(err) {
		return errdefs.Conflict("pool machine %s exists", m.ID)
	}
	return err
}

// GetPoolMachine reads one machine.
func (s *Store) GetPoolMachine(ctx context.Context, id string) (store.PoolMachine, error) {
	m, err := s.scanPoolMachine(s.d.Reader().QueryRow(ctx, `SELECT `+poolMachineColumns+` FROM pool_machines WHERE id = $1`, id))
	if err != nil {
		return m, fmt.Errorf("get pool machine %s: %w", id, err)
	}
	return m, nil
}

// ListPoolMachines lists machines oldest first.
func (s *Store) ListPoolMachines(ctx context.Context, f store.PoolMachineFilter) ([]store.PoolMachine, error) {
	var where []string
	var a args
	if f.Pool != "" {
		where = append(where, `pool = `+a.add(f.Pool))
	}
	if f.Live {
		where = append(where, `state NOT IN (`+a.add(api.MachineGone)+`, `+a.add(api.MachineFailed)+`)`)
	}
	if f.After != "" {
		var created int64
		var id string
		if err := store.DecodeCursor(f.After, &created, &id); err != nil {
			return nil, fmt.Errorf("list pool machines: %w", err)
		}
		where = append(where, `(created_at, id) > (`+a.add(created)+`, `+a.add(id)+`)`)
	}
	q := `SELECT ` + poolMachineColumns + ` FROM pool_machines`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	rows, err := s.d.Reader().Query(ctx, q+` ORDER BY created_at, id`+a.limit(f.Page), a...)
	if err != nil {
		return nil, fmt.Errorf("list pool machines: %w", s.d.Classify(err))
	}
	defer rows.Close()
	out := []store.PoolMachine{}
	for rows.Next() {
		m, err := s.scanPoolMachine(rows)
		if err != nil {
			return nil, fmt.Errorf("list pool machines: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pool machines: %w", s.d.Classify(err))
	}
	return out, nil
}

// UpdatePoolMachine applies fn to a machine in one transaction, with its
// row locked. fn may run again if the database aborts the transaction to break
// a deadlock.
func (s *Store) UpdatePoolMachine(ctx context.Context, id string, fn func(*store.PoolMachine) error) (store.PoolMachine, error) {
	var m store.PoolMachine
	err := s.d.Write(ctx, func(tx Querier) error {
		var err error
		m, err = s.scanPoolMachine(tx.QueryRow(ctx, `SELECT `+poolMachineColumns+` FROM pool_machines WHERE id = $1`+s.d.Lock("FOR UPDATE"), id))
		if err != nil {
			return err
		}
		if err := fn(&m); err != nil {
			return err
		}
		if m.ID != id {
			return errdefs.Field("id", "cannot change")
		}
		m.UpdatedAt = s.d.Now()
		_, err = tx.Exec(ctx, `UPDATE pool_machines SET state = $1, state_reason = $2, deployment_id = $3, node_id = $4,
			cpus = $5, memory_mb = $6, launched_at = $7, ready_at = $8, busy_at = $9, updated_at = $10, delivered_at = $11 WHERE id = $12`,
			m.State, m.StateReason, m.DeploymentID, m.NodeID, m.CPUs, m.MemoryMB,
			sqlrow.ZeroNano(m.LaunchedAt), sqlrow.ZeroNano(m.ReadyAt), sqlrow.ZeroNano(m.BusyAt), m.UpdatedAt.UnixNano(),
			sqlrow.ZeroNano(m.DeliveredAt), id)
		return err
	})
	if err != nil {
		return m, fmt.Errorf("update pool machine %s: %w", id, err)
	}
	return m, nil
}

// DeletePoolMachines forgets a pool's ended machines.
func (s *Store) DeletePoolMachines(ctx context.Context, pool string, cutoff time.Time) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `DELETE FROM pool_machines WHERE pool = $1 AND state IN ($2, $3) AND updated_at < $4`,
			pool, api.MachineGone, api.MachineFailed, before(cutoff))
		return err
	})
	if err != nil {
		return fmt.Errorf("delete machines of pool %s: %w", pool, err)
	}
	return nil
}

// before is cutoff in unix nanoseconds; a zero cutoff is after everything.
func before(cutoff time.Time) int64 {
	if cutoff.IsZero() {
		return 1<<63 - 1
	}
	return cutoff.UnixNano()
}

// AddPoolEvent appends a decision.
func (s *Store) AddPoolEvent(ctx context.Context, e api.PoolEvent) (api.PoolEvent, error) {
	if e.Pool == "" || e.Kind == "" {
		return e, fmt.Errorf("add pool event: %w", errdefs.Field("event", "pool and kind are required"))
	}
	e.At = sqlrow.OrNow(e.At, s.d.Now())
	err := s.d.Write(ctx, func(tx Querier) error {
		return tx.QueryRow(ctx, `INSERT INTO pool_events (pool, machine, at, kind, message) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
			e.Pool, e.Machine, e.At.UnixNano(), e.Kind, e.Message).Scan(&e.ID)
	})
	if err != nil {
		return e, fmt.Errorf("add event of pool %s: %w", e.Pool, err)
	}
	return e, nil
}

// PoolEvents lists a pool's events oldest first.
func (s *Store) PoolEvents(ctx context.Context, pool string, p store.Page) ([]api.PoolEvent, error) {
	a := args{pool}
	q := `SELECT id, pool, machine, at, kind, message FROM pool_events WHERE pool = $1`
	if p.After != "" {
		var id int64
		if err := store.DecodeCursor(p.After, &id); err != nil {
			return nil, fmt.Errorf("list events of pool %s: %w", pool, err)
		}
		q += ` AND id > ` + a.add(id)
	}
	rows, err := s.d.Reader().Query(ctx, q+` ORDER BY id`+a.limit(p), a...)
	if err != nil {
		return nil, fmt.Errorf("list events of pool %s: %w", pool, s.d.Classify(err))
	}
	defer rows.Close()
	out := []api.PoolEvent{}
	for rows.Next() {
		var e api.PoolEvent
		var at int64
		if err := rows.Scan(&e.ID, &e.Pool, &e.Machine, &at, &e.Kind, &e.Message); err != nil {
			return nil, fmt.Errorf("list events of pool %s: %w", pool, s.d.Classify(err))
		}
		e.At = sqlrow.FromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events of pool %s: %w", pool, s.d.Classify(err))
	}
	return out, nil
}

// DeletePoolEvents forgets a pool's events from before cutoff.
func (s *Store) DeletePoolEvents(ctx context.Context, pool string, cutoff time.Time) error {
	err := s.d.Write(ctx, func(tx Querier) error {
		_, err := tx.Exec(ctx, `DELETE FROM pool_events WHERE pool = $1 AND at < $2`, pool, before(cutoff))
		return err
	})
	if err != nil {
		return fmt.Errorf("delete events of pool %s: %w", pool, err)
	}
	return nil
}

func (s *Store) scanPoolMachine(row Row) (store.PoolMachine, error) {
	var m store.PoolMachine
	var created, launched, ready, busy, updated, delivered int64
	err := row.Scan(&m.ID, &m.Pool, &m.Template, &m.Provider, &m.State, &m.StateReason, &m.DeploymentID, &m.NodeID,
		&m.CPUs, &m.MemoryMB, &created, &launched, &ready, &busy, &updated, &delivered)
	if s.d.NoRows(err) {
		return m, errdefs.ErrNotFound
	}
	if err != nil {
		return m, s.d.Classify(err)
	}
	m.CreatedAt, m.UpdatedAt = sqlrow.FromNanos(created), sqlrow.FromNanos(updated)
	m.LaunchedAt, m.ReadyAt, m.BusyAt = sqlrow.NanoTime(launched), sqlrow.NanoTime(ready), sqlrow.NanoTime(busy)
	m.DeliveredAt = sqlrow.NanoTime(delivered)
	return m, nil
}
