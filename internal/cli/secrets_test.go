package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/tlsca/tlscatest"
)

// runRoot runs the command line with args and environment vars, and
// returns stdout, stderr and the error.
func runRoot(t *testing.T, vars map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return vars[k] }}
	root := newRoot(e)
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

// whoamiServer answers GET /v1/whoami and records the Authorization it got.
type whoamiServer struct {
	mu   sync.Mutex
	auth string
}

func (s *whoamiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.auth = r.Header.Get("Authorization")
	s.mu.Unlock()
	io.WriteString(w, `{"name":"admin","admin":true,"groups":{}}`)
}

func (s *whoamiServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimPrefix(s.auth, "Bearer ")
}

func writeSecret(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// The client's token comes from --token, --token-file, NODEMGR_TOKEN or
// NODEMGR_TOKEN_FILE; only --token, which other local users can read, is
// warned about.
func TestClientToken(t *testing.T) {
	ws := &whoamiServer{}
	srv := httptest.NewServer(ws)
	defer srv.Close()
	private := writeSecret(t, "nmu_fromfile\n", 0o600)
	open := writeSecret(t, "nmu_openfile", 0o644)
	tests := []struct {
		name   string
		args   []string
		vars   map[string]string
		want   string
		stderr string // a line stderr must hold; "" : stderr must be empty
		errHas string
	}{
		{name: "flag", args: []string{"--token", "nmu_flag"}, want: "nmu_flag", stderr: "warning: --token is readable by every user of this machine (ps, /proc/PID/cmdline); use --token-file FILE or NODEMGR_TOKEN instead"},
		{name: "file flag", args: []string{"--token-file", private}, want: "nmu_fromfile"},
		{name: "variable", vars: map[string]string{"NODEMGR_TOKEN": "nmu_env"}, want: "nmu_env"},
		{name: "file variable", vars: map[string]string{"NODEMGR_TOKEN_FILE": private}, want: "nmu_fromfile"},
		{name: "file flag beats variable", args: []string{"--token-file", private}, vars: map[string]string{"NODEMGR_TOKEN": "nmu_env"}, want: "nmu_fromfile"},
		{name: "variable beats file variable", vars: map[string]string{"NODEMGR_TOKEN": "nmu_env", "NODEMGR_TOKEN_FILE": private}, want: "nmu_env"},
		{name: "file others may read", args: []string{"--token-file", open}, want: "nmu_openfile", stderr: "chmod 600"},
		{name: "missing file", args: []string{"--token-file", private + ".gone"}, errHas: "--token-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws.mu.Lock()
			ws.auth = ""
			ws.mu.Unlock()
			_, stderr, err := runRoot(t, tc.vars, append([]string{"whoami", "--addr", srv.URL}, tc.args...)...)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("whoami %q = %v, want an error naming %s", tc.args, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("whoami %q = %v", tc.args, err)
			}
			if ws.got() != tc.want {
				t.Errorf("whoami %q sent token %q, want %q", tc.args, ws.got(), tc.want)
			}
			if tc.stderr == "" && stderr != "" || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("whoami %q stderr = %q, want %q", tc.args, stderr, tc.stderr)
			}
			if n := strings.Count(stderr, "warning:"); n > 1 {
				t.Errorf("whoami %q warned %d times, want once", tc.args, n)
			}
		})
	}
}

// The agent's secrets given as flags are warned about; files given as
// flags beat values from the environment.
func TestAgentSecretFlags(t *testing.T) {
	file := writeSecret(t, "nmj_fromfile", 0o600)
	tests := []struct {
		name                string
		args                []string
		vars                map[string]string
		join, joinFile, api string
		warn                []string
	}{
		{name: "join token flag", args: []string{"--join-token", "nmj_flag"}, join: "nmj_flag", warn: []string{"--join-token is readable", "use --join-token-file FILE or NODEMGR_JOIN_TOKEN instead"}},
		{name: "local API token flag", args: []string{"--local-api-token", "0123456789abcdef"}, api: "0123456789abcdef", warn: []string{"--local-api-token is readable", "--local-api-token-file FILE or NODEMGR_LOCAL_API_TOKEN"}},
		{name: "file flag beats variable", args: []string{"--join-token-file", file}, vars: map[string]string{"NODEMGR_JOIN_TOKEN": "nmj_env"}, joinFile: file},
		{name: "variables", vars: map[string]string{"NODEMGR_JOIN_TOKEN": "nmj_env", "NODEMGR_LOCAL_API_TOKEN": "env-local-token-1"}, join: "nmj_env", api: "env-local-token-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &env{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string { return tc.vars[k] }}
			cmd := newAgentCmd(e)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			warnSecretFlags(cmd, e)
			cfg, err := agentConfig(cmd, e)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.JoinToken != tc.join || cfg.JoinTokenFile != tc.joinFile || cfg.LocalAPIToken != tc.api {
				t.Errorf("agent %q: join token %q, file %q, local API token %q; want %q, %q, %q",
					tc.args, cfg.JoinToken, cfg.JoinTokenFile, cfg.LocalAPIToken, tc.join, tc.joinFile, tc.api)
			}
			for _, w := range tc.warn {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("agent %q: stderr %q lacks %q", tc.args, stderr.String(), w)
				}
			}
			if len(tc.warn) == 0 && stderr.Len() > 0 {
				t.Errorf("agent %q: stderr %q, want no warning", tc.args, stderr.String())
			}
		})
	}
}

// A client verifies a server with its own CA given --ca-cert (or
// NODEMGR_CA_CERT); without it the system's roots refuse the server with
// an error that says to pass the CA.
func TestClientCACert(t *testing.T) {
	url, ca := tlscatest.Server(t, &whoamiServer{})
	caFile := writeSecret(t, string(ca.CertPEM), 0o644)
	hostPort := strings.TrimPrefix(url, "https://")

	tests := []struct {
		name   string
		args   []string
		vars   map[string]string
		errHas string
	}{
		{name: "flag", args: []string{"--addr", url, "--ca-cert", caFile}},
		{name: "variable", vars: map[string]string{"NODEMGR_ADDR": url, "NODEMGR_CA_CERT": caFile}},
		{name: "no scheme means https with a CA", args: []string{"--addr", hostPort, "--ca-cert", caFile}},
		{name: "no CA", args: []string{"--addr", url}, errHas: "pass the server's CA with --ca-cert"},
		{name: "plain http to it", args: []string{"--addr", "http://" + hostPort}, errHas: "the server speaks HTTPS"},
		{name: "CA file missing", args: []string{"--addr", url, "--ca-cert", caFile + ".gone"}, errHas: "--ca-cert"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"NODEMGR_TOKEN": "nmu_x"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			_, _, err := runRoot(t, vars, append([]string{"whoami"}, tc.args...)...)
			if tc.errHas == "" && err != nil {
				t.Fatalf("whoami %q = %v, want ok", tc.args, err)
			}
			if tc.errHas != "" && (err == nil || !strings.Contains(describe(err), tc.errHas)) {
				t.Fatalf("whoami %q = %v, want an error with %q", tc.args, err, tc.errHas)
			}
		})
	}
}
