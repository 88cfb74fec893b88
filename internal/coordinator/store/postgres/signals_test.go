package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
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

// TestAuthChangesAreSignalled: the database signals store.AuthChannel at
// the commit of each change to tokens, users and memberships, including
// cascades from a deleted node, made through any server; a server that
// hears it and empties its cache refuses the revoked token at once. A
// token's use (last_used, as every request records) signals nothing.
func TestAuthChangesAreSignalled(t *testing.T) {
	url := newDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	heard := make(chan struct{}, 16)
	go b.Listen(ctx, []string{store.AuthChannel}, func(_, payload string) {
		b.AuthChanged()
		if payload == "" {
			return // the reread that opens every listening
		}
		heard <- struct{}{}
	})
	// The listener is up once a signal sent now is heard.
	for sent := false; !sent; {
		if err := a.Signal(ctx, store.AuthChannel, "hello"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			sent = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	waitHeard := func(what string) {
		t.Helper()
		select {
		case <-heard:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s signal after %s", store.AuthChannel, what)
		}
	}
	if _, err := a.CreateNode(ctx, store.Node{ID: "n1", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}
	h := []byte("0123456789abcdef0123456789abcdef")
	if err := a.CreateToken(ctx, store.Token{ID: "c1", Kind: api.TokenNode, NodeID: "n1", Hash: h}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TokenByHash(ctx, h); err != nil { // b caches it
		t.Fatal(err)
	}
	if err := a.TouchTokens(ctx, map[string]time.Time{"c1": time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteNode(ctx, "n1"); err != nil { // its credential goes with it
		t.Fatal(err)
	}
	waitHeard("a node's delete")
	if _, err := b.TokenByHash(ctx, h); !errdefs.IsNotFound(err) {
		t.Errorf("TokenByHash on the other server after the node's delete = %v, want not found", err)
	}
	select {
	case <-heard:
		t.Error("a second signal came: TouchTokens, or the delete, signalled twice")
	default:
	}
}
