package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// fenced wraps a write transaction's fn with the check of its fence: the
// lease's row, read FOR SHARE, must still have the fence's holder and
// term, else the transaction fails with store.ErrNotLeader before fn
// writes anything. The share lock holds a takeover (which updates the
// row) until this transaction ends.
func fenced(ctx context.Context, want store.Lease, fn func(tx pgx.Tx) error) func(tx pgx.Tx) error {
	return func(tx pgx.Tx) error {
		cur, err := sqlstore.ReadLease(ctx, driver{}, pgQuerier{tx}, want.Name, ` FOR SHARE`)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("check the write's fence, lease %s: %w", want.Name, err)
		}
		if err := store.Fenced(want, cur); err != nil {
			return err
		}
		return fn(tx)
	}
}
