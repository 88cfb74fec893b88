package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// leaks are what an agent's environment holds that its hooks and tasks
// must not see.
var leaks = []string{
	"NODEMGR_JOIN_TOKEN=", "NODEMGR_LOCAL_API_TOKEN=", "NODEMGR_TOKEN=",
	"FOO=bar", "local-api-secret-0123456789", "nmu_must_not_leak",
}

// An agent started with its secrets in its environment, and more there:
// its prepare hook and its tasks see PATH, what their specs set and the
// NODEMGR_* variables nodemgr gives them, and none of the rest.
func TestHooksAndTasksGetACleanEnvironment(t *testing.T) {
	s := startServer(t)
	hookOut := filepath.Join(sharedDir(t), "hook.env")
	a := startEnv(t, "agent secretive", []string{
		"NODEMGR_JOIN_TOKEN=" + s.joinToken(t),
		"NODEMGR_LOCAL_API_TOKEN=local-api-secret-0123456789",
		"NODEMGR_TOKEN=nmu_must_not_leak",
		"FOO=bar",
	}, "agent", "--server", s.url(), "--data-dir", passable(t, t.TempDir()), "--name", "secretive",
		"--reconnect-min", "100ms", "--reconnect-max", "500ms")
	waitStatus(t, s, "secretive", api.StatusOnline, 20*time.Second)
	if strings.Contains(a.output(), "warning:") {
		t.Errorf("agent with its secrets in the environment warned:\n%s", a.output())
	}

	createSuite(t, s, api.SuiteSpec{Name: "envs", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1},
		Hooks: api.Hooks{Prepare: &api.Hook{Command: []string{"sh", "-c", `env > "$HOOK_OUT"`},
			Env: map[string]string{"HOOK_OUT": hookOut}}}})
	ids := submit(t, s, "envs", []api.TaskSpec{{Argv: []string{"env"}, Env: map[string]string{"TASK_VAR": "set-by-task"}}})
	if _, err := s.client().CloseSuite(context.Background(), "envs"); err != nil {
		t.Fatal(err)
	}
	waitSuite(t, s, "envs", api.SuiteComplete, 60*time.Second)

	tk, err := s.client().Task(context.Background(), ids[0])
	if err != nil || tk.Result == nil {
		t.Fatalf("task: %+v, %v", tk, err)
	}
	hook, err := os.ReadFile(hookOut)
	if err != nil {
		t.Fatalf("the prepare hook's environment: %v", err)
	}
	for _, tc := range []struct {
		name, env string
		want      []string
	}{
		{"prepare hook", string(hook), []string{"PATH=", "HOOK_OUT=" + hookOut, "NODEMGR_SUITE_NAME=envs", "NODEMGR_SUITE_DIR="}},
		{"task", tk.Result.Stdout, []string{"PATH=", "TASK_VAR=set-by-task", "NODEMGR_SUITE_NAME=envs", "NODEMGR_WORKER_ID=0"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.env, w) {
				t.Errorf("%s environment lacks %s:\n%s", tc.name, w, tc.env)
			}
		}
		for _, leak := range leaks {
			if strings.Contains(tc.env, leak) {
				t.Errorf("%s environment has the agent's %s:\n%s", tc.name, leak, tc.env)
			}
		}
	}
}

// A secret given as a flag works, with a warning that says how to pass it
// instead.
func TestSecretFlagsAreWarnedAbout(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "flagged", "--local-api-listen", "127.0.0.1:0", "--local-api-token", "local-api-secret-0123456789")
	for _, want := range []string{
		"warning: --join-token is readable by every user of this machine (ps, /proc/PID/cmdline); use --join-token-file FILE or NODEMGR_JOIN_TOKEN instead",
		"warning: --local-api-token is readable by every user of this machine",
	} {
		if !strings.Contains(a.output(), want) {
			t.Errorf("agent output lacks %q:\n%s", want, a.output())
		}
	}
	_, stderr, code := s.run(t, "node", "ls", "--token", s.token)
	if code != 0 || !strings.Contains(stderr, "warning: --token is readable") || strings.Count(stderr, "warning:") != 1 {
		t.Errorf("node ls --token = %d, stderr %q; want success and one warning", code, stderr)
	}
}
