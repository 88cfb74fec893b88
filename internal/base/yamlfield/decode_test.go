package yamlfield_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

type agentLike struct {
	Server    string            `yaml:"server"`
	Heartbeat time.Duration     `yaml:"heartbeat_interval"`
	Share     int               `yaml:"onboard_share"`
	Labels    map[string]string `yaml:"labels"`
	Version   string            `yaml:"-"`
}

// TestUnmarshalErrors: every file people write by hand fails with
// FILE:LINE:COL, the field path and the reason, never a Go type name.
func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		into any
		yaml string
		want string
	}{
		{"service unknown key", &api.ServiceSpec{}, "coordinate: a.b.c.d\ncomand: [x]\n",
			"svc.yaml:2:1: comand: unknown field; did you mean command?"},
		{"service typo", &api.ServiceSpec{}, "coordinate: a.b.c.d\nartefact: g:a:1\n",
			"svc.yaml:2:1: artefact: unknown field; did you mean artifact?"},
		{"service nested typo", &api.ServiceSpec{}, "restart:\n  polcy: always\n",
			"svc.yaml:2:3: restart.polcy: unknown field; did you mean policy?"},
		{"service bad duration", &api.ServiceSpec{}, "stop_grace: 10\n",
			"svc.yaml:1:13: stop_grace: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 10"},
		{"service bad duration text", &api.ServiceSpec{}, "restart:\n  delay: soon\n",
			`svc.yaml:2:10: restart.delay: must be a duration with a unit, such as 30s, 5m or 1h30m; got the text "soon"`},
		{"suite wrong type", &api.SuiteSpec{}, "name: s\nworker_schedule:\n  worker_count: many\n",
			`svc.yaml:3:17: worker_schedule.worker_count: must be a whole number, got the text "many"`},
		{"suite hook timeout", &api.SuiteSpec{}, "hooks:\n  prepare:\n    command: [x]\n    timeout: 5 minutes\n",
			`svc.yaml:4:14: hooks.prepare.timeout: must be a duration with a unit, such as 30s, 5m or 1h30m; got the text "5 minutes"`},
		{"suite list item", &api.SuiteSpec{}, "worker_schedule:\n  cpu_binding:\n    cores: [0, x]\n",
			`svc.yaml:3:16: worker_schedule.cpu_binding.cores[1]: must be a whole number, got the text "x"`},
		{"container case typo", &api.ContainerJob{}, "name: web\nmemoryMB: 64\n",
			"svc.yaml:2:1: memoryMB: unknown field; did you mean memory_mb?"},
		{"container port", &api.ContainerJob{}, "ports:\n  - {container: 80, hots: 8080}\n",
			"svc.yaml:2:21: ports[0].hots: unknown field; did you mean host?"},
		{"duplicate key", &api.ContainerJob{}, "name: a\nname: b\n",
			"svc.yaml:2:1: name: key given twice (first on line 1)"},
		{"not a mapping", &api.ContainerJob{}, "- a\n",
			"svc.yaml:1:1: must be a mapping of key: value, got a list"},
		{"agent duration", &agentLike{}, "heartbeat_interval: 30\n",
			"svc.yaml:1:21: heartbeat_interval: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 30"},
		{"agent skipped field", &agentLike{}, "version: x\n",
			"svc.yaml:1:1: version: unknown field; want one of server, heartbeat_interval, onboard_share, labels"},
		{"agent out of range", &agentLike{}, "onboard_share: 9999999999999999999\n",
			"svc.yaml:1:16: onboard_share: 9999999999999999999 is out of range"},
		{"task json tag", &[]api.TaskSpec{}, "- argv: [a]\n  kill_grace: x\n",
			`svc.yaml:2:15: [0].kill_grace: must be a duration with a unit, such as 30s, 5m or 1h30m; got the text "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := yamlfield.Unmarshal([]byte(tc.yaml), "svc.yaml", tc.into)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Unmarshal(%q) = %v, want %s", tc.yaml, err, tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Unmarshal(%q) = %v, not ErrInvalid", tc.yaml, err)
			}
		})
	}
}

func TestUnmarshalValues(t *testing.T) {
	var got agentLike
	src := "server: https://x:7070\nheartbeat_interval: 1m30s\nonboard_share: 50\nlabels: {zone: a}\n"
	if err := yamlfield.Unmarshal([]byte(src), "a.yaml", &got); err != nil {
		t.Fatal(err)
	}
	want := agentLike{Server: "https://x:7070", Heartbeat: 90 * time.Second, Share: 50, Labels: map[string]string{"zone": "a"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Unmarshal(%q) (-want +got):\n%s", src, d)
	}
	var svc api.ServiceSpec
	src = `{"coordinate": "a.b.c.d", "command": ["bin/x"], "port": -1, "stop_grace": "5s", "restart": {"policy": "always"}}`
	if err := yamlfield.Unmarshal([]byte(src), "s.json", &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Coordinate != "a.b.c.d" || svc.Port != -1 || svc.StopGrace != api.Duration(5*time.Second) || svc.Restart.Policy != "always" || len(svc.Command) != 1 {
		t.Errorf("Unmarshal(%q) = %+v", src, svc)
	}
	var tasks []api.TaskSpec
	src = "- argv: [echo, hi]\n  kill_grace: 3s\n  timeout: 1m\n"
	if err := yamlfield.Unmarshal([]byte(src), "t.yaml", &tasks); err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 1 || tasks[0].KillGrace != api.Duration(3*time.Second) || tasks[0].Timeout != api.Duration(time.Minute) {
		t.Errorf("Unmarshal(%q) = %+v", src, tasks)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"network_mode", "image", "memory_mb", "env"}
	tests := []struct{ key, want string }{
		{"netwrok_mode", "network_mode"},
		{"memoryMB", "memory_mb"},
		{"imag", "image"},
		{"replicas", ""},
		{"x", ""},
	}
	for _, tc := range tests {
		if got := yamlfield.Suggest(tc.key, known); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}
