package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

func prefetch(n int) *int { return &n }

// createSuite creates a suite through the API.
func createSuite(t *testing.T, s *server, spec api.SuiteSpec) api.Suite {
	t.Helper()
	su, err := s.client().CreateSuite(context.Background(), spec)
	if err != nil {
		t.Fatalf("create suite %s: %v", spec.Name, err)
	}
	return su
}

func submit(t *testing.T, s *server, suite string, tasks []api.TaskSpec) []string {
	t.Helper()
	ids, err := s.client().SubmitTasks(context.Background(), suite, tasks)
	if err != nil {
		t.Fatalf("submit to %s: %v", suite, err)
	}
	return ids
}

// waitSuite waits for a suite to reach a state.
func waitSuite(t *testing.T, s *server, suite, state string, timeout time.Duration) api.Suite {
	t.Helper()
	var su api.Suite
	waitFor(t, timeout, "suite "+suite+" "+state, func() (bool, string) {
		var err error
		su, err = s.client().Suite(context.Background(), suite)
		return err == nil && su.State == state, fmt.Sprintf("%s %+v %v", su.State, su.Counts, err)
	})
	return su
}

// allTasks reads every page of a suite's tasks.
func allTasks(t *testing.T, s *server, suite string) []api.Task {
	t.Helper()
	out, err := s.client().Tasks(context.Background(), suite, "")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sh(script string) api.TaskSpec { return api.TaskSpec{Argv: []string{"sh", "-c", script}} }

func TestSuitesRunToCompletionWithCrashes(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "cpu-box", "--tag", "linux,cpu")
	startAgent(t, s, "gpu-box", "--tag", "linux,gpu")
	waitStatus(t, s, "cpu-box", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "gpu-box", api.StatusOnline, 20*time.Second)

	general := createSuite(t, s, api.SuiteSpec{Name: "general", Tags: []string{"linux"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 3}})
	gpuOnly := createSuite(t, s, api.SuiteSpec{Name: "gpu-only", Tags: []string{"gpu"}, Priority: 5,
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(0)}})

	// 700 + 300 tasks; some crash by signal, some exit non-zero.
	kind := map[string]string{}
	var tasks []api.TaskSpec
	var kinds []string
	for i := range 700 {
		switch {
		case i%100 == 7:
			tasks, kinds = append(tasks, sh("kill -SEGV $$")), append(kinds, "segv")
		case i%100 == 9:
			tasks, kinds = append(tasks, sh("exit 3")), append(kinds, "exit3")
		default:
			tasks, kinds = append(tasks, sh(fmt.Sprintf("echo general %d", i))), append(kinds, "ok")
		}
	}
	for i, id := range submit(t, s, "general", tasks) {
		kind[id] = kinds[i]
	}
	tasks = tasks[:0]
	for i := range 300 {
		tasks = append(tasks, sh(fmt.Sprintf("echo gpu %d", i)))
	}
	for _, id := range submit(t, s, "gpu-only", tasks) {
		kind[id] = "gpu"
	}
	for _, su := range []string{"general", "gpu-only"} {
		if _, err := s.client().CloseSuite(context.Background(), su); err != nil {
			t.Fatal(err)
		}
	}
	waitSuite(t, s, "gpu-only", api.SuiteComplete, 3*time.Minute)
	waitSuite(t, s, "general", api.SuiteComplete, 3*time.Minute)

	nodes := map[string]string{}
	for _, name := range []string{"cpu-box", "gpu-box"} {
		n, _ := nodeByName(t, s, name)
		nodes[n.ID] = name
	}
	seen := 0
	for _, su := range []api.Suite{general, gpuOnly} {
		for _, tk := range allTasks(t, s, su.ID) {
			seen++
			switch kind[tk.ID] {
			case "ok":
				if tk.State != api.TaskFinished || tk.Result == nil || tk.Result.ExitCode != 0 || !strings.HasPrefix(tk.Result.Stdout, "general ") {
					t.Errorf("task %s (ok) = %s %+v", tk.ID, tk.State, tk.Result)
				}
			case "gpu":
				if tk.State != api.TaskFinished || nodes[tk.Result.NodeID] != "gpu-box" {
					t.Errorf("gpu task %s = %s on %s; want Finished on gpu-box", tk.ID, tk.State, nodes[tk.NodeID])
				}
			case "segv":
				if tk.State != api.TaskFailed || len(tk.Failures) != 2 || tk.Failures[1].Signal != "SIGSEGV" || tk.Attempt != 2 {
					t.Errorf("segv task %s = %s after %d attempts, failures %+v; want Failed after 2 SIGSEGV", tk.ID, tk.State, tk.Attempt, tk.Failures)
				}
			case "exit3":
				if tk.State != api.TaskFailed || len(tk.Failures) != 3 || tk.Failures[2].ExitCode != 3 || tk.Attempt != 3 {
					t.Errorf("exit-3 task %s = %s after %d attempts, failures %+v; want Failed after 3", tk.ID, tk.State, tk.Attempt, tk.Failures)
				}
			default:
				t.Errorf("unknown task %s", tk.ID)
			}
		}
	}
	if seen != 1000 {
		t.Errorf("saw %d tasks, want 1000", seen)
	}
	// Both agents go back to Idle.
	for _, name := range []string{"cpu-box", "gpu-box"} {
		waitFor(t, 20*time.Second, name+" idle", func() (bool, string) {
			n, _ := nodeByName(t, s, name)
			return n.AgentState == api.AgentIdle && n.CurrentSuite == "", n.AgentState
		})
	}
	// task show tells the story of a crash.
	for id, k := range kind {
		if k != "segv" {
			continue
		}
		out, _, code := s.run(t, "task", "show", id)
		if code != 0 || !strings.Contains(out, "SIGSEGV") || !strings.Contains(out, "failed") {
			t.Errorf("task show %s (exit %d):\n%s", id, code, out)
		}
		break
	}
}

func TestKilledAgentsTasksFinishElsewhere(t *testing.T) {
	s := startServer(t)
	victim := startAgent(t, s, "victim", "--tag", "pool")
	startAgent(t, s, "survivor", "--tag", "pool")
	waitStatus(t, s, "victim", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "survivor", api.StatusOnline, 20*time.Second)

	createSuite(t, s, api.SuiteSpec{Name: "long", Tags: []string{"pool"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(8)}})
	var tasks []api.TaskSpec
	for range 200 {
		tasks = append(tasks, sh("sleep 0.05"))
	}
	submit(t, s, "long", tasks)
	s.client().CloseSuite(context.Background(), "long")

	v, _ := nodeByName(t, s, "victim")
	waitFor(t, 60*time.Second, "the victim to be running tasks", func() (bool, string) {
		running, _ := s.client().Tasks(context.Background(), "long", api.TaskRunning)
		for _, tk := range running {
			if tk.NodeID == v.ID {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(running), " running")
	})
	victim.signal(syscall.SIGKILL)

	su := waitSuite(t, s, "long", api.SuiteComplete, 3*time.Minute)
	if su.Counts.Finished != 200 || su.Counts.Total() != 200 {
		t.Errorf("after the kill: %+v; want all 200 Finished, no loss, no duplicate", su.Counts)
	}
	n, _ := nodeByName(t, s, "victim")
	if n.Status != api.StatusOffline {
		t.Errorf("victim is %s, want offline", n.Status)
	}
}

func TestWorkersArePinned(t *testing.T) {
	if n := len(cpusAllowed(t)); n < 2 {
		t.Skipf("needs 2 cores, this process may use %d", n)
	}
	s := startServer(t)
	startOnline(t, s, "pinner")

	for _, tc := range []struct {
		strategy string
		workers  int
		want     map[string]bool // Cpus_allowed_list values the tasks may see
		wantAll  bool            // every value must show up
	}{
		{api.BindRoundRobin, 2, map[string]bool{"0": true, "1": true}, true},
		{api.BindExclusive, 2, map[string]bool{"0": true, "1": true}, true},
		{api.BindShared, 2, map[string]bool{"0-1": true}, true},
		{api.BindRoundRobin, 4, map[string]bool{"0": true, "1": true}, true},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.strategy, tc.workers), func(t *testing.T) {
			name := strings.ToLower(fmt.Sprintf("pin-%s-%d", tc.strategy, tc.workers))
			createSuite(t, s, api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{
				WorkerCount: tc.workers, CPUBinding: &api.CPUBinding{Cores: []int{0, 1}, Strategy: tc.strategy}}})
			var tasks []api.TaskSpec
			for range 40 {
				// The task inherits its worker's affinity.
				tasks = append(tasks, sh("sleep 0.02; grep Cpus_allowed_list /proc/self/status | cut -f2"))
			}
			submit(t, s, name, tasks)
			s.client().CloseSuite(context.Background(), name)
			waitSuite(t, s, name, api.SuiteComplete, time.Minute)
			seen := map[string]bool{}
			for _, tk := range allTasks(t, s, name) {
				got := strings.TrimSpace(tk.Result.Stdout)
				seen[got] = true
				if !tc.want[got] {
					t.Errorf("task saw Cpus_allowed_list %q; want one of %v", got, tc.want)
				}
			}
			if tc.wantAll && len(seen) != len(tc.want) {
				t.Errorf("tasks saw %v; want all of %v", seen, tc.want)
			}
		})
	}
}

func cpusAllowed(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			v = strings.TrimSpace(v)
			if v == "0-1" {
				return []string{"0", "1"}
			}
			return strings.Split(v, ",")
		}
	}
	return nil
}

func TestHooksRunWithSuiteContext(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "hooked")
	marker := filepath.Join(sharedDir(t), "cleanup-ran")

	createSuite(t, s, api.SuiteSpec{Name: "with-hooks", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2},
		Hooks: api.Hooks{
			Prepare: &api.Hook{Command: []string{"sh", "-c", `echo "$NODEMGR_SUITE_NAME $NODEMGR_WORKER_COUNT $NODEMGR_NODE_ID $GREETING" > prepared`},
				Env: map[string]string{"GREETING": "hi"}},
			Cleanup: &api.Hook{Command: []string{"sh", "-c", "touch " + marker}},
		}})
	submit(t, s, "with-hooks", []api.TaskSpec{sh(`cat "$NODEMGR_SUITE_DIR/prepared" 2>/dev/null || cat prepared`)})
	s.client().CloseSuite(context.Background(), "with-hooks")
	waitSuite(t, s, "with-hooks", api.SuiteComplete, time.Minute)

	n, _ := nodeByName(t, s, "hooked")
	tk := allTasks(t, s, "with-hooks")[0]
	if want := "with-hooks 2 " + n.ID + " hi"; tk.Result == nil || strings.TrimSpace(tk.Result.Stdout) != want {
		t.Errorf("task saw prepared file %q; want %q", tk.Result.Stdout, want)
	}
	waitFor(t, 20*time.Second, "cleanup hook", func() (bool, string) {
		_, err := os.Stat(marker)
		return err == nil, fmt.Sprint(err)
	})

	// A prepare hook that fails: the agent leaves the suite and goes back to Idle; the tasks wait.
	createSuite(t, s, api.SuiteSpec{Name: "bad-prepare", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1},
		Hooks: api.Hooks{Prepare: &api.Hook{Command: []string{"sh", "-c", "exit 7"}}}})
	submit(t, s, "bad-prepare", []api.TaskSpec{sh("true")})
	waitFor(t, 30*time.Second, "the agent to try and leave", func() (bool, string) {
		return strings.Contains(a.output(), "prepare failed"), ""
	})
	waitFor(t, 20*time.Second, "agent idle again", func() (bool, string) {
		n, _ := nodeByName(t, s, "hooked")
		return n.AgentState == api.AgentIdle, n.AgentState
	})
	su, _ := s.client().Suite(context.Background(), "bad-prepare")
	if su.Counts.Ready != 1 {
		t.Errorf("bad-prepare counts %+v; want its task still Ready", su.Counts)
	}
}

func TestGracefulShutdownFinishesRunningTasks(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "leaver")
	createSuite(t, s, api.SuiteSpec{Name: "slow", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(16)}})
	// Each task leaves a mark when it starts: Running counts the agent's
	// buffer too, and the shutdown must come while both workers run one.
	marks := sharedDir(t)
	var tasks []api.TaskSpec
	for range 50 {
		tasks = append(tasks, sh("touch "+marks+"/$$; sleep 0.5"))
	}
	submit(t, s, "slow", tasks)
	waitFor(t, 30*time.Second, "two tasks running", func() (bool, string) {
		started, _ := os.ReadDir(marks)
		return len(started) >= 2, fmt.Sprintf("%d started", len(started))
	})
	if _, _, code := s.run(t, "node", "shutdown", "leaver", "--graceful"); code != 0 {
		t.Fatal("shutdown failed")
	}
	if code := a.wait(30 * time.Second); code != 0 {
		t.Errorf("agent exited %d", code)
	}
	su, _ := s.client().Suite(context.Background(), "slow")
	c := su.Counts
	if c.Running != 0 || c.Finished < 2 || c.Failed != 0 || c.Finished+c.Ready != 50 {
		t.Errorf("after a graceful shutdown: %+v; want the running tasks finished, the rest Ready again, none failed", c)
	}
}

func TestCancelTaskAndSuite(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "canceller")
	ctx := context.Background()

	createSuite(t, s, api.SuiteSpec{Name: "sleepy", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	ids := submit(t, s, "sleepy", []api.TaskSpec{sh("sleep 60"), sh("sleep 60"), sh("echo never")})
	waitFor(t, 30*time.Second, "the first task to run", func() (bool, string) {
		tk, _ := s.client().Task(ctx, ids[0])
		return tk.State == api.TaskRunning, tk.State
	})
	// Cancelling a running task kills it on the node; the worker takes the next.
	out, errOut, code := s.run(t, "task", "cancel", ids[0])
	if code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("task cancel: exit %d: %s%s", code, out, errOut)
	}
	waitFor(t, 30*time.Second, "the second task to run", func() (bool, string) {
		tk, _ := s.client().Task(ctx, ids[1])
		return tk.State == api.TaskRunning, tk.State
	})
	if tk, _ := s.client().Task(ctx, ids[0]); tk.State != api.TaskCancelled {
		t.Errorf("cancelled task is %s, want Cancelled (a late report must not revive it)", tk.State)
	}
	// Cancelling the suite stops the agent's work on it and cancels the rest.
	if _, err := s.client().CancelSuite(ctx, "sleepy"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the agent to leave the suite", func() (bool, string) {
		n, _ := nodeByName(t, s, "canceller")
		return n.AgentState == api.AgentIdle && n.CurrentSuite == "", n.AgentState + " " + n.CurrentSuite
	})
	su, _ := s.client().Suite(ctx, "sleepy")
	if su.State != api.SuiteCancelled || su.Counts.Cancelled != 3 {
		t.Errorf("suite after cancel: %s %+v; want Cancelled with 3 cancelled tasks", su.State, su.Counts)
	}
	// A cancelled suite takes no tasks, and a finished task cannot be cancelled.
	if _, err := s.client().SubmitTasks(ctx, "sleepy", []api.TaskSpec{sh("true")}); statusOf(err) != 409 {
		t.Errorf("submit to a cancelled suite = %v, want 409", err)
	}
	if _, err := s.client().CancelTask(ctx, ids[0]); statusOf(err) != 409 {
		t.Errorf("cancel a cancelled task = %v, want 409", err)
	}
}

func TestBadSuitesAndTasksAreRefused(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "small")
	createSuite(t, s, api.SuiteSpec{Name: "fine", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}})

	tests := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"negative workers", "POST", "/v1/suites", `{"name": "a", "worker_schedule": {"worker_count": -1}}`, 400, "worker_schedule.worker_count"},
		{"300 workers", "POST", "/v1/suites", `{"name": "a", "worker_schedule": {"worker_count": 300}}`, 400, "worker_schedule.worker_count"},
		{"unknown strategy", "POST", "/v1/suites", `{"name": "a", "worker_schedule": {"worker_count": 1, "cpu_binding": {"cores": [0], "strategy": "Greedy"}}}`, 400, "worker_schedule.cpu_binding.strategy"},
		{"hook without command", "POST", "/v1/suites", `{"name": "a", "worker_schedule": {"worker_count": 1}, "hooks": {"prepare": {"command": []}}}`, 400, "hooks.prepare.command"},
		{"unknown key", "POST", "/v1/suites", `{"name": "a", "worker_schedule": {"worker_count": 1, "workers": 3}}`, 400, "worker_schedule.workers"},
		{"duplicate live name", "POST", "/v1/suites", `{"name": "fine", "worker_schedule": {"worker_count": 1}}`, 409, ""},
		{"empty argv", "POST", "/v1/suites/fine/tasks", `{"tasks": [{"argv": ["true"]}, {"argv": []}]}`, 400, "tasks[1].argv"},
		{"no tasks", "POST", "/v1/suites/fine/tasks", `{"tasks": []}`, 400, "tasks"},
		{"unknown suite", "POST", "/v1/suites/nope/tasks", `{"tasks": [{"argv": ["true"]}]}`, 404, ""},
		{"cores the node lacks", "POST", "/v1/suites/cores/assign", `{"nodes": ["small"]}`, 400, "worker_schedule.cpu_binding.cores[0]"},
	}
	createSuite(t, s, api.SuiteSpec{Name: "cores", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1,
		CPUBinding: &api.CPUBinding{Cores: []int{4000}}}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, e := call(t, tc.method, s.url()+tc.path, s.token, tc.body)
			if code != tc.status || e.Field != tc.field || e.Message == "" {
				t.Errorf("%s %s = %d %+v; want %d naming field %q", tc.method, tc.path, code, e, tc.status, tc.field)
			}
		})
	}
	// The rejected batch stored nothing.
	if su, _ := s.client().Suite(context.Background(), "fine"); su.Counts.Total() != 0 {
		t.Errorf("suite fine has %d tasks after rejected batches, want 0", su.Counts.Total())
	}
	// The CLI gives line and column for a broken file.
	bad := filepath.Join(t.TempDir(), "suite.yaml")
	os.WriteFile(bad, []byte("name: x\nworker_schedule:\n  worker_count: 1\n  wrokers: 2\n"), 0o600)
	_, errOut, code := s.run(t, "suite", "create", "-f", bad)
	if code == 0 || !strings.Contains(errOut, "suite.yaml:4:3") || !strings.Contains(errOut, "worker_schedule.wrokers") {
		t.Errorf("suite create with a typo: exit %d, stderr %q; want FILE:LINE:COL and the key's path", code, errOut)
	}
}

// An agent killed and restarted before the server would call it offline
// must not leave its tasks stuck in Running.
func TestAgentRestartMidSuiteLosesNoTask(t *testing.T) {
	s := startServer(t)
	a, _ := startOnline(t, s, "phoenix")
	runningSuite(t, s, "resilient", 100, func(int) string { return "sleep 0.05" })
	a.signal(syscall.SIGKILL)
	a.wait(5 * time.Second)
	a.restart(t)
	su := waitSuite(t, s, "resilient", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != 100 {
		t.Errorf("after a quick restart: %+v; want all 100 finished", su.Counts)
	}
	if n, _ := nodeByName(t, s, "phoenix"); n.Status != api.StatusOnline {
		t.Errorf("phoenix is %s; the restart was quicker than the offline timeout, so it should never have gone offline", n.Status)
	}
}

// A server restart in the middle of a suite loses no task and no result:
// the agent keeps its workers, holds its reports until it reconnects, and
// tells the new server process what it still holds.
func TestServerRestartMidSuiteLosesNothing(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "steady")
	runningSuite(t, s, "through-restart", 150, func(i int) string { return fmt.Sprintf("sleep 0.02; echo %d", i) })
	s.signal(syscall.SIGTERM)
	s.wait(10 * time.Second)
	s.restart(t)
	su := waitSuite(t, s, "through-restart", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != 150 {
		t.Errorf("after a server restart mid-suite: %+v; want all 150 finished", su.Counts)
	}
	for _, tk := range allTasks(t, s, "through-restart") {
		if tk.Result == nil || tk.Result.ExitCode != 0 {
			t.Errorf("task %s has no clean result: %+v", tk.ID, tk.Result)
		}
	}
}

// runningSuite queues n shell tasks in a closed suite with two workers and
// a small prefetch, and returns once 20 have finished: a suite caught in
// the middle, for crash and restart tests.
func runningSuite(t *testing.T, s *server, name string, n int, script func(i int) string) {
	t.Helper()
	createSuite(t, s, api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(8)}})
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = sh(script(i))
	}
	submit(t, s, name, tasks)
	s.client().CloseSuite(context.Background(), name)
	waitFor(t, 30*time.Second, "some tasks of "+name+" done", func() (bool, string) {
		su, _ := s.client().Suite(context.Background(), name)
		return su.Counts.Finished >= 20, fmt.Sprintf("%+v", su.Counts)
	})
}

// TestWorkerPoolIsAnAllocation: while a suite runs on a node its worker
// pool is listed among the node's allocations, with its cores; it is gone
// once the suite is done there.
func TestWorkerPoolIsAnAllocation(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "pooler")
	for _, binding := range []*api.CPUBinding{nil, {Cores: []int{0}, Strategy: api.BindShared}} {
		name := fmt.Sprintf("pooled-%v", binding != nil)
		su := createSuite(t, s, api.SuiteSpec{Name: name, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, CPUBinding: binding}})
		submit(t, s, name, []api.TaskSpec{sh("sleep 2")})
		s.client().CloseSuite(context.Background(), name)
		waitFor(t, 20*time.Second, "the pool listed as an allocation", func() (bool, string) {
			as, err := s.client().Allocations(context.Background(), "pooler")
			for _, a := range as {
				if a.ID == "pool:"+su.ID && a.Kind == api.AllocationPool && strings.HasPrefix(a.State, "running, 1 workers") {
					return binding == nil || strings.HasSuffix(a.State, "on cores 0"), a.State
				}
			}
			return false, fmt.Sprint(as, err)
		})
		waitSuite(t, s, name, api.SuiteComplete, time.Minute)
		waitFor(t, 10*time.Second, "the pool's allocation gone", func() (bool, string) {
			as, err := s.client().Allocations(context.Background(), "pooler")
			return err == nil && len(as) == 0, fmt.Sprint(as, err)
		})
	}
}

// The agent's state reaches node ls as it changes, not with the next
// heartbeat (a minute apart here).
func TestNodeStateShowsAtOnce(t *testing.T) {
	s := startServer(t, "--heartbeat-interval", "1m", "--offline-after", "3m")
	startOnline(t, s, "prompt")
	createSuite(t, s, api.SuiteSpec{Name: "slow-prepare", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1},
		Hooks: api.Hooks{Prepare: &api.Hook{Command: []string{"sleep", "3"}}}})
	submit(t, s, "slow-prepare", []api.TaskSpec{sh("sleep 60")})
	state := func(want string) {
		t.Helper()
		waitFor(t, 15*time.Second, "node ls to show "+want, func() (bool, string) {
			n, _ := nodeByName(t, s, "prompt")
			return n.AgentState == want, n.AgentState
		})
	}
	state(api.AgentPreparing)
	state(api.AgentExecuting)
	if _, err := s.client().CancelSuite(context.Background(), "slow-prepare"); err != nil {
		t.Fatal(err)
	}
	state(api.AgentIdle)
}
