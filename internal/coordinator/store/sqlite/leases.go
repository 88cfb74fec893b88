package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// AcquireLease takes, takes over or renews a lease (see store.Leases). The
// single writer orders it with every other write, fenced ones included.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := store.CheckLeaseArgs(name, holder, ttl); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	var out store.Lease
	err := s.write(ctx, func(tx *sql.Tx) error {
		cur, err := getLease(ctx, tx, name)
		if errors.Is(err, errdefs.ErrNotFound) {
			cur, err = store.Lease{Name: name}, nil
		}
		if err != nil {
			return err
		}
		if out, err = cur.Acquire(holder, s.now(), ttl); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO leases (name, holder, term, expires) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, term = excluded.term, expires = excluded.expires`,
			name, out.Holder, out.Term, sqlrow.TimeArg(out.Expires))
		return classify(err)
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %s for %s: %w", name, holder, err)
	}
	return out, nil
}

// ReleaseLease gives a lease up if holder holds it; its term stays.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE leases SET holder = '', expires = NULL WHERE name = ? AND holder = ?`, name, holder)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("release lease %s of %s: %w", name, holder, err)
	}
	return nil
}

// GetLease reads a lease.
func (s *Store) GetLease(ctx context.Context, name string) (store.Lease, error) {
	l, err := getLease(ctx, s.r, name)
	if err != nil {
		return l, fmt.Errorf("get lease %s: %w", name, err)
	}
	return l, nil
}

func getLease(ctx context.Context, q querier, name string) (store.Lease, error) {
	l := store.Lease{Name: name}
	var expires sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT holder, term, expires FROM leases WHERE name = ?`, name).Scan(&l.Holder, &l.Term, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return l, errdefs.ErrNotFound
	}
	if err != nil {
		return l, classify(err)
	}
	l.Expires = timeOf(expires)
	return l, nil
}

// checkFence fails with store.ErrNotLeader when ctx carries a fence whose
// lease has another holder or term now. It runs first in every write
// transaction, which holds the write lock: no takeover can come between
// the check and the commit.
func checkFence(ctx context.Context, tx *sql.Tx) error {
	want, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	cur, err := getLease(ctx, tx, want.Name)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("check the write's fence, lease %s: %w", want.Name, err)
	}
	return store.Fenced(want, cur)
}

// SoleServer says that the store serves one server process: a SQLite file
// is not shared by replicas, so a leader lease held for another replica
// was left by a server that stopped without releasing it, and the server
// may take it over at once instead of waiting for it to run out. (Were a
// second server to run on the file, the takeover would still be safe: the
// first one's fenced writes fail, and it follows from its next renewal.)
func (s *Store) SoleServer() bool { return true }
