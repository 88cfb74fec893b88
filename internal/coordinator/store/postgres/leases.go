package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// AcquireLease takes, takes over or renews a lease (see store.Leases). It
// locks the lease's row, made first if it is new so that two replicas
// acquiring a new lease queue on it too; the lock waits for the fenced
// writes under way (they hold it FOR SHARE), so a takeover commits after
// them and every fenced write after it sees the new term.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := store.CheckLeaseArgs(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO leases (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return err
		}
		cur, err := getLease(ctx, tx, name, ` FOR UPDATE`)
		if err != nil {
			return err
		}
		if out, err = cur.Acquire(holder, s.now(), ttl); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE leases SET holder = $2, term = $3, expires = $4 WHERE name = $1`,
			name, out.Holder, out.Term, sqlrow.TimeArg(out.Expires))
		return err
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s for %s: %w", name, holder, err)
	}
	return out, nil
}

// ReleaseLease gives a lease up if holder holds it; its term stays.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE leases SET holder = '', expires = NULL WHERE name = $1 AND holder = $2`, name, holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease %s of %s: %w", name, holder, err)
	}
	return nil
}

// GetLease reads a lease.
func (s *Store) GetLease(ctx context.Context, name string) (store.Lease, error) {
	l, err := getLease(ctx, s.pool, name, "")
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, err)
	}
	return l, nil
}

// getLease reads a lease's row, with lock appended to the SELECT.
func getLease(ctx context.Context, q querier, name, lock string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var expires *int64
	err := q.QueryRow(ctx, `SELECT holder, term, expires FROM leases WHERE name = $1`+lock, name).Scan(&l.Holder, &l.Term, &expires)
	if noRows(err) {
		return l, errdefs.ErrNotFound
	}
	if err != nil {
		return l, classify(err)
	}
	l.Expires = sqlrow.TimeOf(expires)
	return l, nil
}

// fenced wraps a write transaction's fn with the check of its fence: the
// lease's row, read FOR SHARE, must still have the fence's holder and
// term, else the transaction fails with store.ErrNotLeader before fn
// writes anything. The share lock holds a takeover (which updates the
// row) until this transaction ends.
func fenced(ctx context.Context, want store.Lease, fn func(tx pgx.Tx) error) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		cur, err := getLease(ctx, tx, want.Name, ` FOR SHARE`)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("check the write's fence, lease %s: %w", want.Name, err)
		}
		if err := store.Fenced(want, cur); err != nil {
			return err
		}
		return fn(tx)
	}
}
