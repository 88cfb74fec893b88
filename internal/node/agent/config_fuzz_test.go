package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

// FuzzLoadConfigFile reads arbitrary agent config files. LoadConfigFile
// must refuse with a field error, or return a config that comes back
// equal when written out as YAML and read again, and that setDefaults and
// validate then accept or refuse with a field error.
func FuzzLoadConfigFile(f *testing.F) {
	for _, s := range []string{
		"server: http://10.1.2.3:7070\ndata_dir: /srv/agent\ntags: [gpu, \"cuda:11.8\"]\nlabels: {zone: eu-1}\ngroups: [ml-team]\nheartbeat_interval: 5s\n",
		"standalone: true\nprefix: /opt/nodemgr\ndepots: {com.example: \"https://depot.example.com/artifacts\"}\nlocal_api_listen: 127.0.0.1:7071\nlocal_api_token: 0123456789abcdef\nonboard_share: 50\nport_range: 20000-21000\nprocs: 2\ncontainer_usage_interval: 1s\nreconnect_min: 2s\nreconnect_max: 1m\nshutdown_grace: 10s\n",
		"server: ftp://x\n", "bogus: 1\n", "heartbeat_interval: -5s\n", "heartbeat_interval: 5\n", "port_range: 2-1\n",
		"onboard_share: 95\n", "local_api_socket: /" + string(make([]byte, 120)) + "\n", "server: http://x\nserver: http://y\n",
		"tags: gpu\n", "labels: [a]\n", "", "---\n", "{", "server: &a http://x\nname: *a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := LoadConfigFile(writeConfig(t, data))
		if err != nil {
			checkConfigError(t, "LoadConfigFile", err)
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("yaml.Marshal(%+v) = %v", c, err)
		}
		again, err := LoadConfigFile(writeConfig(t, out))
		if err != nil {
			t.Fatalf("LoadConfigFile(yaml.Marshal(LoadConfigFile(%q))) = %v; YAML:\n%s", data, err, out)
		}
		if diff := cmp.Diff(c, again, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(Config{})); diff != "" {
			t.Fatalf("config changed on a round trip through YAML (-first +again):\n%s\nYAML:\n%s", diff, out)
		}
		// Secret files are read by setDefaults; leave the fuzzer's paths
		// alone.
		c.JoinTokenFile, c.LocalAPITokenFile = "", ""
		if err := c.setDefaults(); err != nil {
			checkConfigError(t, "setDefaults", err)
			return
		}
		if err := c.validate(); err != nil {
			checkConfigError(t, "validate", err)
		}
	})
}

func writeConfig(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkConfigError(t *testing.T, what string, err error) {
	t.Helper()
	// A fault of the whole file (bad YAML, a list at the top) has no
	// field, only its place in the file.
	var ye *yamlfield.Error
	if errors.As(err, &ye) && ye.Field == "" && ye.Source != "" && ye.Reason != "" {
		return
	}
	var fe *errdefs.FieldError
	if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
		t.Fatalf("%s = %v, want a field error naming the field", what, err)
	}
}
