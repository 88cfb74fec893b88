package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// testServer is a real server over a SQLite store in a temp dir, served by
// httptest, with its bootstrap admin token.
type testServer struct {
	*Server
	http  *httptest.Server
	admin string
}

// newServer makes a server with cfg over a fresh SQLite store in dir (a
// temp dir when ""), bootstrapped, and returns it with its store and admin
// token. Both are closed when the test ends.
func newServer(t *testing.T, dir string, cfg Config) (*Server, store.Store, string) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st := openStore(t, dir)
	s, admin := newServerOver(t, dir, cfg, st)
	return s, st, admin
}

// openStore opens a SQLite store in dir, closed when the test ends.
func openStore(t testing.TB, dir string) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newServerOver makes a server with cfg over st with its data in dir,
// bootstraps it and returns it with the admin token. It is closed when
// the test ends.
func newServerOver(t *testing.T, dir string, cfg Config, st store.Store) (*Server, string) {
	t.Helper()
	cfg.DataDir = dir
	s, err := New(cfg, st, discardLog())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	admin, _, err := Bootstrap(t.Context(), st, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, admin
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	return newTestServerWith(t, Config{})
}

// newTestServerWith is newTestServer with a configuration of its own.
func newTestServerWith(t *testing.T, cfg Config) *testServer {
	t.Helper()
	s, _, admin := newServer(t, "", cfg)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testServer{Server: s, http: hs, admin: admin}
}

// call sends a JSON request with token and decodes a 2xx answer into out.
// It returns the status code and the raw body.
func (ts *testServer) call(t *testing.T, token, method, path string, in, out any) (int, string) {
	t.Helper()
	var body io.Reader
	var contentType string
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	resp, raw := ts.send(t, token, method, path, contentType, body)
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal([]byte(raw), out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, raw
}

// send sends body as it is (nil: none) with token and contentType (""
// for none of either), and returns the answer with its body read.
func (ts *testServer) send(t *testing.T, token, method, path, contentType string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.http.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// mustCall is call that fails the test unless the answer is want.
func (ts *testServer) mustCall(t *testing.T, want int, token, method, path string, in, out any) {
	t.Helper()
	if code, body := ts.call(t, token, method, path, in, out); code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, body, want)
	}
}

// user creates a user with roles in groups and returns an API token of theirs.
func (ts *testServer) user(t *testing.T, name string, admin bool, groups map[string]string) string {
	t.Helper()
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/users", api.CreateUserRequest{Name: name, Admin: admin, Groups: groups}, nil)
	var tk api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/tokens", api.CreateTokenRequest{User: name}, &tk)
	return tk.Secret
}

// joinToken makes a join token for groups (none: an admin's, for no group).
func (ts *testServer) joinToken(t *testing.T, groups ...string) string {
	t.Helper()
	var tk api.Token
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/join-tokens", api.CreateTokenRequest{Groups: groups}, &tk)
	return tk.Secret
}

// register registers a node as an agent would, with a join token or a node
// credential, and returns the status and the answer.
func (ts *testServer) register(t *testing.T, token string, req api.RegisterRequest) (int, api.RegisterResponse, string) {
	t.Helper()
	if req.Hardware.Cores == 0 {
		req.Hardware = api.Hardware{Cores: 2, MemoryBytes: 1 << 30}
	}
	var rr api.RegisterResponse
	code, body := ts.call(t, token, "POST", "/v1/agent/register", req, &rr)
	return code, rr, body
}

// nodeNamed registers a fresh node called name in groups and returns its ID
// and credential.
func (ts *testServer) nodeNamed(t *testing.T, name string, groups ...string) (string, string) {
	t.Helper()
	code, rr, body := ts.register(t, ts.joinToken(t, groups...), api.RegisterRequest{
		MachineID: "machine-" + name, DataDir: "/var/lib/nodemgr", Name: name, Groups: groups,
	})
	if code != http.StatusOK {
		t.Fatalf("register %s = %d %s", name, code, body)
	}
	return rr.NodeID, rr.Credential
}
