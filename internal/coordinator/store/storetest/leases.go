package storetest

// For leases the suite pins down:
//
//   - a lease is free until first acquired (GetLease: errdefs.ErrNotFound);
//     the first holder gets term 1;
//   - a renewal by the holder of a live lease keeps its term; a takeover
//     (free, released or expired, by anyone, the last holder too) is the
//     term plus one;
//   - another holder's live lease is errdefs.ErrConflict naming the holder;
//   - releasing keeps the term and clears holder and expiry; a release by
//     someone who does not hold it changes nothing and is no error;
//   - a write whose context is fenced (store.WithFence) commits only while
//     the lease has the fence's holder and term, else store.ErrNotLeader
//     (an errdefs.ErrConflict) and nothing written; a fenced write that
//     starts after a takeover returned always fails; unfenced writes never
//     look at leases.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// shortTTL is the lease the expiry tests let run out; they sleep
// expireWait, a little longer.
const (
	shortTTL   = 100 * time.Millisecond
	expireWait = 150 * time.Millisecond
)

// mustAcquire acquires a lease and checks what the store says of it.
func mustAcquire(t *testing.T, s store.Store, name, holder string, ttl time.Duration, wantTerm int64) store.Lease {
	t.Helper()
	before := time.Now()
	l, err := s.AcquireLease(t.Context(), name, holder, ttl)
	after := time.Now()
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q) = %v, want nil", name, holder, err)
	}
	if l.Name != name || l.Holder != holder || l.Term != wantTerm {
		t.Fatalf("AcquireLease(%q, %q) = %+v, want holder %q at term %d", name, holder, l, holder, wantTerm)
	}
	// The store's clock is the process's: now+ttl, taken during the call.
	if l.Expires.Before(before.Add(ttl).Add(-time.Millisecond)) || l.Expires.After(after.Add(ttl).Add(time.Millisecond)) {
		t.Errorf("AcquireLease(%q, %q).Expires = %v, want now+%s (%v .. %v)", name, holder, l.Expires, ttl, before.Add(ttl), after.Add(ttl))
	}
	return l
}

func sameLease(a, b store.Lease) bool {
	return a.Name == b.Name && a.Holder == b.Holder && a.Term == b.Term && a.Expires.Equal(b.Expires)
}

func mustGetLease(t *testing.T, s store.Store, name string) store.Lease {
	t.Helper()
	l, err := s.GetLease(t.Context(), name)
	if err != nil {
		t.Fatalf("GetLease(%q) = %v, want nil", name, err)
	}
	return l
}

func testLeaseAcquire(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.GetLease(ctx, "leader"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetLease of a lease never acquired = %v, want not found", err)
	}
	first := mustAcquire(t, s, "leader", "a", time.Minute, 1)
	renewed := mustAcquire(t, s, "leader", "a", time.Minute, 1)
	if renewed.Expires.Before(first.Expires) {
		t.Errorf("a renewal moved the expiry back: %v, then %v", first.Expires, renewed.Expires)
	}
	_, err := s.AcquireLease(ctx, "leader", "b", time.Minute)
	if !errors.Is(err, errdefs.ErrConflict) || errors.Is(err, store.ErrNotLeader) || !strings.Contains(err.Error(), `held by a`) {
		t.Errorf("AcquireLease by another holder of a live lease = %v, want a conflict naming holder a", err)
	}
	if got := mustGetLease(t, s, "leader"); got.Holder != "a" || got.Term != 1 || !got.Expires.Equal(renewed.Expires) {
		t.Errorf("GetLease after a refused acquire = %+v, want %+v", got, renewed)
	}
	// Leases are independent of each other.
	mustAcquire(t, s, "other", "b", time.Minute, 1)

	for _, tc := range []struct {
		name, lease, holder string
		ttl                 time.Duration
	}{
		{"no name", "", "a", time.Minute},
		{"no holder", "leader", "", time.Minute},
		{"zero ttl", "leader", "a", 0},
		{"negative ttl", "leader", "a", -time.Second},
	} {
		if _, err := s.AcquireLease(ctx, tc.lease, tc.holder, tc.ttl); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("AcquireLease(%s) = %v, want invalid", tc.name, err)
		}
	}
}

func testLeaseTakeover(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustAcquire(t, s, "leader", "a", shortTTL, 1)
	time.Sleep(expireWait)
	mustAcquire(t, s, "leader", "b", time.Minute, 2)
	if _, err := s.AcquireLease(ctx, "leader", "a", time.Minute); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("AcquireLease by the old holder after a takeover = %v, want conflict", err)
	}
}

// testLeaseExpiredSelf: a holder whose lease ran out and takes it again
// starts a new term, since another could have held it meanwhile.
func testLeaseExpiredSelf(t *testing.T, s store.Store) {
	mustAcquire(t, s, "leader", "a", shortTTL, 1)
	time.Sleep(expireWait)
	mustAcquire(t, s, "leader", "a", time.Minute, 2)
}

func testLeaseRelease(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.ReleaseLease(ctx, "leader", "a"); err != nil {
		t.Errorf("ReleaseLease of a lease never acquired = %v, want nil", err)
	}
	held := mustAcquire(t, s, "leader", "a", time.Minute, 1)
	if err := s.ReleaseLease(ctx, "leader", "b"); err != nil {
		t.Errorf("ReleaseLease by a non-holder = %v, want nil", err)
	}
	if got := mustGetLease(t, s, "leader"); !sameLease(got, held) {
		t.Errorf("GetLease after a non-holder's release = %+v, want %+v", got, held)
	}
	if err := s.ReleaseLease(ctx, "leader", "a"); err != nil {
		t.Fatalf("ReleaseLease by the holder = %v, want nil", err)
	}
	if got, want := mustGetLease(t, s, "leader"), (store.Lease{Name: "leader", Term: 1}); !sameLease(got, want) {
		t.Errorf("GetLease after release = %+v, want %+v", got, want)
	}
	// Another takes it at once, at the next term.
	mustAcquire(t, s, "leader", "b", time.Minute, 2)
}

func testFencedWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateNode(t, s, newNode("n1"))
	old := mustAcquire(t, s, "leader", "a", time.Minute, 1)
	oldCtx := store.WithFence(ctx, old)
	if got, ok := store.FenceFrom(oldCtx); !ok || !sameLease(got, old) {
		t.Fatalf("FenceFrom(WithFence(l)) = %+v, %v; want %+v, true", got, ok, old)
	}
	if _, ok := store.FenceFrom(ctx); ok {
		t.Fatal("FenceFrom of a context without a fence says it has one")
	}
	put := func(ctx context.Context, body string) error {
		_, err := s.PutDocument(ctx, store.Document{Kind: store.KindTemplate, Name: "t", Body: []byte(body)})
		return err
	}
	if err := put(oldCtx, "one"); err != nil {
		t.Fatalf("PutDocument fenced by the current term = %v, want nil", err)
	}
	if _, err := s.SetNodeStatus(oldCtx, "n1", api.StatusSuspect, "fenced"); err != nil {
		t.Fatalf("SetNodeStatus fenced by the current term = %v, want nil", err)
	}
	// Renewals keep the term, and so the fence.
	mustAcquire(t, s, "leader", "a", time.Minute, 1)
	if err := put(oldCtx, "two"); err != nil {
		t.Fatalf("PutDocument fenced by the current term after a renewal = %v, want nil", err)
	}

	// b takes over: a's fence writes nothing more.
	if err := s.ReleaseLease(ctx, "leader", "a"); err != nil {
		t.Fatal(err)
	}
	if err := put(oldCtx, "released"); !errors.Is(err, store.ErrNotLeader) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("PutDocument fenced by a released lease = %v, want ErrNotLeader (a conflict)", err)
	}
	cur := mustAcquire(t, s, "leader", "b", time.Minute, 2)
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"PutDocument", func() error { return put(oldCtx, "stale") }},
		{"SetNodeStatus", func() error {
			_, err := s.SetNodeStatus(oldCtx, "n1", api.StatusOffline, "stale")
			return err
		}},
		{"CreateNode", func() error { _, err := s.CreateNode(oldCtx, newNode("n2")); return err }},
	} {
		if err := tc.write(); !errors.Is(err, store.ErrNotLeader) || !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("%s fenced by an old term = %v, want ErrNotLeader (a conflict)", tc.name, err)
		}
	}
	if d, err := s.GetDocument(ctx, store.KindTemplate, "t"); err != nil || string(d.Body) != "two" || d.Version != 2 {
		t.Errorf("GetDocument after refused writes = %q version %d, %v; want %q version 2", d.Body, d.Version, err, "two")
	}
	if n := mustGetNode(t, s, "n1"); n.Status != api.StatusSuspect {
		t.Errorf("node status after a refused write = %q, want %q", n.Status, api.StatusSuspect)
	}
	if _, err := s.GetNode(ctx, "n2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode of a node created by a refused write = %v, want not found", err)
	}

	// The new term's fence writes; so does a context with no fence.
	if err := put(store.WithFence(ctx, cur), "three"); err != nil {
		t.Errorf("PutDocument fenced by the new term = %v, want nil", err)
	}
	if err := put(ctx, "four"); err != nil {
		t.Errorf("PutDocument without a fence = %v, want nil", err)
	}
	// A fence of a lease that does not exist never writes.
	never := store.WithFence(ctx, store.Lease{Name: "never", Holder: "a", Term: 1})
	if err := put(never, "never"); !errors.Is(err, store.ErrNotLeader) {
		t.Errorf("PutDocument fenced by a lease never acquired = %v, want ErrNotLeader", err)
	}
}

// testFenceRace: fenced writes race a takeover. Those that began before it
// may land or not; none that began after the takeover returned may.
func testFenceRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreateNode(t, s, newNode("n1"))
	old := mustAcquire(t, s, "leader", "a", time.Minute, 1)
	fenced := store.WithFence(ctx, old)

	var takenOver sync.WaitGroup
	takenOver.Add(1)
	var done time.Time
	go func() {
		defer takenOver.Done()
		time.Sleep(20 * time.Millisecond)
		if err := s.ReleaseLease(ctx, "leader", "a"); err != nil {
			t.Error(err)
		}
		if _, err := s.AcquireLease(ctx, "leader", "b", time.Minute); err != nil {
			t.Error(err)
		}
		done = time.Now()
	}()

	type result struct {
		start time.Time
		err   error
	}
	const writers, each = 4, 15
	results := make([][]result, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range each {
				start := time.Now()
				_, err := s.Enqueue(fenced, "n1", "ping", nil)
				results[w] = append(results[w], result{start, err})
				time.Sleep(3 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	takenOver.Wait()

	landed := 0
	for w := range results {
		for i, r := range results[w] {
			switch {
			case r.err == nil:
				landed++
				if r.start.After(done) {
					t.Errorf("writer %d write %d began %s after the takeover and landed", w, i, r.start.Sub(done))
				}
			case !errors.Is(r.err, store.ErrNotLeader):
				t.Errorf("writer %d write %d = %v, want nil or ErrNotLeader", w, i, r.err)
			}
		}
	}
	pending, err := s.Pending(ctx, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != landed {
		t.Errorf("%d notifications stored, want the %d writes that landed", len(pending), landed)
	}
	t.Logf("%d of %d fenced writes landed before the takeover", landed, writers*each)
}
