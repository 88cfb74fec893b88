package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/internal/node/agent"
)

// runEnv is runArgs with environment variables.
func runEnv(t *testing.T, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, rawStdout: &out, rawStderr: &errb,
		getenv: func(k string) string { return environ[k] }}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// printedLine is one setting of --print-config: its value and source.
type printedLine struct{ value, source string }

var printedRE = regexp.MustCompile(`^(\w+): (.*?)\s+# (.*)$`)

// parsePrinted reads --print-config's output into key → value, source.
func parsePrinted(t *testing.T, out string) map[string]printedLine {
	t.Helper()
	m := map[string]printedLine{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		g := printedRE.FindStringSubmatch(line)
		if g == nil {
			t.Fatalf("--print-config line %q is not KEY: VALUE  # SOURCE", line)
		}
		m[g[1]] = printedLine{g[2], g[3]}
	}
	return m
}

// checkPrinted fails t unless got holds each line of want.
func checkPrinted(t *testing.T, got, want map[string]printedLine) {
	t.Helper()
	for key, w := range want {
		if got[key] != w {
			t.Errorf("--print-config %s = %+v, want %+v", key, got[key], w)
		}
	}
}

func TestServerSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "server.yaml", `
listen: 0.0.0.0:7000           # overridden by the variable and the flag
data_dir: /srv/nodemgr         # overridden by the variable
heartbeat_interval: 15s        # from the file
tls_san: [a.example, 10.0.0.1] # a list
log_level: debug
`)
	environ := map[string]string{
		"NODEMGR_SERVER_LISTEN":   "0.0.0.0:7001",
		"NODEMGR_SERVER_DATA_DIR": "/env/nodemgr",
		"NODEMGR_SERVER_DB":       "postgres://nodemgr:hunter2@db/nodemgr",
	}
	code, out, stderr := runEnv(t, environ, "server", "--config", file, "--print-config", "--listen", "127.0.0.1:7002")
	if code != 0 {
		t.Fatalf("server --print-config = exit %d: %s", code, stderr)
	}
	got := parsePrinted(t, out)
	want := map[string]printedLine{
		"listen":             {"127.0.0.1:7002", "flag --listen"},
		"data_dir":           {"/env/nodemgr", "env NODEMGR_SERVER_DATA_DIR"},
		"db":                 {"postgres://nodemgr:xxxxx@db/nodemgr", "env NODEMGR_SERVER_DB"},
		"heartbeat_interval": {"15s", "file " + file},
		"tls_san":            {"[a.example, 10.0.0.1]", "file " + file},
		"log_level":          {"debug", "file " + file},
		"offline_after":      {"2m0s", "default"},
		"blob_s3_path_style": {"false", "default"},
	}
	checkPrinted(t, got, want)
	if strings.Contains(out, "hunter2") {
		t.Errorf("--print-config shows the database password:\n%s", out)
	}
	for _, action := range []string{"config", "print_config", "reset_admin_token", "help", "addr", "token"} {
		if _, ok := got[action]; ok {
			t.Errorf("--print-config lists %s, which is not a server setting", action)
		}
	}
}

func TestServerConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"an unknown key", "listen: :1\ndata_dri: /x\n", nil, `server.yaml:2:1: data_dri: unknown setting; did you mean data_dir?`},
		{"a key far from any", "colour: blue\n", nil, `server.yaml:1:1: colour: unknown setting; ` + "`nodemgr server --print-config`" + ` lists the settings`},
		{"a duration without a unit", "heartbeat_interval: 30\n", nil, `server.yaml:1:21: heartbeat_interval: time: missing unit in duration "30"`},
		{"a list for a single value", "listen: [a, b]\n", nil, `server.yaml:1:9: listen: must be a single value, got a list`},
		{"a bad variable", "", map[string]string{"NODEMGR_SERVER_BLOB_MAX_SIZE": "big"}, `NODEMGR_SERVER_BLOB_MAX_SIZE: strconv.ParseInt: parsing "big": invalid syntax; fix or unset the variable`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, "server.yaml", tc.file)
			code, _, stderr := runEnv(t, tc.env, "server", "--config", file, "--print-config")
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("server --config with %s = exit %d, %q; want exit 1 and %q", tc.name, code, stderr, tc.want)
			}
		})
	}
}

func TestAgentPrintConfigSources(t *testing.T) {
	file := writeFile(t, "agent.yaml", `
server: http://file:7070
join_token: nmj_from_file
tags: [file]
container_defaults: {cpus: 1, memory_mb: 512}
`)
	environ := map[string]string{"NODEMGR_NAME": "from-env", "NODEMGR_PORT_RANGE": "20000-21000", "NODEMGR_RECONNECT_MAX": "2m"}
	code, out, stderr := runEnv(t, environ, "agent", "--config", file, "--print-config", "--data-dir", "/tmp/agent-x", "--tag", "a,b")
	if code != 0 {
		t.Fatalf("agent --print-config = exit %d: %s", code, stderr)
	}
	got := parsePrinted(t, out)
	want := map[string]printedLine{
		"server":             {"http://file:7070", "file " + file},
		"join_token":         {"<redacted>", "file " + file},
		"data_dir":           {"/tmp/agent-x", "flag --data-dir"},
		"tags":               {"[a, b]", "flag --tag"},
		"name":               {"from-env", "env NODEMGR_NAME"},
		"port_range":         {"20000-21000", "env NODEMGR_PORT_RANGE"},
		"reconnect_max":      {"2m0s", "env NODEMGR_RECONNECT_MAX"},
		"container_defaults": {"{cpus: 1, memory_mb: 512}", "file " + file},
		"local_api_socket":   {"/tmp/agent-x/agent.sock", "default"},
		"shutdown_grace":     {"30s", "default"},
	}
	checkPrinted(t, got, want)
	if strings.Contains(out, "nmj_from_file") {
		t.Errorf("--print-config shows the join token:\n%s", out)
	}
}

// uncomment turns a config template's commented settings into settings.
func uncomment(template []byte) string {
	return regexp.MustCompile(`(?m)^#(\w+: )`).ReplaceAllString(string(template), "$1")
}

// TestServerConfigTemplateIsTrue: the packaged server.yaml, every line
// uncommented, loads and changes nothing: its defaults are the code's.
func TestServerConfigTemplateIsTrue(t *testing.T) {
	tmpl, err := ConfigTemplate("server")
	if err != nil {
		t.Fatal(err)
	}
	_, defaults, _ := runEnv(t, nil, "server", "--print-config")
	file := writeFile(t, "server.yaml", uncomment(tmpl))
	code, out, stderr := runEnv(t, nil, "server", "--config", file, "--print-config")
	if code != 0 {
		t.Fatalf("server --config (the template, uncommented) = exit %d: %s", code, stderr)
	}
	got, want := parsePrinted(t, out), parsePrinted(t, defaults)
	if len(got) != len(want) {
		t.Errorf("the template sets %d settings, the server has %d", len(got), len(want))
	}
	for key, w := range want {
		if got[key].value != w.value || got[key].source != "file "+file {
			t.Errorf("template %s = %+v, want %q from the file", key, got[key], w.value)
		}
	}
}

// TestAgentConfigTemplateIsTrue: the packaged agent.yaml, uncommented,
// loads strictly and gives the agent's defaults.
func TestAgentConfigTemplateIsTrue(t *testing.T) {
	tmpl, err := ConfigTemplate("agent")
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "agent.yaml", uncomment(tmpl))
	cfg, err := agent.LoadConfigFile(file)
	if err != nil {
		t.Fatalf("the agent template, uncommented: %v", err)
	}
	got, err := cfg.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := agent.Config{}.WithDefaults()
	got.Name, want.Name = "", "" // the hostname
	if diff := cmp.Diff(want.Settings(), got.Settings(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("agent template differs from the defaults (-want +got):\n%s", diff)
	}
	if n, keys := strings.Count(uncomment(tmpl), "\n#"), len(want.Settings()); !strings.Contains(string(tmpl), "#server: \"\"") || n < keys {
		t.Errorf("agent template has %d comment lines for %d keys, or lacks #server", n, keys)
	}
}

func TestConfigTemplateRefusesOtherNames(t *testing.T) {
	for _, name := range []string{"worker", "node", ""} {
		if _, err := ConfigTemplate(name); err == nil {
			t.Errorf("ConfigTemplate(%q) = nil error, want one", name)
		}
	}
}

// TestEnvNamesDoNotCollide: the agent's variables (NODEMGR_<KEY>) and the
// server's (NODEMGR_SERVER_<KEY>) share a prefix; none may name both, or
// one exported for an agent would change a server on the same machine.
func TestEnvNamesDoNotCollide(t *testing.T) {
	e := &env{getenv: func(string) string { return "" }}
	cmd, _, _ := newRoot(e).Find([]string{"server"})
	agentVars := map[string]bool{}
	for _, s := range (agent.Config{}).Settings() {
		agentVars[agent.EnvName(s.Key)] = true
		agentVars[agent.EnvName(s.Key)+"_FILE"] = true
	}
	for _, s := range serverSettings(cmd) {
		if agentVars[s.env] {
			t.Errorf("server setting %s's variable %s is also an agent's", s.key, s.env)
		}
	}
}
