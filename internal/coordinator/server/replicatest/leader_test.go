package replicatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/server"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The lease the tests elect with, and how often it is renewed (a third).
const (
	lease = time.Second
	renew = lease / 3
)

// pausable is a replica's store whose lease calls can be made to hang, as
// those of a paused process (or one cut off from the database) would. It
// keeps the last fenced context the replica's singleton loops wrote with,
// so a test can write as the old leader after a takeover.
type pausable struct {
	store.Store

	mu     sync.Mutex
	resume chan struct{} // non-nil while paused; closed to resume
	fenced context.Context
}

func (p *pausable) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

func (p *pausable) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

func (p *pausable) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	p.mu.Lock()
	resume := p.resume
	p.mu.Unlock()
	if resume != nil {
		select {
		case <-ctx.Done():
			return store.Lease{}, ctx.Err()
		case <-resume:
		}
	}
	return p.Store.AcquireLease(ctx, name, holder, ttl)
}

// CloseIdleSuites is a write the leader's suite loop makes every tick.
func (p *pausable) CloseIdleSuites(ctx context.Context, cutoff time.Time) ([]string, error) {
	if _, ok := store.FenceFrom(ctx); ok {
		p.mu.Lock()
		p.fenced = ctx
		p.mu.Unlock()
	}
	return p.Store.CloseIdleSuites(ctx, cutoff)
}

// fencedContext returns the last fenced context the loops wrote with,
// without its cancellation: a paused leader's loops, woken after the
// takeover, write with it before they see the term end.
func (p *pausable) fencedContext() (context.Context, store.Lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fenced == nil {
		return nil, store.Lease{}
	}
	l, _ := store.FenceFrom(p.fenced)
	return context.WithoutCancel(p.fenced), l
}

// replica is one server on the shared database, with a store (a
// connection pool) of its own.
type replica struct {
	id    string
	url   string
	store *pausable
	stop  context.CancelFunc
	done  chan struct{}
	err   error // what Serve returned, once done is closed
}

// startReplica serves a replica named id on the database at dbURL until
// stop or the end of the test.
func startReplica(t *testing.T, dbURL, id string) *replica {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	pg, err := postgres.Open(t.Context(), dbURL, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	st := &pausable{Store: pg}
	s, err := server.New(server.Config{DataDir: t.TempDir(), ReplicaID: id, LeaderLease: lease,
		SuiteTick: 20 * time.Millisecond}, st, log)
	if err != nil {
		t.Fatalf("server.New(%s): %v", id, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, url: "http://" + ln.Addr().String(), store: st, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = s.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		st.unpause()
		r.shutdown()
		s.Close()
	})
	return r
}

// shutdown stops the replica gracefully and waits for it.
func (r *replica) shutdown() {
	r.stop()
	<-r.done
}

// health is the replica's answer to /healthz.
func (r *replica) health(t *testing.T) api.Health {
	t.Helper()
	resp, err := http.Get(r.url + "/healthz")
	if err != nil {
		t.Fatalf("replica %s /healthz: %v", r.id, err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("replica %s /healthz = %d, %v", r.id, resp.StatusCode, err)
	}
	if h.Replica != r.id {
		t.Fatalf("replica %s /healthz names replica %q", r.id, h.Replica)
	}
	return h
}

// leaders returns the replicas whose /healthz says they lead.
func leaders(t *testing.T, rs ...*replica) []*replica {
	t.Helper()
	var out []*replica
	for _, r := range rs {
		if r.health(t).Leader {
			out = append(out, r)
		}
	}
	return out
}

// waitLeader waits up to wait until exactly one of rs leads, and returns
// it with its term and how long it took. With want, it waits until want
// is the one; either way, two never lead at once.
func waitLeader(t *testing.T, wait time.Duration, want *replica, rs ...*replica) (*replica, int64, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		if ls := leaders(t, rs...); len(ls) == 1 && (want == nil || ls[0] == want) {
			return ls[0], ls[0].health(t).Term, time.Since(start)
		} else if len(ls) > 1 {
			t.Fatalf("%d replicas lead at once", len(ls))
		}
		if time.Since(start) > wait {
			t.Fatalf("no replica leads within %s", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFenced waits until r's singleton loops wrote with a fence of term.
func waitFenced(t *testing.T, r *replica, term int64) context.Context {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, l := r.store.fencedContext()
		if ctx != nil && l.Term == term && strings.HasPrefix(l.Holder, r.id+"#") {
			return ctx
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s's loops wrote with no fence of term %d (last: %+v)", r.id, term, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaderTakeover: of two replicas on one database exactly one leads;
// when the leader stops renewing (paused), the other leads within a lease
// and a renewal at a higher term, and what the old leader's loops write
// after that is refused; when the new leader shuts down it hands over at
// once.
func TestLeaderTakeover(t *testing.T) {
	dbURL := pgtest.NewDatabaseFrom(t, "schema", func(ctx context.Context, url string) error {
		s, err := postgres.Open(ctx, url, nil)
		if err != nil {
			return err
		}
		return s.Close()
	})
	a, b := startReplica(t, dbURL, "r-a"), startReplica(t, dbURL, "r-b")

	old, oldTerm, took := waitLeader(t, 10*time.Second, nil, a, b)
	t.Logf("%s leads at term %d, %s after start", old.id, oldTerm, took.Round(time.Millisecond))
	// It stays the only one: the other keeps trying and is refused.
	for range 10 {
		if ls := leaders(t, a, b); len(ls) != 1 || ls[0] != old {
			t.Fatalf("leaders = %d, want %s alone", len(ls), old.id)
		}
		time.Sleep(renew / 2)
	}
	next := b
	if old == b {
		next = a
	}
	oldCtx := waitFenced(t, old, oldTerm)

	// The leader is paused: its renewals hang.
	old.store.pause()
	_, newTerm, took := waitLeader(t, 5*time.Second, next, a, b)
	if newTerm <= oldTerm {
		t.Errorf("new term %d, want more than the old %d", newTerm, oldTerm)
	}
	t.Logf("%s took over %s after the leader's renewals stopped (lease %s, renewal every %s)", next.id, took.Round(time.Millisecond), lease, renew)
	// From the pause: the lease runs out at most a lease after the last
	// renewal, and the follower tries every renewal period. The slack is
	// for a busy test machine.
	if limit := lease + renew + 250*time.Millisecond; took > limit {
		t.Errorf("takeover took %s, want within %s (lease + renewal + slack)", took, limit)
	}

	// The old leader's loops, woken after the takeover, write nothing.
	doc := store.Document{Kind: store.KindTemplate, Name: "from-the-old-leader", Body: []byte("name: x\n")}
	_, err := old.store.PutDocument(oldCtx, doc)
	if !errors.Is(err, store.ErrNotLeader) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("write fenced by the old term %d after the takeover = %v, want ErrNotLeader", oldTerm, err)
	}
	if _, err := next.store.GetDocument(t.Context(), doc.Kind, doc.Name); !errdefs.IsNotFound(err) {
		t.Errorf("the refused write is stored (GetDocument = %v)", err)
	}
	// The new leader's loops write.
	doc.Name = "from-the-new-leader"
	if _, err := next.store.PutDocument(waitFenced(t, next, newTerm), doc); err != nil {
		t.Errorf("write fenced by the new term %d = %v, want nil", newTerm, err)
	}

	// The old leader wakes up: it follows.
	old.store.unpause()
	time.Sleep(3 * renew)
	if ls := leaders(t, a, b); len(ls) != 1 || ls[0] != next {
		t.Fatalf("after the old leader woke: %d leaders, want %s alone", len(ls), next.id)
	}

	// The leader shuts down: it releases the lease, and the other leads
	// without waiting for it to run out.
	next.shutdown()
	start := time.Now()
	waitUntilLeads(t, old, newTerm)
	took = time.Since(start)
	t.Logf("%s leads %s after %s shut down", old.id, took.Round(time.Millisecond), next.id)
	if limit := renew + 250*time.Millisecond; took > limit {
		t.Errorf("handover after a graceful shutdown took %s, want within %s (a renewal period + slack), not a lease", took, limit)
	}
}

// waitUntilLeads waits until r leads at a term above after.
func waitUntilLeads(t *testing.T, r *replica, after int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var h api.Health
	for time.Now().Before(deadline) {
		if h = r.health(t); h.Leader && h.Term > after {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s does not lead at a term above %d: %s", r.id, after, fmt.Sprintf("%+v", h))
}
