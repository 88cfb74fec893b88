package dispatch

import (
	"errors"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

func TestValidateSuiteNamesTheField(t *testing.T) {
	ok := func() api.SuiteSpec {
		return api.SuiteSpec{Name: "s", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}}
	}
	tests := []struct {
		name  string
		edit  func(*api.SuiteSpec)
		field string // "" = valid
	}{
		{"minimal", func(*api.SuiteSpec) {}, ""},
		{"negative workers", func(s *api.SuiteSpec) { s.WorkerSchedule.WorkerCount = -1 }, "worker_schedule.worker_count"},
		{"too many workers", func(s *api.SuiteSpec) { s.WorkerSchedule.WorkerCount = 300 }, "worker_schedule.worker_count"},
		{"unknown strategy", func(s *api.SuiteSpec) {
			s.WorkerSchedule.CPUBinding = &api.CPUBinding{Cores: []int{0}, Strategy: "Greedy"}
		}, "worker_schedule.cpu_binding.strategy"},
		{"negative core", func(s *api.SuiteSpec) {
			s.WorkerSchedule.CPUBinding = &api.CPUBinding{Cores: []int{0, -1}}
		}, "worker_schedule.cpu_binding.cores[1]"},
		{"core twice", func(s *api.SuiteSpec) {
			s.WorkerSchedule.CPUBinding = &api.CPUBinding{Cores: []int{1, 1}}
		}, "worker_schedule.cpu_binding.cores[1]"},
		{"exclusive short of cores", func(s *api.SuiteSpec) {
			s.WorkerSchedule.CPUBinding = &api.CPUBinding{Cores: []int{0}, Strategy: api.BindExclusive}
		}, "worker_schedule.cpu_binding.cores"},
		{"hook without command", func(s *api.SuiteSpec) { s.Hooks.Prepare = &api.Hook{} }, "hooks.prepare.command"},
		{"resource escaping", func(s *api.SuiteSpec) {
			s.Hooks.Cleanup = &api.Hook{Command: []string{"true"}, Resources: []api.Resource{{URL: "http://x/y", Path: "../../etc/passwd"}}}
		}, "hooks.cleanup.resources[0].path"},
		{"resource not http", func(s *api.SuiteSpec) {
			s.Hooks.Prepare = &api.Hook{Command: []string{"true"}, Resources: []api.Resource{{URL: "file:///etc/passwd", Path: "p"}}}
		}, "hooks.prepare.resources[0].url"},
		{"negative prefetch", func(s *api.SuiteSpec) { n := -1; s.WorkerSchedule.TaskPrefetchCount = &n }, "worker_schedule.task_prefetch_count"},
		{"bad name", func(s *api.SuiteSpec) { s.Name = "" }, "name"},
		{"bad group", func(s *api.SuiteSpec) { s.Group = "ML Team" }, "group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := ok()
			tc.edit(&spec)
			err := ValidateSuite(&spec)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("ValidateSuite = %v, want nil", err)
				}
				if spec.WorkerSchedule.TaskPrefetchCount == nil || *spec.WorkerSchedule.TaskPrefetchCount != 32 {
					t.Errorf("prefetch default = %v, want 32", spec.WorkerSchedule.TaskPrefetchCount)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("ValidateSuite(%s) = %v, want a field error on %s", tc.name, err, tc.field)
			}
		})
	}
}

func TestValidateTask(t *testing.T) {
	if err := ValidateTask("tasks[3]", api.TaskSpec{}); err == nil || err.(*errdefs.FieldError).Field != "tasks[3].argv" {
		t.Errorf("empty argv: %v, want a field error on tasks[3].argv", err)
	}
	if err := ValidateTask("t", api.TaskSpec{Argv: []string{"true"}, Timeout: -1}); err == nil {
		t.Error("negative timeout accepted")
	}
	if err := ValidateTask("t", api.TaskSpec{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}); err == nil {
		t.Error("env name with = accepted")
	}
	graces := []struct {
		grace time.Duration
		ok    bool
	}{{0, true}, {30 * time.Second, true}, {api.MaxKillGrace, true}, {-time.Second, false}, {api.MaxKillGrace + time.Second, false}}
	for _, g := range graces {
		err := ValidateTask("tasks[1]", api.TaskSpec{Argv: []string{"true"}, KillGrace: api.Duration(g.grace)})
		var fe *errdefs.FieldError
		switch {
		case g.ok && err != nil:
			t.Errorf("kill_grace %v: %v, want it accepted", g.grace, err)
		case !g.ok && (!errors.As(err, &fe) || fe.Field != "tasks[1].kill_grace"):
			t.Errorf("kill_grace %v: %v, want a field error on tasks[1].kill_grace", g.grace, err)
		}
	}
}

func TestAbortPolicy(t *testing.T) {
	f := func(sigs ...string) []api.TaskFailure {
		var out []api.TaskFailure
		for _, s := range sigs {
			out = append(out, api.TaskFailure{Signal: s})
		}
		return out
	}
	tests := []struct {
		name     string
		failures []api.TaskFailure
		want     bool
	}{
		{"one segv", f("SIGSEGV"), false},
		{"two segv", f("SIGSEGV", "SIGSEGV"), true},
		{"segv and bus", f("SIGSEGV", "SIGBUS"), true},
		{"two kills", f("SIGKILL", "SIGKILL"), false},
		{"three kills", f("SIGKILL", "SIGABRT", "SIGKILL"), true},
		{"three exits", f("", "", ""), true},
		{"one fpe one exit", f("SIGFPE", ""), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AbortPolicy(tc.failures); got != tc.want {
				t.Errorf("AbortPolicy(%v) = %v, want %v", tc.failures, got, tc.want)
			}
		})
	}
}

func TestUnknownFieldsAreNamedWithTheirPath(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"name": "a", "colour": 1}`, "colour"},
		{`{"name": "a", "worker_schedule": {"worker_count": 1, "workers": 3}}`, "worker_schedule.workers"},
		{`{"name": "a", "hooks": {"prepare": {"command": ["x"], "resources": [{"url": "u", "paht": "p"}]}}}`, "hooks.prepare.resources[0].paht"},
	}
	for _, tc := range tests {
		var spec api.SuiteSpec
		err := httpapi.DecodeStrict([]byte(tc.body), &spec)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.want {
			t.Errorf("httpapi.DecodeStrict(%s) = %v, want a field error on %s", tc.body, err, tc.want)
		}
	}
	var ts api.SubmitTasks
	err := httpapi.DecodeStrict([]byte(`{"tasks": [{"argv": ["a"]}, {"argv": ["b"], "envv": {}}]}`), &ts)
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "tasks[1].envv" {
		t.Errorf("unknown task field = %v, want tasks[1].envv", err)
	}
}
