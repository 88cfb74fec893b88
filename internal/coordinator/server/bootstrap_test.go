package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
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

// TestBootstrapWritesAdminTokenPrivately is the audit's 0644 admin-token:
// a file already there (an earlier install, a copy) kept its mode when the
// first admin token was written over it.
func TestBootstrapWritesAdminTokenPrivately(t *testing.T) {
	for _, mode := range []os.FileMode{0, 0o644, 0o666} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := AdminTokenFile(dir)
			if mode != 0 {
				if err := os.WriteFile(path, []byte("stale\n"), mode); err != nil {
					t.Fatal(err)
				}
				os.Chmod(path, mode) // past the umask
			}
			st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			token, created, err := Bootstrap(t.Context(), st, dir)
			if err != nil || !created {
				t.Fatalf("Bootstrap = %v, %v", created, err)
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("admin-token over a file of mode %s: %v, %v; want mode 0600", mode, fi.Mode(), err)
			}
			if b, _ := os.ReadFile(path); string(b) != token+"\n" {
				t.Errorf("admin-token holds %q, want the new token", b)
			}
		})
	}
}
