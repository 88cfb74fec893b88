package accounts

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

func newAccounts(t *testing.T) (*Accounts, store.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(Config{MaxTTL: DefaultMaxTTL}, st, func() string { return "" }, slog.New(slog.DiscardHandler)), st
}

// TestWhoMayAskForWhat: each request is refused to those it is not for,
// with the error class the API answers, and done for those it is.
func TestWhoMayAskForWhat(t *testing.T) {
	a, st := newAccounts(t)
	ctx := t.Context()
	admin := auth.Principal{User: "root", Admin: true}
	gpuAdmin := auth.Principal{User: "ann", Groups: map[string]string{"gpu": api.RoleAdmin}}
	gpuWriter := auth.Principal{User: "bob", Groups: map[string]string{"gpu": api.RoleWrite}}
	for _, u := range []string{"root", "ann", "bob"} {
		if err := st.CreateUser(ctx, store.User{Name: u, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreateNode(ctx, store.Node{ID: "n-1", Name: "alpha", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}
	join := func(p auth.Principal, req api.CreateTokenRequest) error {
		_, err := a.CreateJoinToken(ctx, p, req)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error // nil: allowed
		do   func() error
	}{
		{"a group's admin makes its join token", nil, func() error { return join(gpuAdmin, api.CreateTokenRequest{Groups: []string{"gpu"}}) }},
		{"a group's writer may not", errdefs.ErrPermission, func() error { return join(gpuWriter, api.CreateTokenRequest{Groups: []string{"gpu"}}) }},
		{"no group is for admins", errdefs.ErrPermission, func() error { return join(gpuAdmin, api.CreateTokenRequest{}) }},
		{"a re-join token is for admins", errdefs.ErrPermission, func() error { return join(gpuAdmin, api.CreateTokenRequest{Node: "alpha"}) }},
		{"an admin re-joins a node by name", nil, func() error { return join(admin, api.CreateTokenRequest{Node: "alpha"}) }},
		{"a re-join token of an unknown node", errdefs.ErrNotFound, func() error { return join(admin, api.CreateTokenRequest{Node: "nope"}) }},
		{"a join token has no user", errdefs.ErrInvalid, func() error { return join(admin, api.CreateTokenRequest{User: "bob"}) }},
		{"another user's API token is for admins", errdefs.ErrPermission, func() error {
			_, err := a.CreateAPIToken(ctx, gpuWriter, api.CreateTokenRequest{User: "ann"})
			return err
		}},
		{"one's own API token", nil, func() error {
			_, err := a.CreateAPIToken(ctx, gpuWriter, api.CreateTokenRequest{})
			return err
		}},
		{"a group's admin sets its members", nil, func() error {
			_, err := a.SetMembership(ctx, gpuAdmin, "bob", "gpu", api.RoleRead)
			return err
		}},
		{"but not another group's", errdefs.ErrPermission, func() error {
			_, err := a.SetMembership(ctx, gpuAdmin, "bob", "cpu", api.RoleRead)
			return err
		}},
		{"an admin does not delete themselves", errdefs.ErrConflict, func() error { return a.DeleteUser(ctx, admin, "root") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("= %v, want %v", err, tc.err)
			}
		})
	}
}

// TestRevokeOnlyOnesOwn: a user revokes their own token, not another's;
// an admin revokes any.
func TestRevokeOnlyOnesOwn(t *testing.T) {
	a, st := newAccounts(t)
	ctx := t.Context()
	for _, u := range []string{"ann", "bob"} {
		if err := st.CreateUser(ctx, store.User{Name: u, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ann, bob := auth.Principal{User: "ann"}, auth.Principal{User: "bob"}
	tok, err := a.CreateAPIToken(ctx, ann, api.CreateTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeToken(ctx, bob, api.TokenAPI, tok.ID); !errors.Is(err, errdefs.ErrPermission) {
		t.Errorf("bob revokes ann's token = %v, want forbidden", err)
	}
	if err := a.RevokeToken(ctx, ann, api.TokenJoin, tok.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("revoke an API token as a join token = %v, want not found", err)
	}
	if err := a.RevokeToken(ctx, auth.Principal{User: "root", Admin: true}, api.TokenAPI, tok.ID); err != nil {
		t.Errorf("an admin revokes ann's token = %v", err)
	}
	if left, _ := st.ListTokens(ctx, store.TokenFilter{Kind: api.TokenAPI}); len(left) != 0 {
		t.Errorf("%d tokens left after the revoke, want 0", len(left))
	}
}
