package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// passable lets any user pass through dir's parents (t.TempDir's are
// 0700), as the unprivileged users an agent run by root starts suites and
// services as must to reach its data dir.
func passable(t *testing.T, dir string) string {
	t.Helper()
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	return dir
}

// sharedDir is a temp dir that the suite's code, whatever user it runs
// as, may write into: where a test's hooks and tasks leave their marks.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := passable(t, t.TempDir())
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTasksCannotReachTheAgent: under an agent run as root, a suite that
// names no user runs its hooks and tasks as an unprivileged user, which
// can read neither the agent's data dir (its credential) nor its
// environment, cannot change the input cache through its inputs, and
// cannot make an output glob upload the agent's files; a group admin's
// run_as root still runs as root. (Issue 26: a group-B writer's task
// printed DATA_DIR/agent.json and took over the node.)
func TestTasksCannotReachTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent switches users only as root")
	}
	s := startServer(t)
	a, _ := startOnline(t, s, "isolated")
	agentJSON := filepath.Join(a.dataDir, "agent.json")

	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "data.txt"), []byte("submitted\n"), 0o644)
	in, _, err := s.client().UploadFile(context.Background(), filepath.Join(src, "data.txt"), "data.txt")
	if err != nil {
		t.Fatal(err)
	}
	createSuite(t, s, api.SuiteSpec{Name: "iso", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1},
		Hooks: api.Hooks{Prepare: &api.Hook{Command: []string{"sh", "-c", "id -u > hook-uid"}}}})
	probe := fmt.Sprintf(`echo uid=$(id -u)
cat %[1]s >/dev/null 2>&1 && echo READ-CREDENTIAL
ls %[2]s >/dev/null 2>&1 && echo LISTED-DATA-DIR
cat /proc/%[3]d/environ >/dev/null 2>&1 && echo READ-AGENT-ENVIRON
echo poisoned > data.txt 2>/dev/null && echo WROTE-INPUT
chmod u+w data.txt 2>/dev/null && echo CHMODDED-INPUT
echo hook=$(cat "$HOME/hook-uid")
ln -s %[2]s out
`, agentJSON, a.dataDir, a.cmd.Process.Pid)
	ids := submit(t, s, "iso", []api.TaskSpec{{Argv: []string{"sh", "-c", probe}, Inputs: []api.TaskFile{in}, Outputs: []string{"out/*", "out"}}})
	waitTask(t, s, ids[0], api.TaskFinished)
	ids = append(ids, submit(t, s, "iso", []api.TaskSpec{{Argv: []string{"cat", "data.txt"}, Inputs: []api.TaskFile{in}}})...)
	waitTask(t, s, ids[1], api.TaskFinished)

	first, _ := s.client().Task(context.Background(), ids[0])
	out := first.Result.Stdout
	if strings.Contains(out, "uid=0\n") || !strings.Contains(out, "uid=") || strings.Contains(out, "hook=0\n") {
		t.Errorf("the task and its hook ran as root:\n%s", out)
	}
	for _, breach := range []string{"READ-CREDENTIAL", "LISTED-DATA-DIR", "READ-AGENT-ENVIRON", "WROTE-INPUT", "CHMODDED-INPUT"} {
		if strings.Contains(out, breach) {
			t.Errorf("the task could %s:\n%s", breach, out)
		}
	}
	if len(first.Result.Outputs) != 0 || strings.Join(first.Result.Missing, " ") != "out/* out" {
		t.Errorf("outputs through a link to the data dir = %+v, missing %q; want none, both missing", first.Result.Outputs, first.Result.Missing)
	}
	second, _ := s.client().Task(context.Background(), ids[1])
	if second.Result.Stdout != "submitted\n" {
		t.Errorf("the next task given the same input read %q, want what was submitted", second.Result.Stdout)
	}

	// The agent's own rights, for a group admin's (here: an admin's) suite.
	createSuite(t, s, api.SuiteSpec{Name: "privileged", RunAs: api.RunAsRoot, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	ids = submit(t, s, "privileged", []api.TaskSpec{sh("id -u")})
	waitTask(t, s, ids[0], api.TaskFinished)
	if tk, _ := s.client().Task(context.Background(), ids[0]); tk.Result.Stdout != "0\n" {
		t.Errorf("run_as root task ran as %q, want uid 0", tk.Result.Stdout)
	}
	if !strings.Contains(a.output(), "run as an unprivileged user") {
		t.Errorf("the agent did not say which user suites that name none run as:\n%s", a.output())
	}
}

// waitTask waits for a task to reach state.
func waitTask(t *testing.T, s *server, id, state string) {
	t.Helper()
	waitFor(t, 60*time.Second, "task "+id+" "+state, func() (bool, string) {
		tk, err := s.client().Task(context.Background(), id)
		return err == nil && tk.State == state, fmt.Sprintf("%s %v %+v", tk.State, err, tk.Result)
	})
}

// TestAgentNotRootRunsTasksAsItself: an agent that does not run as root
// cannot switch users: it says so in its log, runs a suite that names no
// user as itself, and refuses a suite whose run_as names another user
// with a prepare problem saying why, instead of running it as itself.
func TestAgentNotRootRunsTasksAsItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the agent as another user")
	}
	s := startServer(t)
	// nobody must be able to run the binary and own its data dir.
	os.Chmod(filepath.Dir(binary), 0o755)
	passable(t, filepath.Dir(binary))
	dataDir := passable(t, t.TempDir())
	if err := os.Chown(dataDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	a := startAsNobody(t, "agent unprivileged", "agent", "--server", s.url(), "--data-dir", dataDir, "--name", "unprivileged",
		"--join-token", s.joinToken(t), "--reconnect-min", "100ms", "--reconnect-max", "500ms")
	waitStatus(t, s, "unprivileged", api.StatusOnline, 20*time.Second)
	if out := a.output(); !strings.Contains(out, "does not run as root") {
		t.Errorf("the agent did not say it cannot switch users:\n%s", out)
	}

	createSuite(t, s, api.SuiteSpec{Name: "as-agent", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	ids := submit(t, s, "as-agent", []api.TaskSpec{sh("id -u")})
	waitTask(t, s, ids[0], api.TaskFinished)
	if tk, _ := s.client().Task(context.Background(), ids[0]); tk.Result.Stdout != "65534\n" {
		t.Errorf("a suite that names no user ran as %q, want the agent's user 65534", tk.Result.Stdout)
	}
	s.client().CloseSuite(context.Background(), "as-agent")
	waitSuite(t, s, "as-agent", api.SuiteComplete, time.Minute)

	createSuite(t, s, api.SuiteSpec{Name: "as-daemon", RunAs: "daemon", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})
	submit(t, s, "as-daemon", []api.TaskSpec{sh("id -u")})
	var su api.Suite
	waitFor(t, 30*time.Second, "a prepare problem for run_as", func() (bool, string) {
		su, _ = s.client().Suite(context.Background(), "as-daemon")
		return len(su.Problems) > 0, fmt.Sprintf("%+v", su)
	})
	p := su.Problems[0]
	if p.Stage != api.StagePrepare || !strings.Contains(p.Reason, "run_as") || !strings.Contains(p.Reason, `"daemon"`) || !strings.Contains(p.Reason, "not root") {
		t.Errorf("problem = %+v; want a prepare problem naming run_as, the user and why", p)
	}
	if su.Counts.Ready != 1 || su.Counts.Finished != 0 {
		t.Errorf("counts = %+v; want the task still Ready, run by no one", su.Counts)
	}
}

// startAsNobody starts the nodemgr binary as nobody, its output captured.
func startAsNobody(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "NODEMGR_TOKEN=", "NODEMGR_ADDR=", "GORACE=atexit_sleep_ms=0", "HOME=/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return startCmd(t, name, cmd)
}
