package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/coordinator/server"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// realServer is a real server over SQLite on 127.0.0.1, with its admin
// token.
func realServer(t *testing.T) (url, admin string) {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := server.New(server.Config{DataDir: dir}, st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	admin, _, err = server.Bootstrap(t.Context(), st, dir)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, admin
}

// TestJoinTokenListShowsGroupsAndUses: the audit's join-token ls showed
// neither the groups a token admits nodes into nor how many of its uses
// are spent, so an operator could not tell a leaked group token from an
// admin's or see that it was used.
func TestJoinTokenListShowsGroupsAndUses(t *testing.T) {
	url, admin := realServer(t)
	vars := map[string]string{"NODEMGR_ADDR": url, "NODEMGR_TOKEN": admin}
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, stderr := runEnv(t, vars, args...)
		if code != 0 {
			t.Fatalf("%s = exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	var scoped, open api.Token
	json.Unmarshal([]byte(mustRun("join-token", "create", "--name", "ml", "--group", "ml,ops", "--max-uses", "3", "--json")), &scoped)
	json.Unmarshal([]byte(mustRun("join-token", "create", "--name", "any", "--json")), &open)
	// One registration spends one of the scoped token's uses.
	body, _ := json.Marshal(api.RegisterRequest{MachineID: "m1", DataDir: "/d", Name: "n1", Hardware: api.Hardware{Cores: 1}})
	req, _ := http.NewRequest("POST", url+"/v1/agent/register", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+scoped.Secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register = %d", resp.StatusCode)
	}

	table := mustRun("join-token", "ls")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if h := strings.Fields(lines[0]); len(h) < 5 || h[2] != "GROUPS" || h[3] != "USES" || h[4] != "NODE" {
		t.Errorf("join-token ls header = %q, want ID NAME GROUPS USES NODE ...", lines[0])
	}
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[0]] = f
	}
	for _, tc := range []struct {
		id, groups, uses string
	}{
		{scoped.ID, "ml,ops", "1/3"},
		{open.ID, "-", "0/unlimited"},
	} {
		f := rows[tc.id]
		if len(f) < 4 || f[2] != tc.groups || f[3] != tc.uses {
			t.Errorf("join-token ls row of %s = %q, want groups %s, uses %s\n%s", tc.id, f, tc.groups, tc.uses, table)
		}
	}

	var list api.TokenList
	if err := json.Unmarshal([]byte(mustRun("join-token", "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, tk := range list.Tokens {
		if tk.ID == scoped.ID && (strings.Join(tk.Groups, ",") != "ml,ops" || tk.Uses != 1 || tk.MaxUses != 3) {
			t.Errorf("join-token ls --json of %s = groups %v, uses %d of %d; want [ml ops], 1 of 3", tk.ID, tk.Groups, tk.Uses, tk.MaxUses)
		}
	}
}

// TestTokenCreateToAFileWritesTheSecretAlone: `join-token create > FILE`
// (standard output not a terminal) writes the secret alone, so the file is
// a token file the agent reads as it is; the banner goes to stderr. The
// secret file reader takes what was written.
func TestTokenCreateToAFileWritesTheSecretAlone(t *testing.T) {
	url, admin := realServer(t)
	vars := map[string]string{"NODEMGR_ADDR": url, "NODEMGR_TOKEN": admin}
	for _, kind := range []string{"join-token", "token"} {
		code, out, stderr := runEnv(t, vars, kind, "create", "--name", "saved")
		if code != 0 {
			t.Fatalf("%s create = exit %d: %s", kind, code, stderr)
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || strings.ContainsAny(lines[0], " \t") {
			t.Errorf("%s create > FILE wrote %q, want the secret alone", kind, out)
		}
		if !strings.Contains(stderr, "shown only now") {
			t.Errorf("%s create > FILE: stderr %q, want the banner there", kind, stderr)
		}
		path := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if secret, _, err := auth.ReadSecretFile(path); err != nil || secret != strings.TrimSpace(out) {
			t.Errorf("reading back the %s file = %q, %v; want the secret", kind, secret, err)
		}
	}
}
