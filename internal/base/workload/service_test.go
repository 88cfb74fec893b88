package workload

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func validSpec() api.ServiceSpec {
	return api.ServiceSpec{
		Coordinate: "i1.web.alice.c1",
		Artifact:   "com.example:web:1.0",
		Command:    []string{"bin/web", "--verbose"},
		Options:    map[string]string{"threads": "4"},
		Env:        map[string]string{"LANG": "C"},
		Files: []api.ServiceFile{
			{Path: "conf/app.yaml", From: "conf/default.yaml", Mode: "0600"},
			{Path: "data.bin", URL: "https://example.com/data.bin"},
		},
		Restart: api.RestartPolicy{Policy: api.RestartOnFailure, MaxRestarts: 3},
		Drain:   api.DrainSpec{Signal: "SIGUSR1"},
		Logs:    api.LogSpec{MaxSizeMB: 5, Keep: 2},
	}
}

func TestCheckService(t *testing.T) {
	if err := CheckService(validSpec()); err != nil {
		t.Fatalf("CheckService(valid) = %v", err)
	}
	tests := []struct {
		name  string
		edit  func(*api.ServiceSpec)
		field string
	}{
		{"no coordinate", func(s *api.ServiceSpec) { s.Coordinate = "" }, "coordinate"},
		{"three parts", func(s *api.ServiceSpec) { s.Coordinate = "web.alice.c1" }, "coordinate"},
		{"upper case", func(s *api.ServiceSpec) { s.Coordinate = "I1.web.alice.c1" }, "coordinate"},
		{"artifact two parts", func(s *api.ServiceSpec) { s.Artifact = "com.example:web" }, "artifact"},
		{"artifact empty part", func(s *api.ServiceSpec) { s.Artifact = "com.example::1.0" }, "artifact"},
		{"no command", func(s *api.ServiceSpec) { s.Command = nil }, "command"},
		{"empty argv0", func(s *api.ServiceSpec) { s.Command = []string{""} }, "command"},
		{"argv0 climbs out", func(s *api.ServiceSpec) { s.Command = []string{"../../bin/sh"} }, "command[0]"},
		{"option with =", func(s *api.ServiceSpec) { s.Options = map[string]string{"a=b": "1"} }, "options.a=b"},
		{"empty env key", func(s *api.ServiceSpec) { s.Env = map[string]string{"": "x"} }, "env."},
		{"env key with =", func(s *api.ServiceSpec) { s.Env = map[string]string{"A=B": "x"} }, "env.A=B"},
		{"port too low", func(s *api.ServiceSpec) { s.Port = -2 }, "port"},
		{"port too high", func(s *api.ServiceSpec) { s.Port = 65536 }, "port"},
		{"bad policy", func(s *api.ServiceSpec) { s.Restart.Policy = "sometimes" }, "restart.policy"},
		{"negative max restarts", func(s *api.ServiceSpec) { s.Restart.MaxRestarts = -1 }, "restart.max_restarts"},
		{"negative delay", func(s *api.ServiceSpec) { s.Restart.Delay = api.Duration(-time.Second) }, "restart.delay"},
		{"absolute file path", func(s *api.ServiceSpec) { s.Files[1].Path = "/etc/passwd" }, "files[1].path"},
		{"file path climbs out", func(s *api.ServiceSpec) { s.Files[0].Path = "../x" }, "files[0].path"},
		{"empty file path", func(s *api.ServiceSpec) { s.Files[0].Path = "" }, "files[0].path"},
		{"same path twice", func(s *api.ServiceSpec) { s.Files[1].Path = "conf/./app.yaml" }, "files[1].path"},
		{"from and url", func(s *api.ServiceSpec) { s.Files[0].URL = "http://x/y" }, "files[0]"},
		{"neither from nor url", func(s *api.ServiceSpec) { s.Files[1].URL = "" }, "files[1]"},
		{"from climbs out", func(s *api.ServiceSpec) { s.Files[0].From = "../other/secret" }, "files[0].from"},
		{"url not http", func(s *api.ServiceSpec) { s.Files[1].URL = "file:///etc/passwd" }, "files[1].url"},
		{"mode not octal", func(s *api.ServiceSpec) { s.Files[0].Mode = "0689" }, "files[0].mode"},
		{"mode too large", func(s *api.ServiceSpec) { s.Files[0].Mode = "4755" }, "files[0].mode"},
		{"unknown drain signal", func(s *api.ServiceSpec) { s.Drain.Signal = "SIGFOO" }, "drain.signal"},
		{"drain with SIGKILL", func(s *api.ServiceSpec) { s.Drain.Signal = "KILL" }, "drain.signal"},
		{"drain command and signal", func(s *api.ServiceSpec) { s.Drain.Command = []string{"bin/drain"} }, "drain"},
		{"drain command climbs out", func(s *api.ServiceSpec) {
			s.Drain = api.DrainSpec{Command: []string{"../drain"}}
		}, "drain.command[0]"},
		{"negative drain timeout", func(s *api.ServiceSpec) { s.Drain.Timeout = api.Duration(-1) }, "drain.timeout"},
		{"negative log size", func(s *api.ServiceSpec) { s.Logs.MaxSizeMB = -1 }, "logs.max_size_mb"},
		{"negative log keep", func(s *api.ServiceSpec) { s.Logs.Keep = -1 }, "logs.keep"},
		{"negative stop grace", func(s *api.ServiceSpec) { s.StopGrace = api.Duration(-1) }, "stop_grace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.edit(&spec)
			err := CheckService(spec)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a field error on %q", err, tc.field)
			}
			if fe.Field != tc.field {
				t.Errorf("Validate = %v: field %q, want %q", err, fe.Field, tc.field)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestCheckServiceAccepts(t *testing.T) {
	tests := []struct {
		name string
		edit func(*api.ServiceSpec)
	}{
		{"absolute command", func(s *api.ServiceSpec) { s.Command = []string{"/bin/sh", "-c", "true"} }},
		{"no port", func(s *api.ServiceSpec) { s.Port = -1 }},
		{"specific port", func(s *api.ServiceSpec) { s.Port = 8080 }},
		{"short signal name", func(s *api.ServiceSpec) { s.Drain.Signal = "usr2" }},
		{"drain command", func(s *api.ServiceSpec) { s.Drain = api.DrainSpec{Command: []string{"bin/drain", "now"}} }},
		{"defaults", func(s *api.ServiceSpec) {
			s.Restart, s.Drain, s.Logs, s.Files, s.Options, s.Env = api.RestartPolicy{}, api.DrainSpec{}, api.LogSpec{}, nil, nil, nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.edit(&spec)
			if err := CheckService(spec); err != nil {
				t.Errorf("Validate = %v, want nil", err)
			}
		})
	}
}

func TestParseCoordinate(t *testing.T) {
	good := []struct {
		in   string
		want Coordinate
	}{
		{"i1.web.alice.c1", Coordinate{"i1", "web", "alice", "c1"}},
		{"0.my-svc.bob_2.eu-west", Coordinate{"0", "my-svc", "bob_2", "eu-west"}},
	}
	for _, tc := range good {
		got, err := ParseCoordinate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseCoordinate(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("ParseCoordinate(%q).String() = %q", tc.in, got.String())
		}
	}
	for _, in := range []string{"", "a.b.c", "a.b.c.d.e", "a..c.d", "A.b.c.d", "-a.b.c.d", "a.b/x.c.d", "a.b.c.d ", "../b.c.d"} {
		_, err := ParseCoordinate(in)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != "coordinate" {
			t.Errorf("ParseCoordinate(%q) = %v, want a field error on coordinate", in, err)
			continue
		}
		if !strings.Contains(err.Error(), "instance.service.user.cell") {
			t.Errorf("ParseCoordinate(%q) = %v, want it to show the form instance.service.user.cell", in, err)
		}
	}
}

func TestRuntimeDir(t *testing.T) {
	c, _ := ParseCoordinate("i1.web.alice.c1")
	if got, want := c.RuntimeDir("/opt/nodemgr"), "/opt/nodemgr/runtime/c1/alice/web/i1"; got != want {
		t.Errorf("RuntimeDir = %q, want %q", got, want)
	}
}
