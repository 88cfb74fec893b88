package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestAStoppedLeadersLockDoesNotBlockATakeover: a leader stopped in the
// middle of a fenced write holds the lease row locked; PostgreSQL ends
// its session after idle_in_transaction_session_timeout, so the next
// leader takes over then, not never.
func TestAStoppedLeadersLockDoesNotBlockATakeover(t *testing.T) {
	url := newDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	a := open(t, url+sep+"idle_in_transaction_session_timeout=300")
	b := open(t, url)
	ctx := t.Context()
	first, err := a.AcquireLease(ctx, "leader", "a", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM leases WHERE name = 'leader' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	// ... and its process stops here, the transaction open.
	time.Sleep(250 * time.Millisecond) // the lease expires
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := b.AcquireLease(actx, "leader", "b", time.Second)
	if err != nil || got.Holder != "b" || got.Term <= first.Term {
		t.Fatalf("takeover while the old leader's transaction is open: %+v, %v; want b at a higher term than %d", got, err, first.Term)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("takeover took %v; want about the 300ms idle limit", took)
	}
}
