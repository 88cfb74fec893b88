package hub

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// stallingLeases is a store whose lease renewals can be held up, as a
// frozen process's are.
type stallingLeases struct {
	store.Store
	stall atomic.Pointer[chan struct{}]
}

func (s *stallingLeases) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if ch := s.stall.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		}
	}
	return s.Store.AcquireLease(ctx, name, holder, ttl)
}

// TestReplicaLeaseRunOutClosesSessions: a server whose replica lease ran
// out while it could not renew it (frozen, cut off from the store) may
// have had its nodes declared offline and their tasks given away; it
// closes every session it holds, so that each agent says hello again and
// learns which tasks are no longer its own. Renewals in time close none.
func TestReplicaLeaseRunOutClosesSessions(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), t.TempDir()+"/s.db", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	st := &stallingLeases{Store: sq}
	lease := 150 * time.Millisecond
	h := newHubOver(t, st, func(c *Config) { c.ReplicaID, c.LeaderLease, c.Sole = "r-1", lease, false })
	ours, agents := proto.Pipe()
	h.Add(NewSession("n-1", ours, nil))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l, err := h.ClaimReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go h.replicaLoop(ctx, l)
	read := make(chan error, 1)
	go func() {
		_, err := agents.Read(context.Background())
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("the session was closed while the lease was renewed in time: %v", err)
	case <-time.After(4 * lease):
	}

	stall := make(chan struct{})
	st.stall.Store(&stall)
	time.Sleep(3 * lease) // frozen past the lease
	st.stall.Store(nil)
	close(stall)
	var ce *proto.CloseError
	select {
	case err := <-read:
		if !errors.As(err, &ce) {
			t.Fatalf("the agent's end read %v, want the server's close", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session stayed open after the replica lease ran out and was taken again")
	}
}
