package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// ranOn counts a suite's finished tasks by the node that ran them.
func ranOn(t *testing.T, s *server, suite string) map[string]int {
	t.Helper()
	ran := map[string]int{}
	for _, tk := range allTasks(t, s, suite) {
		if tk.State == api.TaskFinished && tk.Result != nil {
			ran[tk.Result.NodeID]++
		}
	}
	return ran
}

// Two agents serve one suite of 40 short tasks with the default prefetch
// of 32: each runs about half, not the first to fetch nearly all while the
// other idles.
func TestTwoAgentsShareASuite(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "left")
	startAgent(t, s, "right")
	left := waitStatus(t, s, "left", api.StatusOnline, 20*time.Second)
	right := waitStatus(t, s, "right", api.StatusOnline, 20*time.Second)

	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers each", workers), func(t *testing.T) {
			name := fmt.Sprintf("fair-%d", workers)
			createSuite(t, s, api.SuiteSpec{Name: name,
				WorkerSchedule: api.WorkerSchedule{WorkerCount: workers, TaskPrefetchCount: prefetch(32)}})
			tasks := make([]api.TaskSpec, 40)
			for i := range tasks {
				tasks[i] = sh("sleep 0.05")
			}
			submit(t, s, name, tasks)
			if _, err := s.client().CloseSuite(context.Background(), name); err != nil {
				t.Fatal(err)
			}
			su := waitSuite(t, s, name, api.SuiteComplete, time.Minute)
			if su.Counts.Finished != 40 {
				t.Fatalf("suite ended with %+v, want 40 finished", su.Counts)
			}
			ran := ranOn(t, s, name)
			t.Logf("tasks run by node: %v", ran)
			for _, n := range []api.Node{left, right} {
				if got := ran[n.ID]; got < 15 || got > 25 {
					t.Errorf("%s ran %d of the 40 tasks, want 15 to 25 (all: %v)", n.Name, got, ran)
				}
			}
		})
	}
}

// An agent that comes when another already holds most of the suite's
// tasks gets its share of what is left: the server asks the first to give
// back tasks it has not started.
func TestLateAgentGetsTasksGivenBack(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "early")
	createSuite(t, s, api.SuiteSpec{Name: "late",
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(32)}})
	tasks := make([]api.TaskSpec, 40)
	for i := range tasks {
		tasks[i] = sh("sleep 0.2")
	}
	submit(t, s, "late", tasks)
	if _, err := s.client().CloseSuite(context.Background(), "late"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the early agent to claim its buffer", func() (bool, string) {
		su, err := s.client().Suite(context.Background(), "late")
		return err == nil && su.Counts.Running >= 32, fmt.Sprintf("%+v %v", su.Counts, err)
	})

	_, tardy := startOnline(t, s, "tardy")
	su, err := s.client().Suite(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	left := su.Counts.Ready + su.Counts.Running
	su = waitSuite(t, s, "late", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != 40 {
		t.Fatalf("suite ended with %+v, want 40 finished", su.Counts)
	}
	// It finds 8 Ready; without a giveback that is all it runs. A few
	// more finish while it starts its pool.
	ran := ranOn(t, s, "late")
	t.Logf("tasks run by node: %v; %d were unfinished when the late agent came", ran, left)
	if got, want := ran[tardy.ID], left/2-4; got < want {
		t.Errorf("the late agent ran %d tasks of the %d unfinished when it came, want %d or more (all: %v)", got, left, want, ran)
	}
}

// An agent that comes when another has claimed every task of the suite,
// none Ready, still gets its share (issue 28: a 0→2 pool with
// worker_count 2 ran 8 × sleep 3 in 12 s, the second machine idle): the
// first gives back tasks it has not started, and every task runs exactly
// once.
func TestLateAgentGetsAShareOfAFullyClaimedSuite(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "early")
	createSuite(t, s, api.SuiteSpec{Name: "claimed",
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(32)}})
	dir := sharedDir(t)
	const n, d = 8, 3 * time.Second
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = sh(fmt.Sprintf("echo %d >> %s/ran; sleep %g", i, dir, d.Seconds()))
	}
	submit(t, s, "claimed", tasks)
	if _, err := s.client().CloseSuite(context.Background(), "claimed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the early agent to claim every task", func() (bool, string) {
		su, err := s.client().Suite(context.Background(), "claimed")
		return err == nil && su.Counts.Running == n, fmt.Sprintf("%+v %v", su.Counts, err)
	})
	claimed := time.Now() // about when the early agent's two workers start

	_, tardy := startOnline(t, s, "tardy")
	ready := time.Now()
	su := waitSuite(t, s, "claimed", api.SuiteComplete, 2*time.Minute)
	logMakespan(t, claimed, ready, time.Now(), n, d)
	if su.Counts.Finished != n {
		t.Fatalf("suite ended with %+v, want %d finished", su.Counts, n)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ran"))
	if err != nil {
		t.Fatal(err)
	}
	ran := strings.Fields(string(b))
	slices.Sort(ran)
	if want := strings.Fields("0 1 2 3 4 5 6 7"); !slices.Equal(ran, want) {
		t.Errorf("tasks started %v, want each of %v once", ran, want)
	}
	// Two of the 8 run on the early agent when the late one comes; of
	// the 6 unstarted, its share is 4, or 3 if the first two end before
	// it fetches.
	byNode := ranOn(t, s, "claimed")
	t.Logf("tasks run by node: %v", byNode)
	if got := byNode[tardy.ID]; got < 3 {
		t.Errorf("the late agent ran %d of the %d tasks, want 3 or more (all: %v)", got, n, byNode)
	}
}

// logMakespan logs how long the suite took against the best it could
// have done once the late agent was ready (issue 28 wants 1.3× or less):
// the early agent's two workers took a task each at start and are free
// again after d; the six other tasks go, best, each to the worker free
// first, the late agent's two from ready. A measure, not an assertion: the
// machine's load decides it.
func logMakespan(t *testing.T, start, ready, end time.Time, n int, d time.Duration) {
	t.Helper()
	if ready.Sub(start) >= d {
		t.Logf("the late agent came %v after the tasks started, after the first ended: no measure", ready.Sub(start))
		return
	}
	free := []time.Duration{d, d, ready.Sub(start), ready.Sub(start)}
	for range n - 2 {
		i := slices.Index(free, slices.Min(free))
		free[i] += d
	}
	ideal, got := slices.Max(free), end.Sub(start)
	t.Logf("makespan %v (from the claim; late agent ready at %v); ideal %v: %.2fx, %.2fx counted from the late agent's start",
		got.Round(10*time.Millisecond), ready.Sub(start).Round(10*time.Millisecond), ideal.Round(10*time.Millisecond),
		got.Seconds()/ideal.Seconds(), (got-ready.Sub(start)).Seconds()/(ideal-ready.Sub(start)).Seconds())
}
