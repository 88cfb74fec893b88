package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// AcquireLease takes, takes over or renews a lease (see store.Leases). It
// locks the lease's row where the database locks rows (SQLite's single
// writer orders it with every other write), made first if it is new so
// that two replicas acquiring a new lease queue on it too; the lock waits
// for the fenced writes under way (they hold it FOR SHARE), so a takeover
// commits after them and every fenced write after it sees the new term.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := store.CheckLeaseArgs(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	var out store.Lease
	err := s.d.Write(ctx, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `INSERT INTO leases (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return err
		}
		cur, err := ReadLease(ctx, s.d, tx, name, s.d.Lock("FOR UPDATE"))
		if err != nil {
			return err
		}
		if out, err = cur.Acquire(holder, s.d.Now(), ttl); err != nil {
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
	err := s.d.Write(ctx, func(tx Querier) error {
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
	l, err := ReadLease(ctx, s.d, s.d.Reader(), name, "")
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, err)
	}
	return l, nil
}

// ReadLease reads a lease's row through q, with lock appended to the
// SELECT; each database's fence check reads it so inside its write
// transactions.
func ReadLease(ctx context.Context, d Driver, q Querier, name, lock string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var expires *int64
	err := q.QueryRow(ctx, `SELECT holder, term, expires FROM leases WHERE name = $1`+lock, name).Scan(&l.Holder, &l.Term, &expires)
	if d.NoRows(err) {
		return l, errdefs.ErrNotFound
	}
	if err != nil {
		return l, d.Classify(err)
	}
	l.Expires = sqlrow.TimeOf(expires)
	return l, nil
}
