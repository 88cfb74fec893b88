package postgres

import (
	"context"
	"testing"
	"time"
)

// TestSignals: a signal sent by one store reaches a listener on another
// store of the same database (two servers), after the "reread" call that
// opens every listening; a listener that is cancelled returns nil.
func TestSignals(t *testing.T) {
	url := newDatabase(t)
	a, b := open(t, url), open(t, url)
	type heard struct{ channel, payload string }
	got := make(chan heard, 16)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- b.Listen(ctx, []string{"nodemgr_outbox", "nodemgr_wake"}, func(c, p string) { got <- heard{c, p} })
	}()
	want := func(w heard) {
		t.Helper()
		select {
		case h := <-got:
			if h != w {
				t.Fatalf("heard %+v, want %+v", h, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("heard nothing, want %+v", w)
		}
	}
	want(heard{"nodemgr_outbox", ""}) // listening: reread
	want(heard{"nodemgr_wake", ""})
	if err := a.Signal(ctx, "nodemgr_outbox", "n-1"); err != nil {
		t.Fatal(err)
	}
	want(heard{"nodemgr_outbox", "n-1"})
	if err := a.Signal(ctx, "nodemgr_wake", "r-a s-1"); err != nil {
		t.Fatal(err)
	}
	want(heard{"nodemgr_wake", "r-a s-1"})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Listen after cancel = %v, want nil", err)
	}
}
