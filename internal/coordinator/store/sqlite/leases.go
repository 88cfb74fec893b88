package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// checkFence fails with store.ErrNotLeader when ctx carries a fence whose
// lease has another holder or term now. It runs first in every write
// transaction, which holds the write lock: no takeover can come between
// the check and the commit.
func checkFence(ctx context.Context, tx sqlQ) error {
	want, ok := store.FenceFrom(ctx)
	if !ok {
		return nil
	}
	cur, err := sqlstore.ReadLease(ctx, driver{}, tx, want.Name, "")
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
