package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestSpecFileErrors: suites, services, container jobs and tasks files fail
// like templates do: FILE:LINE:COL, the field path, the reason and a hint,
// never a Go type name.
func TestSpecFileErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
		load             func(path string) error
	}{
		{"service unknown key", "coordinate: a.b.c.d\nexpected_mem_mb: 5\n",
			"2:1: expected_mem_mb: unknown field; did you mean expected_memory_mb?",
			func(p string) error { _, err := LoadServiceFile(p); return err }},
		{"service duration", "coordinate: a.b.c.d\ndrain:\n  timeout: 30\n",
			"3:12: drain.timeout: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 30",
			func(p string) error { _, err := LoadServiceFile(p); return err }},
		{"suite typo", "name: s\nworker_schedule:\n  worker_cont: 2\n",
			"3:3: worker_schedule.worker_cont: unknown field; did you mean worker_count?",
			func(p string) error { _, err := LoadSuiteFile(p); return err }},
		{"suite hook timeout", "name: s\nhooks:\n  prepare:\n    command: [x]\n    timeout: 10\n",
			"5:14: hooks.prepare.timeout: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 10",
			func(p string) error { _, err := LoadSuiteFile(p); return err }},
		{"container job typo", "name: web\nimage: x\nmemory: 64\n",
			"3:1: memory: unknown field; did you mean memory_mb?",
			func(p string) error { var j api.ContainerJob; return loadYAML(p, &j) }},
		{"tasks file", "- argv: [a]\n  timout: 5s\n",
			"2:3: [0].timout: unknown field; did you mean timeout?",
			func(p string) error { _, err := loadTasks(p); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "spec.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			err := tc.load(path)
			if want := path + ":" + tc.want; err == nil || describe(err) != want {
				t.Errorf("load(%q) = %v, want %s", tc.yaml, err, want)
			}
		})
	}
}
