package docker

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

func TestParseExtra(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]any
		want  config
	}{
		{
			name:  "image only: keep-alive entrypoint",
			extra: map[string]any{"image": "busybox"},
			want:  config{image: "busybox", entrypoint: keepAlive, pull: pullNever},
		},
		{
			name: "seed template rendered for docker",
			extra: map[string]any{
				"name": "ubuntu-worker-small", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04",
				"user": "ubuntu", "env": []any{"FOO=bar"}, "diskGB": 3, "ami": "ami-1",
			},
			want: config{
				image: "ubuntu:24.04", user: "ubuntu", nanoCPUs: 2e9, memory: 256 << 20,
				env: []string{"FOO=bar"}, entrypoint: keepAlive, pull: pullNever,
			},
		},
		{
			name:  "numbers from JSON",
			extra: map[string]any{"image": "i", "cpu": 0.5, "memoryMB": json.Number("64")},
			want:  config{image: "i", nanoCPUs: 5e8, memory: 64 << 20, entrypoint: keepAlive, pull: pullNever},
		},
		{
			name:  "numeric strings",
			extra: map[string]any{"image": "i", "cpu": "1.5", "memoryMB": "32"},
			want:  config{image: "i", nanoCPUs: 15e8, memory: 32 << 20, entrypoint: keepAlive, pull: pullNever},
		},
		{
			name:  "env map is sorted",
			extra: map[string]any{"image": "i", "env": map[string]any{"B": "2", "A": 1}},
			want:  config{image: "i", env: []string{"A=1", "B=2"}, entrypoint: keepAlive, pull: pullNever},
		},
		{
			name:  "command string is shell form; image entrypoint kept",
			extra: map[string]any{"image": "i", "command": "echo hi"},
			want:  config{image: "i", cmd: []string{"/bin/sh", "-c", "echo hi"}, pull: pullNever},
		},
		{
			name:  "command and entrypoint lists",
			extra: map[string]any{"image": "i", "command": []any{"-c", "true"}, "entrypoint": []string{"/bin/sh"}},
			want:  config{image: "i", cmd: []string{"-c", "true"}, entrypoint: []string{"/bin/sh"}, pull: pullNever},
		},
		{
			name: "the rest",
			extra: map[string]any{
				"image": "i", "hostname": "h", "network_mode": "none", "privileged": false,
				"labels": map[string]any{"team": "infra", "n": 3}, "pull": true,
			},
			want: config{
				image: "i", hostname: "h", networkMode: "none", labels: map[string]string{"team": "infra", "n": "3"},
				entrypoint: keepAlive, pull: pullMissing,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			provisiontest.CheckParsed(t, parseExtra, tc.extra, tc.want, cmp.AllowUnexported(config{}))
		})
	}
}

func TestParseExtraErrors(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]any
		field string
	}{
		{"no image", map[string]any{"cpu": 1}, "extra.image"},
		{"image not a string", map[string]any{"image": 3}, "extra.image"},
		{"user not a string", map[string]any{"image": "i", "user": []any{"a"}}, "extra.user"},
		{"cpu not a number", map[string]any{"image": "i", "cpu": "two"}, "extra.cpu"},
		{"cpu negative", map[string]any{"image": "i", "cpu": -1}, "extra.cpu"},
		{"cpu a list", map[string]any{"image": "i", "cpu": []any{1}}, "extra.cpu"},
		{"memory fractional", map[string]any{"image": "i", "memoryMB": 1.5}, "extra.memoryMB"},
		{"memory negative", map[string]any{"image": "i", "memoryMB": -5}, "extra.memoryMB"},
		{"env a string", map[string]any{"image": "i", "env": "A=1"}, "extra.env"},
		{"env item not a string", map[string]any{"image": "i", "env": []any{"A=1", 2}}, "extra.env[1]"},
		{"env without name", map[string]any{"image": "i", "env": []any{"=1"}}, "extra.env[0]"},
		{"env map value a list", map[string]any{"image": "i", "env": map[string]any{"A": []any{}}}, "extra.env.A"},
		{"command empty list", map[string]any{"image": "i", "command": []any{}}, "extra.command"},
		{"command a number", map[string]any{"image": "i", "command": 1}, "extra.command"},
		{"entrypoint empty", map[string]any{"image": "i", "entrypoint": " "}, "extra.entrypoint"},
		{"labels a list", map[string]any{"image": "i", "labels": []any{"a"}}, "extra.labels"},
		{"privileged true", map[string]any{"image": "i", "privileged": true}, "extra.privileged"},
		{"privileged a string", map[string]any{"image": "i", "privileged": "false"}, "extra.privileged"},
		{"pull unknown", map[string]any{"image": "i", "pull": "always"}, "extra.pull"},
		{"hostname a number", map[string]any{"image": "i", "hostname": 1}, "extra.hostname"},
		{"network_mode a map", map[string]any{"image": "i", "network_mode": map[string]any{}}, "extra.network_mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseExtra(tc.extra)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("parseExtra(%v) = %v, want a field error on %s", tc.extra, err, tc.field)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("parseExtra(%v) = %v, want errdefs.ErrInvalid", tc.extra, err)
			}
		})
	}
}

func TestStateOf(t *testing.T) {
	tests := []struct {
		in   container.ContainerState
		want string
	}{
		{container.StateCreated, provision.StatePending},
		{container.StateRunning, provision.StateRunning},
		{container.StatePaused, provision.StateHibernated},
		{container.StateRestarting, provision.StatePending},
		{container.StateRemoving, provision.StateShuttingDown},
		{container.StateExited, provision.StateStopped},
		{container.StateDead, provision.StateStopped},
	}
	for _, tc := range tests {
		if got := stateOf(tc.in); got != tc.want {
			t.Errorf("stateOf(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNewSettings(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]string
		field    string // "" when New must succeed
	}{
		{"none", nil, ""},
		{"host and timeout", map[string]string{"host": "unix:///var/run/docker.sock", "stop_timeout": "3s"}, ""},
		{"unknown", map[string]string{"hots": "x"}, "settings.hots"},
		{"bad timeout", map[string]string{"stop_timeout": "soon"}, "settings.stop_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.settings)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("New(%v) = %v", tc.settings, err)
				}
				d.Close()
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("New(%v) = %v, want a field error on %s", tc.settings, err, tc.field)
			}
		})
	}
}

func TestRegistered(t *testing.T) {
	p, err := provision.New("docker", nil)
	if err != nil {
		t.Fatalf(`provision.New("docker") = %v`, err)
	}
	if _, ok := p.(*Docker); !ok {
		t.Fatalf(`provision.New("docker") = %T, want *Docker`, p)
	}
	if _, ok := p.(provision.Lifecycle); !ok {
		t.Errorf("docker provider has no lifecycle")
	}
}
