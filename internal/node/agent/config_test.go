package agent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfigFile(t *testing.T) {
	c, err := LoadConfigFile(writeFile(t, `
server: http://10.1.2.3:7070
data_dir: /srv/agent
tags: [gpu, "cuda:11.8"]
labels: {zone: eu-1}
groups: [ml-team]
heartbeat_interval: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server != "http://10.1.2.3:7070" || !slices.Equal(c.Tags, []string{"gpu", "cuda:11.8"}) ||
		c.Labels["zone"] != "eu-1" || c.HeartbeatInterval != 5*time.Second {
		t.Errorf("LoadConfigFile = %+v", c)
	}
}

// TestLoadConfigFileErrors: a bad config file is refused at FILE:LINE:COL
// with the key and what is wrong, never a Go type.
func TestLoadConfigFileErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"typo", "server: http://x:1\ntgas: [gpu]\n", "2:1: tgas: unknown field; did you mean tags?"},
		{"duration without unit", "heartbeat_interval: 30\n", "1:21: heartbeat_interval: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 30"},
		{"bad duration", "reconnect_max: a minute\n", `1:16: reconnect_max: must be a duration with a unit, such as 30s, 5m or 1h30m; got the text "a minute"`},
		{"wrong type", "tags: gpu\n", `1:7: tags: must be a list, got the text "gpu"`},
		{"number as bool", "standalone: 1\n", "1:13: standalone: must be true or false, got the whole number 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.yaml)
			_, err := LoadConfigFile(path)
			if want := path + ":" + tc.want; err == nil || err.Error() != want {
				t.Errorf("LoadConfigFile(%q) = %v, want %s", tc.yaml, err, want)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("LoadConfigFile(%q) = %v, not ErrInvalid", tc.yaml, err)
			}
		})
	}
}

func TestEnvOverridesFile(t *testing.T) {
	c := Config{Server: "http://file:1", Tags: []string{"from-file"}}
	env := map[string]string{"NODEMGR_SERVER": "http://env:2", "NODEMGR_TAGS": "a, b,,c", "NODEMGR_LABELS": "k=v,x=y"}
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Server != "http://env:2" || !slices.Equal(c.Tags, []string{"a", "b", "c"}) || c.Labels["x"] != "y" {
		t.Errorf("after ApplyEnv: %+v", c)
	}
	bad := Config{}
	err := bad.ApplyEnv(func(k string) string {
		if k == "NODEMGR_LABELS" {
			return "novalue"
		}
		return ""
	})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("ApplyEnv with a bad label = %v, want invalid", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no server", Config{DataDir: t.TempDir()}, "server"},
		{"ftp server", Config{Server: "ftp://x", DataDir: t.TempDir()}, "server"},
		{"bad tag", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), Tags: []string{"a b"}}, "tags[0]"},
		{"bad group", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), Groups: []string{"ML"}}, "groups[0]"},
		{"backoff upside down", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), ReconnectMin: time.Minute, ReconnectMax: time.Second}, "reconnect_max"},
		{"plain HTTP beyond loopback", Config{Server: "http://192.0.2.1:7070", DataDir: t.TempDir()}, "server"},
		{"one replica in clear", Config{Server: "http://127.0.0.1:7070,http://192.0.2.1:7070", DataDir: t.TempDir()}, "server"},
		{"imds over https", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), IMDS: "https://169.254.169.254"}, "imds"},
		{"imds without a host", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), IMDS: "169.254.169.254"}, "imds"},
		{"imds polled too often", Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), IMDS: "http://169.254.169.254", IMDSInterval: time.Millisecond}, "imds_interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			if err := c.setDefaults(); err != nil {
				t.Fatal(err)
			}
			err := c.validate()
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("validate(%+v) = %v, want a field error on %s", tc.cfg, err, tc.field)
			}
		})
	}
}

func TestStateSavedPrivatelyAndAtomically(t *testing.T) {
	dir := t.TempDir()
	st := state{NodeID: "n-1", Credential: "nmn_secret", LastSeq: 7}
	if err := st.save(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(statePath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	back, err := loadState(dir)
	if err != nil || back.NodeID != "n-1" || back.LastSeq != 7 {
		t.Errorf("loadState = %+v, %v", back, err)
	}
	os.WriteFile(statePath(dir), []byte("{broken"), 0o600)
	if _, err := loadState(dir); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("loadState of a corrupt file = %v, want advice", err)
	}
}

func TestDefaultSocketFitsSunPath(t *testing.T) {
	short := "/var/lib/nodemgr/agent"
	if got := defaultSocket(short); got != "/var/lib/nodemgr/agent/agent.sock" {
		t.Errorf("defaultSocket(%q) = %q, want it in the data dir", short, got)
	}
	deep := "/" + strings.Repeat("very-deep-directory/", 8) + "agent"
	got := defaultSocket(deep)
	if len(got) > maxSocketPath || !strings.HasPrefix(got, os.TempDir()) {
		t.Errorf("defaultSocket(deep) = %q (%d bytes), want a short path in the temp dir", got, len(got))
	}
	if other := defaultSocket(deep + "2"); other == got {
		t.Errorf("two data dirs share the socket %q", got)
	}
}

// Secrets come from the config file, the environment or files they name;
// a file named later (the environment over the config file) beats a value
// given earlier, and secret files others may read are noted.
func TestSecretSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	joinFile := write("join", "nmj_fromfile\n", 0o600)
	apiFile := write("api", "  local-api-token-from-file \n", 0o644)
	empty := write("empty", "\n", 0o600)
	tests := []struct {
		name            string
		cfg             Config
		env             map[string]string
		join, api, open string
		errField        string
	}{
		{name: "config values", cfg: Config{JoinToken: "nmj_cfg", LocalAPIToken: "cfg-token"}, join: "nmj_cfg", api: "cfg-token"},
		{name: "config files", cfg: Config{JoinTokenFile: joinFile, LocalAPITokenFile: apiFile}, join: "nmj_fromfile", api: "local-api-token-from-file", open: apiFile},
		{name: "environment values", env: map[string]string{"NODEMGR_JOIN_TOKEN": "nmj_env", "NODEMGR_LOCAL_API_TOKEN": "env-token"}, join: "nmj_env", api: "env-token"},
		{name: "environment files beat config values", cfg: Config{JoinToken: "nmj_cfg"},
			env: map[string]string{"NODEMGR_JOIN_TOKEN_FILE": joinFile, "NODEMGR_LOCAL_API_TOKEN_FILE": apiFile}, join: "nmj_fromfile", api: "local-api-token-from-file", open: apiFile},
		{name: "an environment value beats a file", env: map[string]string{"NODEMGR_JOIN_TOKEN_FILE": joinFile, "NODEMGR_JOIN_TOKEN": "nmj_env"}, join: "nmj_env"},
		{name: "missing file", cfg: Config{JoinTokenFile: filepath.Join(dir, "nope")}, errField: "join_token_file"},
		{name: "empty file", cfg: Config{LocalAPITokenFile: empty}, errField: "local_api_token_file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Server, c.DataDir = "http://127.0.0.1:1", t.TempDir()
			if err := c.ApplyEnv(func(k string) string { return tc.env[k] }); err != nil {
				t.Fatal(err)
			}
			err := c.setDefaults()
			if tc.errField != "" {
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.errField {
					t.Fatalf("setDefaults = %v, want an error naming %s", err, tc.errField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.JoinToken != tc.join || c.LocalAPIToken != tc.api {
				t.Errorf("join token %q, local API token %q; want %q, %q", c.JoinToken, c.LocalAPIToken, tc.join, tc.api)
			}
			if open := strings.Join(c.openSecretFiles, ","); open != tc.open {
				t.Errorf("open secret files %q, want %q", open, tc.open)
			}
		})
	}
}

// TestApplyEnvEveryKey: each key of the file has its variable, read as
// the file reads it; a bad value names the variable.
func TestApplyEnvEveryKey(t *testing.T) {
	env := map[string]string{"NODEMGR_PROCS": "3", "NODEMGR_STANDALONE": "true", "NODEMGR_SHUTDOWN_GRACE": "1m",
		"NODEMGR_BLOB_CACHE_MAX": "1024", "NODEMGR_PORT_RANGE": "2000-3000", "NODEMGR_DEPOTS": "acme=https://d.example"}
	var c Config
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Procs != 3 || !c.Standalone || c.ShutdownGrace != time.Minute || c.BlobCacheMax != 1024 ||
		c.PortRange != "2000-3000" || c.Depots["acme"] != "https://d.example" {
		t.Errorf("after ApplyEnv(%v): %+v", env, c)
	}
	for name, value := range map[string]string{"NODEMGR_PROCS": "many", "NODEMGR_SHUTDOWN_GRACE": "30",
		"NODEMGR_STANDALONE": "perhaps", "NODEMGR_CONTAINER_DEFAULTS": "cpus=1"} {
		var c Config
		err := c.ApplyEnv(func(k string) string {
			if k == name {
				return value
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("ApplyEnv(%s=%s) = %v, want an error naming %s", name, value, err, name)
		}
	}
}

// TestAgentRefusesSecretsInClear is the audit's agent that sent its join
// token six times in 30 s over http:// beyond loopback: New refuses such a
// server before the agent dials anything (192.0.2.1 is TEST-NET, never
// contacted), and with insecure_http it starts and warns that the secrets
// travel in clear text.
func TestAgentRefusesSecretsInClear(t *testing.T) {
	const server = "http://192.0.2.1:7070"
	cfg := Config{Server: server, DataDir: t.TempDir(), JoinToken: "nmj_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs", OnboardShare: -1}
	_, err := New(cfg, slog.New(slog.DiscardHandler))
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "server" {
		t.Fatalf("New(server %s) = %v, want an error naming server", server, err)
	}
	for _, want := range []string{"clear text", "use https://192.0.2.1:7070", "--insecure-http", "insecure_http: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New(server %s) = %q, want it to say %q", server, err, want)
		}
	}

	var logs strings.Builder
	cfg.InsecureHTTP = true
	a, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("New(server %s, insecure_http) = %v", server, err)
	}
	a.Close() // not run: nothing goes to 192.0.2.1
	if !strings.Contains(logs.String(), "insecure_http: the join token and this node's credential go to the server in clear text") ||
		!strings.Contains(logs.String(), server) {
		t.Errorf("New(server %s, insecure_http) logged %q, want a warning naming the server", server, logs.String())
	}

	// Loopback needs no setting and gets no warning.
	logs.Reset()
	cfg.Server, cfg.InsecureHTTP, cfg.DataDir = "http://127.0.0.1:7070", true, t.TempDir()
	if a, err = New(cfg, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("New(server on loopback) = %v", err)
	}
	a.Close()
	if strings.Contains(logs.String(), "clear text") {
		t.Errorf("New(server on loopback) warned: %q", logs.String())
	}
}
