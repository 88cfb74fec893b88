package cli

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestClientRefusesTokenInClear is the audit's `nodemgr whoami --addr
// http://10.77.3.1:P`: the admin token must not go over plain HTTP beyond
// loopback. The address is TEST-NET (192.0.2.0/24) and the refusal comes
// before any dial, so nothing is contacted; a dial would fail or hang,
// not answer with this message.
func TestClientRefusesTokenInClear(t *testing.T) {
	token := writeSecret(t, "nmu_secret\n", 0o600)
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
	}{
		{"--addr", []string{"--addr", "http://192.0.2.1:7070", "--token-file", token}, nil},
		{"host:port", []string{"--addr", "192.0.2.1:7070", "--token-file", token}, nil},
		{"NODEMGR_ADDR", nil, map[string]string{"NODEMGR_ADDR": "http://192.0.2.1:7070", "NODEMGR_TOKEN": "nmu_secret"}},
		{"NODEMGR_INSECURE_HTTP=false", nil, map[string]string{"NODEMGR_ADDR": "http://192.0.2.1:7070", "NODEMGR_TOKEN": "nmu_secret", "NODEMGR_INSECURE_HTTP": "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, _, stderr := runEnv(t, tc.vars, append([]string{"whoami"}, tc.args...)...)
			if code != 1 {
				t.Errorf("whoami %q = exit %d, want 1", tc.args, code)
			}
			for _, want := range []string{"refusing to send a token in clear text to http://192.0.2.1:7070", "use https://192.0.2.1:7070", "--insecure-http"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("whoami %q stderr = %q, want it to say %q", tc.args, stderr, want)
				}
			}
			if strings.Contains(stderr, "AllowInsecureHTTP") {
				t.Errorf("whoami %q stderr = %q names the Go option, want the flag", tc.args, stderr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("whoami %q took %s: it waited on the network instead of refusing first", tc.args, d)
			}
		})
	}
	if code, _, stderr := runEnv(t, map[string]string{"NODEMGR_INSECURE_HTTP": "maybe"}, "whoami", "--addr", "http://192.0.2.1:7070", "--token-file", token); code != 1 || !strings.Contains(stderr, "NODEMGR_INSECURE_HTTP") {
		t.Errorf("whoami with NODEMGR_INSECURE_HTTP=maybe = exit %d, %q; want an error naming the variable", code, stderr)
	}
}

// TestInsecureHTTPWarns: --insecure-http lets the token go, and says so,
// once. The client is made but not used: nothing beyond loopback is dialled.
func TestInsecureHTTPWarns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		vars     map[string]string
		wantWarn bool
	}{
		{"flag", []string{"--insecure-http", "--addr", "http://192.0.2.1:7070", "--token", "nmu_x"}, nil, true},
		{"variable", []string{"--addr", "http://192.0.2.1:7070"}, map[string]string{"NODEMGR_INSECURE_HTTP": "true", "NODEMGR_TOKEN": "nmu_x"}, true},
		{"HTTPS needs no warning", []string{"--insecure-http", "--addr", "https://192.0.2.1:7070", "--token", "nmu_x"}, nil, false},
		{"loopback needs no warning", []string{"--insecure-http", "--addr", "http://127.0.0.1:7070", "--token", "nmu_x"}, nil, false},
		{"no token, no warning", []string{"--insecure-http", "--addr", "http://192.0.2.1:7070"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &env{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(k string) string { return tc.vars[k] }}
			root := newRoot(e)
			cmd, _, err := root.Find([]string{"whoami"})
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			if conn, err := resolveConn(cmd, e); err != nil || !conn.insecureHTTP {
				t.Errorf("resolveConn(%q) = %+v, %v; want plain HTTP allowed", tc.args, conn, err)
			}
			clientFor(cmd, e)
			clientFor(cmd, e)
			warn := "warning: --insecure-http: the API token goes to http://192.0.2.1:7070 in clear text"
			if n := strings.Count(stderr.String(), warn); n != map[bool]int{true: 1}[tc.wantWarn] {
				t.Errorf("clientFor(%q) twice: stderr %q; want the warning %v, once", tc.args, stderr.String(), tc.wantWarn)
			}
		})
	}
}

// TestInsecureHTTPOnLoopback: plain HTTP on loopback needs no flag.
func TestInsecureHTTPOnLoopback(t *testing.T) {
	ws := &whoamiServer{}
	srv := httptest.NewServer(ws)
	defer srv.Close()
	code, stdout, stderr := runEnv(t, nil, "whoami", "--addr", srv.URL, "--token-file", writeSecret(t, "nmu_secret", 0o600))
	if code != 0 || !strings.Contains(stdout, "admin") || stderr != "" || ws.got() != "nmu_secret" {
		t.Errorf("whoami on loopback = exit %d, %q, %q, token %q; want it to work quietly", code, stdout, stderr, ws.got())
	}
}
