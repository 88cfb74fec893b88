package server

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestTokenKindsAreRevokedByTheirOwnRoute: each DELETE route revokes its
// own kind only; the audit deleted API tokens through the join-token
// route and node credentials through the API-token route.
func TestTokenKindsAreRevokedByTheirOwnRoute(t *testing.T) {
	ts := newTestServer(t)
	_, cred := ts.nodeNamed(t, "n1")
	var all api.TokenList
	var apiTok, joinTok api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Name: "x"}, &apiTok)
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{}, &joinTok)

	node, err := ts.store.ListTokens(t.Context(), store.TokenFilter{Kind: api.TokenNode})
	if err != nil || len(node) != 1 {
		t.Fatalf("node credentials = %v, %v; want 1", node, err)
	}
	for _, tc := range []struct{ path, id string }{
		{"/v1/join-tokens/", apiTok.ID},
		{"/v1/tokens/", joinTok.ID},
		{"/v1/tokens/", node[0].ID},
		{"/v1/join-tokens/", node[0].ID},
	} {
		if code, body := ts.call(t, ts.admin, "DELETE", tc.path+tc.id, nil, nil); code != http.StatusNotFound {
			t.Errorf("DELETE %s%s = %d %s, want 404", tc.path, tc.id, code, body)
		}
	}
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/tokens", nil, &all)
	if len(all.Tokens) != 2 { // bootstrap + x
		t.Errorf("API tokens after the refused deletes = %d, want 2", len(all.Tokens))
	}
	if code, _, body := ts.register(t, cred, api.RegisterRequest{MachineID: "machine-n1", DataDir: "/var/lib/nodemgr", Name: "n1"}); code != http.StatusOK {
		t.Errorf("node credential after the refused deletes: register = %d %s, want 200", code, body)
	}
	ts.mustCall(t, http.StatusNoContent, ts.admin, "DELETE", "/v1/join-tokens/"+joinTok.ID, nil, nil)
	ts.mustCall(t, http.StatusNoContent, ts.admin, "DELETE", "/v1/tokens/"+apiTok.ID, nil, nil)
}

// TestTokenLifetimesAreCapped: no token outlives the server's cap, the
// first admin token included.
func TestTokenLifetimesAreCapped(t *testing.T) {
	ts := newTestServer(t)
	reader := ts.user(t, "reader", false, map[string]string{"a": api.RoleRead})
	code, body := ts.call(t, reader, "POST", "/v1/tokens", api.CreateTokenRequest{TTL: "2500000h"}, nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "max-token-ttl") {
		t.Errorf("token expiring in 2319 = %d %s, want 400 naming --max-token-ttl", code, body)
	}
	if code, body := ts.call(t, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{TTL: "9000h"}, nil); code != http.StatusBadRequest {
		t.Errorf("join token past the cap = %d %s, want 400", code, body)
	}
	var ok api.Token
	ts.mustCall(t, http.StatusCreated, reader, "POST", "/v1/tokens", api.CreateTokenRequest{TTL: "8760h"}, &ok)

	var mine api.TokenList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/tokens", nil, &mine)
	for _, tk := range mine.Tokens {
		if tk.ExpiresAt == nil || tk.ExpiresAt.After(time.Now().Add(DefaultMaxTokenTTL)) {
			t.Errorf("token %s (%s) expires %v, want within %s", tk.ID, tk.Name, tk.ExpiresAt, DefaultMaxTokenTTL)
		}
	}
}

// TestRotateAdminToken: rotating the first admin token gives a new secret
// that works, revokes the old one and rewrites the admin-token file.
func TestRotateAdminToken(t *testing.T) {
	ts := newTestServer(t)
	var who api.TokenList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/tokens", nil, &who)
	if len(who.Tokens) != 1 {
		t.Fatalf("tokens = %v, want the bootstrap one", who.Tokens)
	}
	other := ts.user(t, "other", false, map[string]string{"a": api.RoleAdmin})
	if code, body := ts.call(t, other, "POST", "/v1/tokens/"+who.Tokens[0].ID+"/rotate", nil, nil); code != http.StatusForbidden {
		t.Errorf("group admin rotating the admin's token = %d %s, want 403", code, body)
	}
	var fresh api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/tokens/"+who.Tokens[0].ID+"/rotate", nil, &fresh)
	if fresh.Secret == "" || fresh.Secret == ts.admin || fresh.Name != "bootstrap" {
		t.Fatalf("rotated token = %+v, want a new secret named bootstrap", fresh)
	}
	if code, _ := ts.call(t, ts.admin, "GET", "/v1/whoami", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("old admin token after rotation = %d, want 401", code)
	}
	ts.mustCall(t, http.StatusOK, fresh.Secret, "GET", "/v1/whoami", nil, nil)
	b, err := os.ReadFile(AdminTokenFile(ts.cfg.DataDir))
	if err != nil || strings.TrimSpace(string(b)) != fresh.Secret {
		t.Errorf("admin-token file = %q, %v; want the rotated secret", b, err)
	}
}

// TestResetAdminToken: whoever holds the data dir gets back in when every
// admin token is gone.
func TestResetAdminToken(t *testing.T) {
	ts := newTestServer(t)
	var mine api.TokenList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/tokens", nil, &mine)
	ts.mustCall(t, http.StatusNoContent, ts.admin, "DELETE", "/v1/tokens/"+mine.Tokens[0].ID, nil, nil)
	if code, _ := ts.call(t, ts.admin, "GET", "/v1/whoami", nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("revoked admin token = %d, want 401", code)
	}
	secret, err := ResetAdminToken(t.Context(), ts.store, ts.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	var who api.User
	ts.mustCall(t, http.StatusOK, secret, "GET", "/v1/whoami", nil, &who)
	if who.Name != "admin" || !who.Admin {
		t.Errorf("reset token belongs to %+v, want the admin user", who)
	}
	if b, _ := os.ReadFile(AdminTokenFile(ts.cfg.DataDir)); strings.TrimSpace(string(b)) != secret {
		t.Errorf("admin-token file = %q, want the new secret", b)
	}
}
