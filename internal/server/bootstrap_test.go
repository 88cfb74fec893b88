package server

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/auth"
	"github.com/nodemgr/nodemgr/internal/store"
	"github.com/nodemgr/nodemgr/internal/store/sqlite"
)

// noUsersYet is a store that, like one read by two servers starting at the
// same moment, shows no users though another server made the admin.
type noUsersYet struct{ store.Store }

func (noUsersYet) ListUsers(context.Context, store.Page) ([]store.User, error) { return nil, nil }

// TestBootstrapOfTwoServersAtOnce checks that a server that finds the
// admin made by another between its look and its write starts as any later
// server does: no error, no token of its own, the other's token left alone.
func TestBootstrapOfTwoServersAtOnce(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, created, err := Bootstrap(ctx, st, t.TempDir())
	if err != nil || !created {
		t.Fatalf("Bootstrap() of the first server = %v, %v, want created", created, err)
	}
	second, created, err := Bootstrap(ctx, noUsersYet{st}, t.TempDir())
	if err != nil || created || second != "" {
		t.Fatalf("Bootstrap() of the second = %q, %v, %v, want nothing made and no error", second, created, err)
	}
	tokens, err := st.ListTokens(ctx, store.TokenFilter{User: "admin"})
	if err != nil || len(tokens) != 1 {
		t.Errorf("admin tokens = %d, %v, want the first server's one", len(tokens), err)
	}
	if _, err := st.TokenByHash(ctx, auth.Hash(first)); err != nil {
		t.Errorf("the first server's token: %v, want it still good", err)
	}
}
