package workerpool

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"github.com/nodemgr/nodemgr/internal/node/workerpool/workerpooltest"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// batchMaxForTest is the most tasks a worker (package worker) takes in
// one fetch.
const batchMaxForTest = 8

func TestEveryTaskRunsOnce(t *testing.T) {
	cases := []struct {
		name              string
		workers, prefetch int
		tasks             int
	}{
		{"one worker, no prefetch", 1, 0, 20},
		{"four workers, no prefetch", 4, 0, 60},
		{"four workers, prefetch 32", 4, 32, 300},
		{"three workers, prefetch 1", 3, 1, 30},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(tasks("t", tc.tasks, "ok")...)
			p := start(t, config(t, "worker", tc.workers, tc.prefetch), src)
			p.finish(t, 60*time.Second)
			rec := src.Record()
			fetched, returned, reports, maxes := rec.Fetched, rec.Returned, rec.Reports, rec.Maxes
			if len(fetched) != tc.tasks {
				t.Errorf("fetched %d tasks, want %d", len(fetched), tc.tasks)
			}
			if len(returned) != 0 {
				t.Errorf("returned %v, want none", returned)
			}
			seen := map[string]int{}
			for _, r := range reports {
				seen[r.TaskID]++
				if r.Outcome != api.OutcomeSucceeded || r.Attempt != 1 || r.Result.NodeID != "node-1" ||
					r.Result.Stdout != "ok "+r.TaskID || r.Result.FinishedAt.IsZero() {
					t.Errorf("report %+v, want succeeded attempt 1 on node-1 with its output", r)
				}
			}
			for _, id := range fetched {
				if seen[id] != 1 {
					t.Errorf("task %s reported %d times, want 1", id, seen[id])
				}
			}
			for _, m := range maxes {
				// Without prefetch, one task per waiting worker; with it, up to the buffer.
				if tc.prefetch == 0 && (m < 1 || m > tc.workers) || tc.prefetch > 0 && (m < 1 || m > tc.prefetch) {
					t.Errorf("Fetch(max %d) with prefetch %d and %d workers; want 1..workers without prefetch, 1..prefetch with", m, tc.prefetch, tc.workers)
				}
			}
			st := p.Stats()
			if st.Busy != 0 || st.Buffered != 0 || st.Alive != 0 || st.Respawns != 0 || st.Reported != tc.tasks {
				t.Errorf("Stats after Run = %+v, want nothing busy, buffered or alive, no respawns, %d reported", st, tc.tasks)
			}
			// One sample per fetch answered with tasks: one task each, or
			// a batch when the workers' tasks are short.
			if n := st.FetchLatency.Samples; n < tc.tasks/batchMaxForTest || n > tc.tasks || st.FetchLatency.P50 <= 0 || st.FetchLatency.P99 < st.FetchLatency.P50 {
				t.Errorf("FetchLatency = %+v, want %d to %d samples with 0 < p50 <= p99", st.FetchLatency, tc.tasks/batchMaxForTest, tc.tasks)
			}
		})
	}
}

// Workers get the pool's NODEMGR_* variables, Config.Env and PATH, HOME,
// LANG and TZ, but nothing else of the agent's environment: its secrets
// are there.
func TestWorkerEnvironment(t *testing.T) {
	t.Setenv("NODEMGR_JOIN_TOKEN", "secret")
	t.Setenv("NODEMGR_LOCAL_API_TOKEN", "secret")
	t.Setenv("WORKERPOOL_TEST_INHERITED", "yes")
	t.Setenv("TZ", "Europe/Paris")
	src := newSource(task("env", "env"))
	cfg := config(t, "worker", 1, 0)
	cfg.Env = append(cfg.Env, "EXTRA=1")
	p := start(t, cfg, src)
	p.finish(t, 20*time.Second)
	r, _ := src.ReportFor("env")
	env := strings.Split(r.Result.Stdout, "\n")
	for _, want := range []string{"EXTRA=1", "PATH=" + os.Getenv("PATH"), "TZ=Europe/Paris", "NODEMGR_SUITE_ID=suite-1",
		"NODEMGR_SUITE_NAME=test", "NODEMGR_NODE_ID=node-1", "NODEMGR_WORKER_ID=0", "NODEMGR_WORKER_COUNT=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("worker environment lacks %s", want)
		}
	}
	for _, kv := range env {
		for _, banned := range []string{"NODEMGR_JOIN_TOKEN=", "NODEMGR_LOCAL_API_TOKEN=", "WORKERPOOL_TEST_INHERITED="} {
			if strings.HasPrefix(kv, banned) {
				t.Errorf("worker environment has the agent's %s", kv)
			}
		}
	}
}

func TestDoneWithNoTasks(t *testing.T) {
	src := newSource()
	p := start(t, config(t, "worker", 2, 32), src)
	p.finish(t, 20*time.Second)
}

func TestFailedTask(t *testing.T) {
	src := newSource(task("bad", "fail", "3"))
	p := start(t, config(t, "worker", 1, 0), src)
	p.finish(t, 20*time.Second)
	r, _ := src.ReportFor("bad")
	if r.Outcome != api.OutcomeFailed || r.Reason != "exit status 3" || r.Result.ExitCode != 3 || r.Crash || r.Result.Stderr != "failing" {
		t.Errorf("report = %+v, want failed, exit status 3, not a crash, with stderr", r)
	}
}

// A worker that dies holding a task is noticed, its task reported as the
// death says, and a new worker takes the next tasks.
func TestWorkerDeath(t *testing.T) {
	cases := []struct {
		name    string
		argv    []string
		outcome string
		crash   bool
		signal  string
		code    int
		reason  string
	}{
		{"SIGSEGV", []string{"segv"}, api.OutcomeFailed, true, "SIGSEGV", -1, "worker crashed (SIGSEGV)"},
		// A Go worker's fault: exit status 2, the runtime's report on stderr.
		{"Go fault", []string{"gosegv"}, api.OutcomeFailed, true, "SIGSEGV", 2, "worker crashed (SIGSEGV, Go runtime, exit status 2)"},
		{"SIGKILL", []string{"kill"}, api.OutcomeFailed, true, "SIGKILL", -1, "worker crashed (SIGKILL)"},
		// The pool did not send it: a failure, counted, or a task that
		// kills its worker so would be retried forever.
		{"SIGTERM", []string{"term"}, api.OutcomeFailed, true, "SIGTERM", -1, "worker killed by SIGTERM (not sent by nodemgr)"},
		{"exit", []string{"exit", "7"}, api.OutcomeFailed, true, "", 7, "worker exited while running the task (exit status 7)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(append([]api.Task{task("victim", tc.argv...)}, tasks("after", 3, "ok")...)...)
			p := start(t, config(t, "worker", 1, 0), src)
			p.finish(t, 30*time.Second)
			r, ok := src.ReportFor("victim")
			if !ok {
				t.Fatal("no report for the task the worker died with")
			}
			if r.Outcome != tc.outcome || r.Crash != tc.crash || r.Result.Signal != tc.signal ||
				r.Result.ExitCode != tc.code || r.Reason != tc.reason {
				t.Errorf("report = %+v, want outcome %s crash %v signal %q exit %d reason %q",
					r, tc.outcome, tc.crash, tc.signal, tc.code, tc.reason)
			}
			for _, id := range []string{"after-000", "after-001", "after-002"} {
				if r, ok := src.ReportFor(id); !ok || r.Outcome != api.OutcomeSucceeded {
					t.Errorf("report for %s = %+v (found %v), want succeeded by the new worker", id, r, ok)
				}
			}
			if st := p.Stats(); st.Respawns != 1 {
				t.Errorf("Respawns = %d, want 1", st.Respawns)
			}
		})
	}
}

// A worker that breaks the protocol is dropped and replaced; its task is
// run again by the replacement, not reported failed.
func TestProtocolViolation(t *testing.T) {
	for _, misdeed := range []string{"garbage", "unknown-op", "wrong-report", "bad-outcome", "double-fetch", "hang-up"} {
		t.Run(misdeed, func(t *testing.T) {
			marker := filepath.Join(shortTempDir(t), "done")
			src := newSource(task("victim", misdeed, marker), task("next", "ok"))
			p := start(t, config(t, "raw", 1, 32), src)
			p.finish(t, 30*time.Second)
			if _, err := os.Stat(marker); err != nil {
				t.Fatalf("the worker never misbehaved: %v", err)
			}
			rec := src.Record()
			returned, reports := rec.Returned, rec.Reports
			var got []string
			for _, r := range reports {
				got = append(got, r.TaskID+":"+r.Outcome)
			}
			slices.Sort(got)
			if want := []string{"next:succeeded", "victim:succeeded"}; !slices.Equal(got, want) || len(returned) > 0 {
				t.Errorf("reports %v, returned %v; want %v and nothing returned", got, returned, want)
			}
			if st := p.Stats(); st.Dropped != 1 || st.Respawns != 1 {
				t.Errorf("Dropped, Respawns = %d, %d; want 1, 1", st.Dropped, st.Respawns)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	cases := []struct {
		name      string
		argv      []string
		killGrace time.Duration // the task's
		signal    string
		respawns  int
	}{
		// The worker gives the task up when asked and carries on.
		{"worker abandons the task", []string{"sleep", "30s"}, 0, "", 0},
		// The worker ignores the request and is killed after the task's
		// grace and KillGrace.
		{"worker is killed", []string{"hang", "30s"}, 200 * time.Millisecond, "SIGKILL", 1},
		// The worker takes longer than KillGrace, but not than the task's
		// grace: its task's processes get that long to stop.
		{"worker takes the task's grace", []string{"hang", "1s"}, 2 * time.Second, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			slow := withTimeout(task("slow", tc.argv...), 200*time.Millisecond)
			slow.KillGrace = api.Duration(tc.killGrace)
			src := newSource(slow, task("next", "ok"))
			cfg := config(t, "worker", 1, 0)
			cfg.KillGrace = 300 * time.Millisecond
			p := start(t, cfg, src)
			p.finish(t, 20*time.Second)
			r, _ := src.ReportFor("slow")
			if r.Outcome != api.OutcomeFailed || r.Reason != "timeout" || r.Crash || r.Result.Signal != tc.signal {
				t.Errorf("report = %+v, want failed, reason timeout, no crash, signal %q", r, tc.signal)
			}
			// The worker times the command from its own start, a moment
			// after the pool started the timeout's clock, and rounds down.
			if r.Result.DurationMS < 190 {
				t.Errorf("DurationMS = %d, want about the timeout (200) or more", r.Result.DurationMS)
			}
			if r, _ := src.ReportFor("next"); r.Outcome != api.OutcomeSucceeded {
				t.Errorf("next task: %+v, want succeeded", r)
			}
			if st := p.Stats(); st.Respawns != tc.respawns {
				t.Errorf("Respawns = %d, want %d", st.Respawns, tc.respawns)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	src := newSource(task("running", "sleep", "30s"), task("buffered", "ok"), task("last", "ok"))
	p := start(t, config(t, "worker", 1, 32), src)
	waitFor(t, 20*time.Second, "the first task to run", func() bool {
		st := p.Stats()
		return st.Busy == 1 && st.Buffered == 2
	})
	if p.Cancel("elsewhere", 0) {
		t.Error(`Cancel("elsewhere") = true, want false: the pool never had it`)
	}
	// The source hands out attempt 1: a cancel of another attempt (one
	// already reported, say) leaves it alone.
	if p.Cancel("running", 2) || p.Cancel("buffered", 2) {
		t.Error(`Cancel of attempt 2 = true, want false: the pool holds attempt 1`)
	}
	if !p.Cancel("buffered", 0) {
		t.Error(`Cancel("buffered") = false, want true`)
	}
	if !p.Cancel("running", 1) {
		t.Error(`Cancel("running") = false, want true`)
	}
	p.finish(t, 20*time.Second)
	for id, want := range map[string]string{"running": "failed/cancelled", "buffered": "failed/cancelled", "last": "succeeded/"} {
		if r, _ := src.ReportFor(id); r.Outcome+"/"+r.Reason != want {
			t.Errorf("report for %s = %+v, want %s", id, r, want)
		}
	}
	if st := p.Stats(); st.Respawns != 0 {
		t.Errorf("Respawns = %d, want 0: the worker dropped the task when asked", st.Respawns)
	}
}

// A graceful stop lets running tasks finish and gives the buffered ones
// back; every fetched task ends reported or returned, never both.
func TestGracefulStop(t *testing.T) {
	src := newSource(tasks("t", 40, "sleep", "300ms")...)
	src.SetOpen(true)
	p := start(t, config(t, "worker", 2, 32), src)
	waitFor(t, 20*time.Second, "both workers busy with tasks buffered", func() bool {
		st := p.Stats()
		return st.Busy == 2 && st.Buffered > 0
	})
	p.Stop(true)
	p.finish(t, 20*time.Second)
	rec := src.Record()
	fetched, returned, reports := rec.Fetched, rec.Returned, rec.Reports
	if len(reports) != 2 {
		t.Errorf("%d reports, want the 2 running tasks", len(reports))
	}
	for _, r := range reports {
		if r.Outcome != api.OutcomeSucceeded {
			t.Errorf("report %+v, want succeeded: running tasks finish", r)
		}
	}
	ended := slices.Clone(returned)
	for _, r := range reports {
		ended = append(ended, r.TaskID)
	}
	slices.Sort(ended)
	slices.Sort(fetched)
	if !slices.Equal(ended, fetched) {
		t.Errorf("reported+returned = %v, want each fetched task once: %v", ended, fetched)
	}
	if st := p.Stats(); st.Alive != 0 {
		t.Errorf("%d workers alive after Run, want 0", st.Alive)
	}
}

func TestForceStop(t *testing.T) {
	for _, mode := range []string{"worker", "worker-nosignal"} {
		t.Run(mode, func(t *testing.T) {
			src := newSource(tasks("t", 10, "sleep", "30s")...)
			cfg := config(t, mode, 2, 32)
			p := start(t, cfg, src)
			waitFor(t, 20*time.Second, "both workers busy", func() bool { return p.Stats().Busy == 2 })
			begin := time.Now()
			p.Stop(false)
			p.finish(t, 20*time.Second)
			if d := time.Since(begin); d > defaultKillGrace {
				t.Errorf("Run took %v to return after Stop(false), want less than the kill grace", d)
			}
			rec := src.Record()
			returned, reports := rec.Returned, rec.Reports
			if len(reports) != 2 || len(returned) != 8 {
				t.Errorf("%d reports, %d returned; want 2 and 8", len(reports), len(returned))
			}
			for _, r := range reports {
				if r.Outcome != api.OutcomeStopped || r.Crash {
					t.Errorf("report %+v, want stopped, not a crash", r)
				}
			}
		})
	}
}

func TestWake(t *testing.T) {
	src := newSource()
	src.SetOpen(true)
	p := start(t, config(t, "worker", 1, 4), src)
	// Let the empty fetches back off to their longest wait.
	waitFor(t, 20*time.Second, "fetches to back off", func() bool {
		return len(src.Record().Maxes) >= 6 // now waiting 1.6s
	})
	src.Add(task("late", "ok"))
	src.SetOpen(false)
	begin := time.Now()
	p.Wake()
	waitFor(t, 20*time.Second, "the task to be reported", func() bool {
		_, ok := src.ReportFor("late")
		return ok
	})
	if d := time.Since(begin); d > time.Second {
		t.Errorf("task ran %v after Wake, want well under the 1.6s backoff", d)
	}
	p.finish(t, 20*time.Second)
}

func TestBrokenWorkerCommand(t *testing.T) {
	cases := []struct {
		name    string
		command []string
		want    string
	}{
		{"exits at once", []string{"/bin/sh", "-c", "exit 3"}, "before connecting"},
		{"does not exist", []string{"/nonexistent/worker"}, "start worker 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(task("t", "ok"))
			cfg := config(t, "worker", 2, 32)
			cfg.Command = tc.command
			p := start(t, cfg, src)
			err := p.wait(t, 30*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, tc.want)
			}
			rec := src.Record()
			fetched, returned, reports := rec.Fetched, rec.Returned, rec.Reports
			if len(reports) != 0 || !slices.Equal(returned, fetched) {
				t.Errorf("reports %v, returned %v: want no reports and every fetched task (%v) returned", reports, returned, fetched)
			}
		})
	}
}

// A program that is not a worker never says hello; it must not hold its
// slot forever.
func TestWorkerThatNeverConnects(t *testing.T) {
	src := newSource(task("t", "ok"))
	p, err := New(config(t, "idle", 1, 0), src)
	if err != nil {
		t.Fatal(err)
	}
	p.connectTimeout = 100 * time.Millisecond
	errc := make(chan error, 1)
	go func() { errc <- p.Run(t.Context()) }()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "did not connect within 100ms") {
			t.Errorf("Run = %v, want an error saying the worker did not connect", err)
		}
	case <-time.After(30 * time.Second):
		p.Stop(false)
		t.Fatal("Run did not give up on a worker that never connects")
	}
	if st := p.Stats(); st.Respawns != maxSilentDeaths-1 {
		t.Errorf("Respawns = %d, want %d", st.Respawns, maxSilentDeaths-1)
	}
}

func TestStopBeforeRun(t *testing.T) {
	src := newSource(task("t", "ok"))
	p, err := New(config(t, "worker", 1, 0), src)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(true)
	if err := p.Run(t.Context()); err != nil {
		t.Errorf("Run after Stop = %v, want nil", err)
	}
	if fetched := src.Record().Fetched; len(fetched) != 0 {
		t.Errorf("fetched %v, want nothing", fetched)
	}
}

func TestRunEndsWithContext(t *testing.T) {
	src := newSource(tasks("t", 4, "sleep", "30s")...)
	p, err := New(config(t, "worker", 2, 32), src)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	cctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() { errc <- p.Run(cctx) }()
	waitFor(t, 20*time.Second, "both workers busy", func() bool { return p.Stats().Busy == 2 })
	stop()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Run = %v, want nil: cancellation is not an error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	rec := src.Record()
	returned, reports := rec.Returned, rec.Reports
	if len(reports) != 2 || len(returned) != 2 {
		t.Errorf("%d reports, %d returned; want 2 stopped and 2 returned", len(reports), len(returned))
	}
}

func TestNewRejects(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no workers", func(c *Config) { c.Workers = 0 }, "workers"},
		{"too many workers", func(c *Config) { c.Workers = 257 }, "workers"},
		{"negative prefetch", func(c *Config) { c.Prefetch = -1 }, "prefetch"},
		{"no command", func(c *Config) { c.Command = nil }, "command"},
		{"no dir", func(c *Config) { c.Dir = "" }, "dir"},
		{"missing core", func(c *Config) { c.Binding = &api.CPUBinding{Cores: []int{0, 4000}} }, "core 4000"},
		{"negative core", func(c *Config) { c.Binding = &api.CPUBinding{Cores: []int{-1}} }, "core -1"},
		{"core twice", func(c *Config) { c.Binding = &api.CPUBinding{Cores: []int{0, 0}} }, "core 0 is listed twice"},
		{"exclusive with too few cores", func(c *Config) {
			c.Workers = 3
			c.Binding = &api.CPUBinding{Cores: []int{0}, Strategy: api.BindExclusive}
		}, "3 workers, 1 cores"},
		{"unknown strategy", func(c *Config) { c.Binding = &api.CPUBinding{Cores: []int{0}, Strategy: "Spread"} }, "Spread"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, "worker", 2, 0)
			tc.change(&cfg)
			_, err := New(cfg, newSource())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("New = %v, want an invalid-config error mentioning %q", err, tc.want)
			}
		})
	}
}

// A worker whose tasks are short takes several per fetch. When it dies in
// the middle of a batch, the task it was running takes the death; the
// ones behind it, never started, run again elsewhere as the same attempt,
// and each task ends exactly once.
func TestBatchedWorkerDeath(t *testing.T) {
	var list []api.Task
	list = append(list, tasks("warm", 4, "ok")...) // short: the worker asks for batches
	list = append(list, task("victim", "segv"))
	list = append(list, tasks("behind", 6, "ok")...)
	src := newSource(list...)
	p := start(t, config(t, "worker", 1, 32), src)
	p.finish(t, 30*time.Second)
	rec := src.Record()
	counts := map[string]int{}
	for _, r := range rec.Reports {
		counts[r.TaskID]++
		switch {
		case r.TaskID == "victim":
			if !r.Crash || r.Result.Signal != "SIGSEGV" {
				t.Errorf("victim report %+v, want a SIGSEGV crash", r)
			}
		case r.Outcome != api.OutcomeSucceeded || r.Attempt != 1 || r.Crash:
			t.Errorf("report %+v, want succeeded at attempt 1, never charged with the crash", r)
		}
	}
	for _, tk := range list {
		if tk.ID != "victim" && counts[tk.ID] != 1 {
			t.Errorf("task %s reported %d times, want 1", tk.ID, counts[tk.ID])
		}
	}
	if st := p.Stats(); st.FetchLatency.Samples >= len(list) {
		t.Errorf("%d fetches answered for %d short tasks; want batches", st.FetchLatency.Samples, len(list))
	}
}

// A task cancelled while it waits behind another in a worker's batch is
// skipped by the worker and reported cancelled, once; a timeout counts
// from when a waiting task starts, not from when it was handed out.
func TestBatchedCancelAndTimeout(t *testing.T) {
	slow := withTimeout(task("slow", "sleep", "300ms"), 250*time.Millisecond)
	waits := withTimeout(task("waits", "sleep", "50ms"), 200*time.Millisecond)
	list := append(tasks("warm", 4, "ok"), task("first", "sleep", "400ms"), task("doomed", "ok"), slow, waits)
	src := newSource(list...)
	p := start(t, config(t, "worker", 1, 32), src)
	waitFor(t, 10*time.Second, "first running", func() bool {
		st := p.Stats()
		return len(st.PerWorker) == 1 && st.PerWorker[0].TaskID == "first"
	})
	p.mu.Lock()
	waiting := p.held["doomed"] != nil && p.held["slow"] != nil && p.held["waits"] != nil
	p.mu.Unlock()
	if !waiting {
		t.Fatal("doomed, slow and waits are not held by the worker behind first; the batch this test is about did not happen")
	}
	if !p.Cancel("doomed", 1) {
		t.Fatal("Cancel(doomed) = false, want the pool to hold it")
	}
	p.finish(t, 30*time.Second)
	want := map[string]string{"first": api.OutcomeSucceeded, "doomed": "cancelled", "slow": "timeout", "waits": api.OutcomeSucceeded}
	counts := map[string]int{}
	for _, r := range src.Record().Reports {
		counts[r.TaskID]++
		w, ok := want[r.TaskID]
		if !ok {
			continue
		}
		got := r.Outcome
		if r.Outcome == api.OutcomeFailed {
			got = r.Reason
		}
		if got != w {
			t.Errorf("%s ended %s (%+v), want %s", r.TaskID, got, r, w)
		}
	}
	for id := range want {
		if counts[id] != 1 {
			t.Errorf("%s reported %d times, want 1", id, counts[id])
		}
	}
}

// A worker's child that left its group and holds its stderr pipe does not
// hold up the pool: the worker's death is reported within a bounded wait,
// and a new worker carries on.
func TestWorkerChildHoldsStderr(t *testing.T) {
	pidFile := filepath.Join(shortTempDir(t), "pid")
	src := newSource(task("victim", "exit-leaving-child", pidFile), task("next", "ok"))
	p := start(t, config(t, "worker", 1, 0), src)
	begin := time.Now()
	p.finish(t, 20*time.Second)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if r, _ := src.ReportFor("victim"); r.Outcome != api.OutcomeFailed || r.Result.ExitCode != 3 {
		t.Errorf("victim: %+v, want failed with exit status 3", r)
	}
	if r, _ := src.ReportFor("next"); r.Outcome != api.OutcomeSucceeded {
		t.Errorf("next: %+v, want succeeded", r)
	}
	if b, err := os.ReadFile(pidFile); err != nil {
		t.Errorf("the child did not start: %v", err)
	} else if pid, _ := strconv.Atoi(string(b)); syscall.Kill(pid, 0) != nil {
		t.Errorf("the child (pid %d) is gone: this test is about one that outlives its worker", pid)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v, want the child's hold on stderr cut short (%v)", d, stderrDrainWait)
	}
}

// A work dir too deep for a unix socket path (107 bytes) still runs its
// pool: the socket goes to a private directory under TMPDIR.
func TestDeepWorkDir(t *testing.T) {
	cfg := config(t, "worker", 1, 0)
	cfg.Dir = filepath.Join(cfg.Dir, strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := newSource(task("t1", "ok"))
	p := start(t, cfg, src)
	if len(p.sock) > maxSocketPath || strings.HasPrefix(p.sock, cfg.Dir) {
		t.Errorf("socket %s (%d bytes): want it outside the deep dir, within %d bytes", p.sock, len(p.sock), maxSocketPath)
	}
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Fatalf("Run in a deep work dir = %v, want nil", err)
	}
	if r, ok := src.ReportFor("t1"); !ok || r.Outcome != api.OutcomeSucceeded {
		t.Errorf("report = %+v, %v; want t1 succeeded", r, ok)
	}
	// Someone else's (or an open) directory in the fallback's place is refused.
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := privateDir(open); err == nil {
		t.Errorf("privateDir(%s, mode 0777) = nil, want it refused", open)
	}
}

// slowSource is a source whose first Fetch is slow to answer, as a round
// trip to a busy server is: the server has claimed the tasks the moment
// the call reached it, whether or not the caller waits for the answer.
type slowSource struct {
	*workerpooltest.Source
	calls   atomic.Int32
	entered chan struct{}
	answer  chan struct{}
	lost    atomic.Int32 // claimed tasks whose answer nobody waited for
}

func (s *slowSource) Fetch(ctx context.Context, max int) ([]api.Task, bool, bool, error) {
	if s.calls.Add(1) != 1 {
		return nil, false, false, nil
	}
	close(s.entered)
	tasks, _, _, _ := s.Source.Fetch(context.Background(), max) // claimed now
	select {
	case <-s.answer:
		return tasks, false, false, nil
	case <-ctx.Done():
		s.lost.Add(int32(len(tasks)))
		return nil, false, false, ctx.Err()
	}
}

// A graceful stop while a fetch is on its way waits for its answer and
// gives its tasks back, instead of cancelling it: the server has claimed
// them, and nobody would run or return them.
func TestGracefulStopReturnsAFetchOnItsWay(t *testing.T) {
	base := newSource(tasks("t", 3, "true")...)
	base.SetOpen(true)
	src := &slowSource{Source: base, entered: make(chan struct{}), answer: make(chan struct{})}
	p := start(t, config(t, "worker", 1, 4), src)
	select {
	case <-src.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the pool never fetched")
	}
	p.Stop(true)
	time.AfterFunc(200*time.Millisecond, func() { close(src.answer) })
	p.finish(t, 20*time.Second)
	if n := src.lost.Load(); n != 0 {
		t.Errorf("%d claimed tasks were lost: the fetch on its way was cancelled", n)
	}
	rec := src.Record()
	slices.Sort(rec.Returned)
	if want := []string{"t-000", "t-001", "t-002"}; !slices.Equal(rec.Returned, want) {
		t.Errorf("returned %v, want the fetch's tasks %v", rec.Returned, want)
	}
}

// Release gives back buffered tasks, the last fetched first, never one a
// worker runs; every fetched task ends reported or returned, once.
func TestRelease(t *testing.T) {
	src := newSource(tasks("t", 20, "sleep", "30s")...)
	src.SetOpen(true)
	p := start(t, config(t, "worker", 1, 32), src)
	waitFor(t, 20*time.Second, "one task running and 19 buffered", func() bool {
		st := p.Stats()
		return st.Busy == 1 && st.Buffered == 19
	})
	if got := p.Release(5); got != 5 {
		t.Errorf("Release(5) = %d, want 5", got)
	}
	if got := p.Stats().Buffered; got != 14 {
		t.Errorf("Buffered after Release(5) = %d, want 14", got)
	}
	waitFor(t, 10*time.Second, "the released tasks to go back", func() bool { return len(src.Record().Returned) == 5 })
	if got, want := src.Record().Returned, []string{"t-015", "t-016", "t-017", "t-018", "t-019"}; !slices.Equal(got, want) {
		t.Errorf("returned %v, want the last fetched %v", got, want)
	}
	if got := p.Release(100); got != 14 {
		t.Errorf("Release(100) = %d, want the 14 buffered: the running task stays", got)
	}
	if got := p.Release(1); got != 0 {
		t.Errorf("Release(1) of an empty buffer = %d, want 0", got)
	}
	if st := p.Stats(); st.Busy != 1 || st.Buffered != 0 {
		t.Errorf("after releasing everything: %d busy, %d buffered; want 1 and 0", st.Busy, st.Buffered)
	}
	p.Stop(false)
	p.finish(t, 20*time.Second)
	if got := p.Release(1); got != 0 {
		t.Errorf("Release after Run = %d, want 0", got)
	}
	checkEachFetchedEnded(t, src.Record())
}

// startBatched runs a pool of one worker that holds a batch queued behind
// a task that runs 1.5 s: a few short tasks first make the worker fetch
// several at once.
func startBatched(t *testing.T) (*running, *workerpooltest.Source) {
	t.Helper()
	list := append(tasks("warm", 4, "ok"), task("first", "sleep", "1500ms"))
	list = append(list, tasks("queued", 3, "ok")...)
	src := newSource(list...)
	src.SetOpen(true)
	p := start(t, config(t, "worker", 1, 32), src)
	waitFor(t, 10*time.Second, "first running", func() bool {
		st := p.Stats()
		return len(st.PerWorker) == 1 && st.PerWorker[0].TaskID == "first"
	})
	if len(queued(p)) == 0 {
		t.Fatal("no task is queued behind first; the batch this test is about did not happen")
	}
	return p, src
}

// queued lists the tasks the pool's workers hold behind the ones they run.
func queued(p *running) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, s := range p.slots {
		for _, j := range s.queued {
			ids = append(ids, j.task.ID)
		}
	}
	return ids
}

// A Release that wants more than the buffer holds asks the workers for
// the tasks they hold queued; the worker gives back those it has not
// started, the pool returns them, and each task is reported or returned
// exactly once.
func TestReleaseTakesBackQueuedTasks(t *testing.T) {
	p, src := startBatched(t)
	held := queued(p)
	before := p.Stats().Buffered
	if got, want := p.Release(10), before+len(held); got != want {
		t.Errorf("Release(10) = %d, want the %d buffered and the %d queued", got, before, len(held))
	}
	waitFor(t, 10*time.Second, "the queued tasks to go back", func() bool {
		return len(src.Record().Returned) == before+len(held)
	})
	if got := queued(p); len(got) != 0 {
		t.Errorf("the worker still holds %v queued after giving them back", got)
	}
	waitFor(t, 10*time.Second, "first to be reported", func() bool {
		_, ok := src.ReportFor("first")
		return ok
	})
	p.Stop(true)
	p.finish(t, 20*time.Second)
	rec := src.Record()
	for _, id := range held {
		if _, ok := src.ReportFor(id); ok {
			t.Errorf("%s was given back and reported too", id)
		}
	}
	checkEachFetchedEnded(t, rec)
}

// A worker too old to answer Release keeps its batch (it may have started
// the next task), and then takes one task per fetch, so that what the
// pool holds unstarted stays in the buffer for the next Release.
func TestReleaseWhileOldWorkersHoldBatches(t *testing.T) {
	p, src := startBatched(t)
	p.mu.Lock()
	p.slots[0].releases = false // as a worker whose hello does not offer it
	p.mu.Unlock()
	if before, got := p.Stats().Buffered, p.Release(10); got != before {
		t.Errorf("Release(10) = %d, want the %d buffered", got, before)
	}
	late := tasks("late", 3, "sleep", "30s")
	src.Add(late...)
	p.Wake()
	waitFor(t, 10*time.Second, "a late task running", func() bool {
		st := p.Stats()
		return len(st.PerWorker) == 1 && strings.HasPrefix(st.PerWorker[0].TaskID, "late")
	})
	if st := p.Stats(); st.Buffered != 2 {
		t.Errorf("after a Release that wanted queued tasks, the worker's next fetch left %d buffered, want 2 (it takes one at a time)", st.Buffered)
	}
	if got := p.Release(2); got != 2 {
		t.Errorf("Release(2) of the late tasks = %d, want 2", got)
	}
}

// playWorker connects to slot 0 of a pool of the "idle" helper as its
// worker, as one that answers Release.
func playWorker(t *testing.T, p *running) *workerproto.Conn {
	t.Helper()
	waitFor(t, 20*time.Second, "the slot's process to start", func() bool { return p.Stats().Alive == 1 })
	p.mu.Lock()
	token := p.slots[0].token
	p.mu.Unlock()
	nc, err := net.Dial("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	c := workerproto.NewConn(nc)
	t.Cleanup(func() { c.Close() })
	c.Write(workerproto.Frame{Op: workerproto.OpHello, Hello: &workerproto.Hello{
		Version: workerproto.Version, Token: token, PID: os.Getpid(), Release: true}})
	if f := readFrame(t, c); f.Op != workerproto.OpAck {
		t.Fatalf("answer to hello: %q, want ack", f.Op)
	}
	return c
}

func readFrame(t *testing.T, c *workerproto.Conn) workerproto.Frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := c.Read()
	if err != nil {
		t.Fatalf("read from the pool: %v", err)
	}
	return f
}

// A worker's Released may cross the report of the task before the ones it
// gives back: the pool has by then taken the first of them to run, and
// takes it back all the same; the worker then fetches again without
// breaking the protocol.
func TestReleasedCrossesAReport(t *testing.T) {
	src := newSource(tasks("t", 4, "ok")...)
	p := start(t, config(t, "idle", 1, 32), src)
	c := playWorker(t, p)
	waitFor(t, 10*time.Second, "the tasks buffered", func() bool { return p.Stats().Buffered == 4 })
	c.Write(workerproto.Frame{Op: workerproto.OpFetch, Fetch: &workerproto.Fetch{Max: 3}})
	f := readFrame(t, c)
	if f.Op != workerproto.OpTask || f.Task.Task == nil || len(f.Task.More) != 2 {
		t.Fatalf("answer to a fetch of 3: %+v, want a task and 2 more", f)
	}
	if got := p.Release(3); got != 3 {
		t.Errorf("Release(3) = %d, want 1 buffered and 2 queued", got)
	}
	f = readFrame(t, c)
	if f.Op != workerproto.OpRelease || f.Release == nil {
		t.Fatalf("frame %q, want release", f.Op)
	}
	if want := []string{"t-002", "t-001"}; !slices.Equal(f.Release.TaskIDs, want) {
		t.Errorf("asked to release %v, want the queued %v, last first", f.Release.TaskIDs, want)
	}
	c.Write(workerproto.Frame{Op: workerproto.OpReport, Report: &workerproto.Report{
		TaskReport: api.TaskReport{TaskID: "t-000", Attempt: 1, Outcome: api.OutcomeSucceeded}}})
	c.Write(workerproto.Frame{Op: workerproto.OpReleased, Released: &workerproto.Released{TaskIDs: []string{"t-001", "t-002"}}})
	c.Write(workerproto.Frame{Op: workerproto.OpFetch})
	if f := readFrame(t, c); f.Op != workerproto.OpTask || !f.Task.Done {
		t.Errorf("answer to the next fetch: %+v, want done: every task is reported or returned", f.Task)
	}
	p.finish(t, 20*time.Second)
	rec := src.Record()
	if got, want := slices.Sorted(slices.Values(rec.Returned)), []string{"t-001", "t-002", "t-003"}; !slices.Equal(got, want) {
		t.Errorf("returned %v, want %v", got, want)
	}
	if len(rec.Reports) != 1 || rec.Reports[0].TaskID != "t-000" {
		t.Errorf("reports %+v, want t-000's alone", rec.Reports)
	}
	if st := p.Stats(); st.Dropped != 0 {
		t.Errorf("%d workers dropped, want none", st.Dropped)
	}
}

// A fetch that found nothing backs off, but a worker that goes idle since
// fetches again at once: the server may have held the fetch to the node's
// fair share, and it never holds back what an idle worker needs.
func TestIdleWorkerCutsTheBackoff(t *testing.T) {
	src := newSource(task("long", "sleep", "30s"))
	src.SetOpen(true)
	p := start(t, config(t, "worker", 1, 4), src)
	waitFor(t, 20*time.Second, "the task to run and the empty fetches to back off", func() bool {
		// Both fetchers have fetched 6 times or more: each waits 1.6s or 2s.
		return p.Stats().Busy == 1 && len(src.Record().Maxes) >= 13
	})
	src.Add(task("next", "ok"))
	begin := time.Now()
	p.Cancel("long", 0) // its worker goes idle; nobody calls Wake
	waitFor(t, 20*time.Second, "the next task to be reported", func() bool {
		_, ok := src.ReportFor("next")
		return ok
	})
	if d := time.Since(begin); d > time.Second {
		t.Errorf("the idle worker got its task %v after it went idle, want well under the backoff of 1.6s or more", d)
	}
}

// A fetch that takes the suite's last Ready task is not followed at once
// by another to fill the buffer, which would find nothing while the task
// runs: the next waits for the backoff, or for Wake.
func TestDrainedFetchBacksOff(t *testing.T) {
	src := newSource(task("lone", "sleep", "300ms"))
	src.SetOpen(true)
	start(t, config(t, "worker", 1, 4), src)
	waitFor(t, 20*time.Second, "a second fetch", func() bool { return len(src.Record().At) >= 2 })
	at := src.Record().At
	if gap := at[1].Sub(at[0]); gap < fetchMinWait {
		t.Errorf("the fetch after the one that drained the suite came %v after it, want the backoff of %v or more", gap, fetchMinWait)
	}
}

// A pool whose suite runs as another user: a worker program of the
// suite's own runs as that user and may connect to its socket, which is
// that user's alone; the command worker stays the pool's user and is told
// whom to start tasks as.
func TestRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start workers as another user")
	}
	nobody := runas.User{Name: "nobody", UID: 65534, GID: 65534}
	// The test binary plays the worker: put a copy where nobody may run it.
	bin := filepath.Join(shortTempDir(t), "worker")
	os.Chmod(filepath.Dir(bin), 0o755)
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	tests := []struct {
		name          string
		commandWorker bool
		wantUID       string // the worker process's
		wantSockUID   uint32
		wantEnv       string // in the worker's environment
	}{
		{"worker program of the suite's", false, "65534", 65534, ""},
		{"command worker", true, "0", 0, workerproto.EnvRunAs + "=65534:65534"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, "worker", 1, 0)
			cfg.Command = []string{bin}
			cfg.RunAs, cfg.CommandWorker = &nobody, tc.commandWorker
			os.Chown(cfg.Dir, int(nobody.UID), int(nobody.GID)) // the suite's work dir is its user's
			cfg.SocketDir = shortTempDir(t)
			os.Chmod(cfg.SocketDir, 0o711)
			src := newSource(task("uid", "uid"), task("env", "env"))
			src.SetOpen(true) // the pool, and its socket, outlive the two tasks
			p := start(t, cfg, src)
			waitFor(t, 20*time.Second, "both tasks reported", func() bool { return len(src.Record().Reports) == 2 })
			fi, err := os.Lstat(p.sock)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != tc.wantSockUID || fi.Mode().Perm() != 0o600 || filepath.Dir(p.sock) != cfg.SocketDir {
				t.Errorf("socket %s: uid %d mode %v; want uid %d, mode 0600, in %s", p.sock, st.Uid, fi.Mode().Perm(), tc.wantSockUID, cfg.SocketDir)
			}
			if r, _ := src.ReportFor("uid"); r.Outcome != api.OutcomeSucceeded || r.Result.Stdout != tc.wantUID {
				t.Errorf("worker's uid: %+v, want %s", r, tc.wantUID)
			}
			env, _ := src.ReportFor("env")
			if got := slices.ContainsFunc(strings.Split(env.Result.Stdout, "\n"), func(kv string) bool {
				return strings.HasPrefix(kv, workerproto.EnvRunAs+"=")
			}); got != (tc.wantEnv != "") || (tc.wantEnv != "" && !strings.Contains(env.Result.Stdout, tc.wantEnv)) {
				t.Errorf("worker environment:\n%s\nwant %q there: %v", env.Result.Stdout, tc.wantEnv, tc.wantEnv != "")
			}
		})
	}
}

// TestUnstarted counts the tasks the pool holds that no worker started:
// what the server shows apart from the running ones.
func TestUnstarted(t *testing.T) {
	src := newSource(workerpooltest.Tasks("long", 4, "sleep", "30s")...)
	src.SetOpen(true)
	p := start(t, config(t, "worker", 1, 4), src)
	waitFor(t, 20*time.Second, "one task to run and the rest to wait in the buffer", func() bool {
		st := p.Stats()
		return st.Busy == 1 && st.Buffered == 3
	})
	if got := p.Unstarted(); got != 3 {
		t.Errorf("Unstarted() = %d with one of 4 tasks running, want 3", got)
	}
	p.Cancel("long-000", 0)
	waitFor(t, 20*time.Second, "the next task to start", func() bool { return p.Unstarted() == 2 })
}
