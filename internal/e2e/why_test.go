package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestSuiteShowSaysWhyItWaits: `suite show` answers "why isn't my suite
// running?" from the server: a prepare hook that fails shows with its
// node, exit code and output; a binding no node can take shows the cores
// it needs, and suite create warns about it at once.
func TestSuiteShowSaysWhyItWaits(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "lic")

	createSuite(t, s, api.SuiteSpec{Name: "needs-license", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1},
		Hooks: api.Hooks{Prepare: &api.Hook{Command: []string{"sh", "-c", `echo checking; echo "missing license file" >&2; exit 3`}}}})
	submit(t, s, "needs-license", []api.TaskSpec{sh("true")})
	var shown string
	waitFor(t, 30*time.Second, "suite show to name the prepare failure", func() (bool, string) {
		shown, _, _ = s.run(t, "suite", "show", "needs-license")
		return strings.Contains(shown, "missing license file"), shown
	})
	for _, want := range []string{
		"node lic (", "prepare failed at", "exit status 3 (exit code 3)", "      missing license file",
		"prepare failed on all 1 eligible nodes (lic: exit status 3)",
	} {
		if !strings.Contains(shown, want) {
			t.Errorf("suite show needs-license lacks %q:\n%s", want, shown)
		}
	}
	out, _, _ := s.run(t, "suite", "show", "needs-license", "--json")
	var su api.Suite
	if err := json.Unmarshal([]byte(out), &su); err != nil {
		t.Fatalf("suite show --json: %v\n%s", err, out)
	}
	if len(su.Problems) != 1 || su.Problems[0].NodeName != "lic" || su.Problems[0].ExitCode != 3 ||
		su.Problems[0].OutputTail != "checking\nmissing license file\n" || su.WaitingReason == "" {
		t.Errorf("suite show --json: problems %+v, waiting_reason %q; want lic's exit 3 with its output, and a reason", su.Problems, su.WaitingReason)
	}

	// More cores than this machine has, whatever it has.
	big := runtime.NumCPU() + 6
	file := filepath.Join(t.TempDir(), "wide.yaml")
	spec := fmt.Sprintf("name: wide\nworker_schedule: {worker_count: 1, cpu_binding: {cores: [0, %d]}}\n", big)
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCores := fmt.Sprintf("cpu_binding cores [0,%d] need %d cores; the largest online node it may use has %d", big, big+1, runtime.NumCPU())
	_, stderr, code := s.run(t, "suite", "create", "-f", file)
	if code != 0 || !strings.Contains(stderr, "warning: no current node could run it") || !strings.Contains(stderr, wantCores) {
		t.Errorf("suite create wide = exit %d, stderr %q; want it created with a warning naming %q", code, stderr, wantCores)
	}
	submit(t, s, "wide", []api.TaskSpec{sh("true")})
	shown, _, _ = s.run(t, "suite", "show", "wide")
	if !strings.Contains(shown, "Waiting") || !strings.Contains(shown, wantCores) {
		t.Errorf("suite show wide does not say why it waits (%q):\n%s", wantCores, shown)
	}
	if su, _ := s.client().Suite(context.Background(), "wide"); su.Counts.Ready != 1 {
		t.Errorf("wide counts %+v; want its task Ready", su.Counts)
	}
}
