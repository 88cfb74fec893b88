package auth

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

func TestSecrets(t *testing.T) {
	s1, h1 := NewSecret(api.TokenJoin)
	s2, _ := NewSecret(api.TokenJoin)
	if s1 == s2 {
		t.Fatal("two secrets are equal")
	}
	if KindOf(s1) != api.TokenJoin {
		t.Errorf("KindOf(%q) = %q, want join", s1, KindOf(s1))
	}
	if !bytes.Equal(Hash(s1), h1) {
		t.Error("Hash(secret) differs from the hash NewSecret returned")
	}
	if KindOf("garbage") != "" {
		t.Error("KindOf(garbage) should be empty")
	}
}

func TestCan(t *testing.T) {
	p := Principal{User: "ann", Groups: map[string]string{"ml": api.RoleWrite, "ops": api.RoleRead}}
	tests := []struct {
		name   string
		p      Principal
		role   string
		groups []string
		want   bool
	}{
		{"write in ml", p, api.RoleWrite, []string{"ml"}, true},
		{"read implied by write", p, api.RoleRead, []string{"ml"}, true},
		{"admin not held", p, api.RoleAdmin, []string{"ml", "ops"}, false},
		{"write not in ops", p, api.RoleWrite, []string{"ops"}, false},
		{"any group suffices", p, api.RoleWrite, []string{"ops", "ml"}, true},
		{"no shared group", p, api.RoleRead, []string{"web"}, false},
		{"no groups", p, api.RoleRead, nil, false},
		{"superuser", Principal{Admin: true}, api.RoleAdmin, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Can(tc.role, tc.groups); got != tc.want {
				t.Errorf("Can(%s, %v) = %v, want %v", tc.role, tc.groups, got, tc.want)
			}
		})
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{"Bearer nmu_x", "nmu_x"},
		{"bearer nmu_x", "nmu_x"}, // RFC 7235: the scheme is case-insensitive
		{"BEARER nmu_x", "nmu_x"},
		{"BeArEr nmu_x", "nmu_x"},
		{"Bearer   nmu_x  ", "nmu_x"},
		{"  Bearer nmu_x", "nmu_x"},
		{"Bearer", ""},
		{"Bearer ", ""},
		{"Bearernmu_x", ""},
		{"Basic bnVfeDp5", ""},
		{"Token nmu_x", ""},
		{"", ""},
	} {
		if got := Bearer(tc.header); got != tc.want {
			t.Errorf("Bearer(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

// TestReadSecretFileRefusesMoreThanASecret: a file with a banner saved
// beside the token is refused, saying why, rather than sent whole (which
// the agent retried for ever: "invalid header field value").
func TestReadSecretFileRefusesMoreThanASecret(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		ok   bool
	}{
		"token":             {"nmj_abc123\n", true},
		"token, blank line": {"\n  nmj_abc123  \n\n", true},
		"banner and token":  {"Created join token t-1 (expires in 24h). The secret is shown only now:\n\nnmj_abc123\n", false},
		"two tokens":        {"nmj_a\nnmj_b\n", false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		secret, _, err := ReadSecretFile(path)
		if tc.ok && (err != nil || secret != "nmj_abc123") {
			t.Errorf("%s: ReadSecretFile = %q, %v; want the token", name, secret, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "not one secret")) {
			t.Errorf("%s: ReadSecretFile = %q, %v; want it refused as not one secret", name, secret, err)
		}
	}
}
