package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/worker"
)

// DispatchConfig sets up the dispatch harness.
type DispatchConfig struct {
	Binary       string // nodemgr binary: server, agent and workers
	Tasks        int    // no-op tasks per in-process case
	CommandTasks int    // `true` tasks per command-worker case
	Workers      int    // workers in the pool
	Prefetches   []int  // prefetch sizes to compare, e.g. 32 and 0
}

// DispatchResult is one case: a worker kind at a prefetch size.
type DispatchResult struct {
	Worker   string `json:"worker"` // in-process | command
	Prefetch int    `json:"prefetch"`
	Tasks    int    `json:"tasks"`
	// FirstResult is the time from making the node eligible to the first
	// stored result: assignment, the pool's start, one task.
	FirstResult time.Duration `json:"first_result"`
	// Elapsed is from the first stored result to the last; PerSecond is
	// the rate of the tasks after the first over it.
	Elapsed   time.Duration `json:"elapsed"`
	PerSecond float64       `json:"tasks_per_second"`
	// Gap between two tasks as an in-process worker sees it: report the
	// last, ask for the next, receive it. Only measured for in-process.
	FetchP50 time.Duration `json:"fetch_p50"`
	FetchP99 time.Duration `json:"fetch_p99"`
	// Agent-side fetch latency: a worker's fetch arriving at the agent to
	// its task written back (served from the buffer when prefetching).
	AgentFetchP50 time.Duration `json:"agent_fetch_p50"`
	AgentFetchP99 time.Duration `json:"agent_fetch_p99"`
	// CPU per task, from the case's start to its workers' exit: the
	// server's, and the agent's with its (reaped) workers'.
	ServerCPUPerTask time.Duration `json:"server_cpu_per_task"`
	AgentCPUPerTask  time.Duration `json:"agent_cpu_per_task"`
	// VsSpawn is, for command workers, the rate against the spawn
	// baseline measured just before and just after the case (their mean),
	// so that the machine's drift between phases does not tilt it.
	VsSpawn float64 `json:"vs_spawn,omitempty"`
}

// SpawnBaseline is the machine's own rate of starting `true`, with as many
// spawners at once as the pool has workers.
type SpawnBaseline struct {
	Spawns    int     `json:"spawns"`
	PerSecond float64 `json:"spawns_per_second"`
	// CPUPerSpawn is the CPU a spawn costs: this process's and the
	// reaped `true`s'.
	CPUPerSpawn time.Duration `json:"cpu_per_spawn"`
}

// latencyFile is where the no-op worker leaves its samples, in its suite dir.
const latencyFile = "fetch-latency-"

// RunDispatch starts a server and one agent as processes and pushes no-op
// tasks through server → agent → workers → stored results, for in-process
// and command workers at each prefetch size. The spawn baseline is
// measured in the same run, around each command case; the baseline
// returned is the mean of those.
func RunDispatch(ctx context.Context, cfg DispatchConfig, progress io.Writer) ([]DispatchResult, SpawnBaseline, error) {
	r, err := startRig(ctx, cfg.Binary, "bench-agent")
	if err != nil {
		return nil, SpawnBaseline{}, err
	}
	defer r.close()

	var results []DispatchResult
	var bases []SpawnBaseline
	baseline := func() SpawnBaseline {
		fmt.Fprintf(progress, "  baseline: spawning `true` %d times, %d at once\n", cfg.CommandTasks, cfg.Workers)
		b := spawnBaseline(cfg.CommandTasks, cfg.Workers)
		bases = append(bases, b)
		return b
	}
	for _, c := range dispatchCases(cfg) {
		kind, n := c.kind, c.tasks
		for _, pf := range cfg.Prefetches {
			var before SpawnBaseline
			if kind == "command" {
				before = baseline()
			}
			fmt.Fprintf(progress, "  %s workers, prefetch %d: %d tasks\n", kind, pf, n)
			res, err := r.dispatchCase(ctx, cfg, kind, pf, n)
			if err != nil {
				return results, SpawnBaseline{}, fmt.Errorf("%s prefetch %d: %w", kind, pf, err)
			}
			if kind == "command" {
				res.VsSpawn = res.PerSecond / meanBaseline(before, baseline()).PerSecond
			}
			results = append(results, res)
		}
	}
	return results, meanBaseline(bases...), nil
}

// dispatchKind is a kind of worker the bench runs, and how many tasks.
type dispatchKind struct {
	kind  string
	tasks int
}

// dispatchCases are the kinds of worker to run: a count of 0 leaves its
// kind out (a rate of 0 tasks is no figure).
func dispatchCases(cfg DispatchConfig) []dispatchKind {
	var out []dispatchKind
	for _, c := range []dispatchKind{{"in-process", cfg.Tasks}, {"command", cfg.CommandTasks}} {
		if c.tasks > 0 {
			out = append(out, c)
		}
	}
	return out
}

// DispatchComparison is one case run on two binaries in the same run.
type DispatchComparison struct {
	Worker   string `json:"worker"`
	Prefetch int    `json:"prefetch"`
	Tasks    int    `json:"tasks"`
	// This and Against are the medians of the rounds, for the binary
	// under test and the one compared against.
	This    DispatchResult `json:"this"`
	Against DispatchResult `json:"against"`
	// Ratio is the median of the rounds' rate ratios, this / against.
	Ratio float64 `json:"ratio"`
}

// CompareDispatch runs every case of RunDispatch on cfg.Binary and on
// against, each with a server and an agent of its own started side by side,
// rounds times, alternating which goes first, so that the machine's drift
// falls on both. No spawn baseline: the binaries are each other's.
func CompareDispatch(ctx context.Context, cfg DispatchConfig, against string, rounds int, progress io.Writer) ([]DispatchComparison, error) {
	this, err := startRig(ctx, cfg.Binary, "bench-this")
	if err != nil {
		return nil, err
	}
	defer this.close()
	other, err := startRig(ctx, against, "bench-against")
	if err != nil {
		return nil, err
	}
	defer other.close()
	var out []DispatchComparison
	for _, c := range dispatchCases(cfg) {
		kind, n := c.kind, c.tasks
		for _, pf := range cfg.Prefetches {
			var mine, theirs []DispatchResult
			var ratios []float64
			for round := range max(1, rounds) {
				rigs := []*rig{this, other}
				if round%2 == 1 {
					rigs = []*rig{other, this}
				}
				var got [2]DispatchResult
				for _, r := range rigs {
					fmt.Fprintf(progress, "  round %d, %s: %s workers, prefetch %d: %d tasks\n", round+1, r.binary, kind, pf, n)
					res, err := r.dispatchCase(ctx, cfg, kind, pf, n)
					if err != nil {
						return out, fmt.Errorf("%s: %s prefetch %d: %w", r.binary, kind, pf, err)
					}
					if r == this {
						got[0] = res
					} else {
						got[1] = res
					}
				}
				mine, theirs = append(mine, got[0]), append(theirs, got[1])
				ratios = append(ratios, got[0].PerSecond/got[1].PerSecond)
			}
			out = append(out, DispatchComparison{Worker: kind, Prefetch: pf, Tasks: n,
				This: medianResult(mine), Against: medianResult(theirs), Ratio: median(ratios)})
		}
	}
	return out, nil
}

// medianResult is the round with the median rate.
func medianResult(rs []DispatchResult) DispatchResult {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b DispatchResult) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	return rs[len(rs)/2]
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// rig is a server (or replicas on one database) and one agent, as
// processes of one binary (the agent's may be another: startRigWith).
type rig struct {
	binary      string         // the servers'
	agentBinary string         // the agent's: binary, unless startRigWith says
	srv         *benchServer   // the one the agent connects to
	srvs        []*benchServer // all of them
	c           *client.Client // tasks go in through the last server
	agent       *exec.Cmd
	agentDir    string
	node        api.Node
}

// startRig starts a server and an agent called name, and waits for the
// agent to connect.
func startRig(ctx context.Context, binary, name string) (*rig, error) {
	return startRigOn(ctx, AgentsConfig{Binary: binary}, name)
}

// startRigOn starts the servers store says (SQLite, or replicas on a
// fresh PostgreSQL database) and an agent on the first; with replicas,
// tasks are submitted through the last, so that its wake-ups cross.
func startRigOn(ctx context.Context, store AgentsConfig, name string) (*rig, error) {
	return startRigWith(ctx, store, store.Binary, name)
}

// startRigWith is startRigOn with the agent run from agentBinary.
func startRigWith(ctx context.Context, store AgentsConfig, agentBinary, name string) (*rig, error) {
	srvs, err := startServers(ctx, store)
	if err != nil {
		return nil, err
	}
	srv, last := srvs[0], srvs[len(srvs)-1]
	r := &rig{binary: store.Binary, agentBinary: agentBinary, srv: srv, srvs: srvs, c: client.New(last.addr, last.token)}
	jt, err := r.c.CreateJoinToken(ctx, api.CreateTokenRequest{Name: "bench"})
	if err != nil {
		stopServers(srvs)
		return nil, err
	}
	if r.agentDir, err = os.MkdirTemp("", "nodemgr-bench-agent-"); err != nil {
		stopServers(srvs)
		return nil, err
	}
	r.agent = exec.Command(agentBinary, "agent", "--server", "http://"+srv.addr, "--data-dir", r.agentDir,
		"--name", name, "--log-level", "warn")
	// The join token in the environment: on the command line other users
	// could read it, and the agent would warn.
	r.agent.Env = append(os.Environ(), "NODEMGR_JOIN_TOKEN="+jt.Secret)
	r.agent.Stderr = os.Stderr
	if err := r.agent.Start(); err != nil {
		stopServers(srvs)
		os.RemoveAll(r.agentDir)
		return nil, fmt.Errorf("start agent: %w", err)
	}
	if r.node, err = waitNode(ctx, r.c, name); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *rig) close() {
	r.agent.Process.Signal(syscall.SIGTERM)
	r.agent.Wait()
	stopServers(r.srvs)
	os.RemoveAll(r.agentDir)
}

func (r *rig) dispatchCase(ctx context.Context, cfg DispatchConfig, kind string, prefetch, n int) (DispatchResult, error) {
	cfg.Binary = r.binary // the in-process workers are the rig's own
	return runDispatchCase(ctx, r.c, cfg, r.node, procs{r.srv.pid(), r.agent.Process.Pid}, r.agentDir, kind, prefetch, n)
}

// meanBaseline is the mean of baselines of the same size.
func meanBaseline(bs ...SpawnBaseline) SpawnBaseline {
	var m SpawnBaseline
	if len(bs) == 0 {
		return m
	}
	var cpu time.Duration
	for _, b := range bs {
		m.Spawns += b.Spawns
		m.PerSecond += b.PerSecond / float64(len(bs))
		cpu += b.CPUPerSpawn
	}
	m.CPUPerSpawn = cpu / time.Duration(len(bs))
	return m
}

// procs are the pids of the server and the agent under test.
type procs struct{ server, agent int }

func runDispatchCase(ctx context.Context, c *client.Client, cfg DispatchConfig, node api.Node, pids procs, agentDir, kind string, prefetch, n int) (DispatchResult, error) {
	tag := fmt.Sprintf("bench-%s-%d-%d", strings.ReplaceAll(kind, "-", ""), prefetch, time.Now().UnixNano()%1e6)
	ws := api.WorkerSchedule{WorkerCount: cfg.Workers, TaskPrefetchCount: &prefetch}
	argv := []string{"true"}
	if kind == "in-process" {
		ws.WorkerCommand = []string{cfg.Binary, "bench", "noop-worker"}
		argv = []string{"noop"}
	}
	su, err := c.CreateSuite(ctx, api.SuiteSpec{Name: tag, Tags: []string{tag}, WorkerSchedule: ws})
	if err != nil {
		return DispatchResult{}, err
	}
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = api.TaskSpec{Argv: argv}
	}
	for i := 0; i < n; i += 10000 {
		if _, err := c.SubmitTasks(ctx, su.ID, tasks[i:min(i+10000, n)]); err != nil {
			return DispatchResult{}, err
		}
	}
	if _, err := c.CloseSuite(ctx, su.ID); err != nil {
		return DispatchResult{}, err
	}
	// Everything is queued; tagging the node makes it eligible and wakes it.
	serverCPU, agentCPU := procCPU(pids.server), procTreeCPU(pids.agent)
	start := time.Now()
	if _, err := c.PatchNode(ctx, node.ID, api.NodePatch{AddTags: []string{tag}}); err != nil {
		return DispatchResult{}, err
	}
	for {
		s, err := c.Suite(ctx, su.ID)
		if err != nil {
			return DispatchResult{}, err
		}
		if isState(s.State, api.SuiteComplete) {
			if s.Counts.Finished != n {
				return DispatchResult{}, fmt.Errorf("suite completed with %+v, want %d finished", s.Counts, n)
			}
			break
		}
		if time.Since(start) > 10*time.Minute {
			return DispatchResult{}, fmt.Errorf("suite not complete after 10 minutes: %+v", s.Counts)
		}
		time.Sleep(100 * time.Millisecond) // polling costs the server little this way
	}
	serverCPU = procCPU(pids.server) - serverCPU // before finishSpan makes it list every task
	// The rate is the steady flow, from the first stored result to the
	// last (not our last poll); the start of the suite on the node (its
	// assignment, the workers' start) is a latency of its own.
	first, last, err := finishSpan(ctx, c, su.ID, n)
	if err != nil {
		return DispatchResult{}, err
	}
	elapsed := last.Sub(first)
	c.PatchNode(ctx, node.ID, api.NodePatch{RemoveTags: []string{tag}})
	r := DispatchResult{Worker: kind, Prefetch: prefetch, Tasks: n, FirstResult: first.Sub(start), Elapsed: elapsed,
		PerSecond: float64(n-1) / elapsed.Seconds()}
	dir := filepath.Join(agentDir, "suites", su.ID)
	if kind == "in-process" {
		// The workers write their samples when the pool stops them.
		r.FetchP50, r.FetchP99 = readLatencies(dir)
	}
	r.AgentFetchP50, r.AgentFetchP99 = readPoolStats(filepath.Join(dir, "pool-stats.json"))
	// The pool wrote its stats after its workers exited, so the agent has
	// reaped them and their CPU is in its children's count.
	perTask := func(secs float64) time.Duration { return time.Duration(secs / float64(n) * float64(time.Second)) }
	r.ServerCPUPerTask = perTask(serverCPU)
	r.AgentCPUPerTask = perTask(procTreeCPU(pids.agent) - agentCPU)
	return r, nil
}

func waitNode(ctx context.Context, c *client.Client, name string) (api.Node, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n, err := c.Node(ctx, name); err == nil && n.Connected {
			return n, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return api.Node{}, fmt.Errorf("agent %s did not connect", name)
}

// readLatencies merges the samples the no-op workers left behind, waiting
// briefly for them to be written.
func readLatencies(dir string) (p50, p99 time.Duration) {
	var samples []time.Duration
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		files, _ := filepath.Glob(filepath.Join(dir, latencyFile+"*"))
		if len(files) == 0 {
			continue
		}
		samples = samples[:0]
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, line := range strings.Fields(string(b)) {
				ns, err := strconv.ParseInt(line, 10, 64)
				if err == nil {
					samples = append(samples, time.Duration(ns))
				}
			}
		}
		break
	}
	if len(samples) == 0 {
		return 0, 0
	}
	slices.Sort(samples)
	return samples[len(samples)/2], samples[len(samples)*99/100]
}

// readPoolStats reads the agent's fetch latency from the stats it leaves
// in the suite dir when the pool stops.
func readPoolStats(path string) (p50, p99 time.Duration) {
	var st struct {
		FetchLatency struct{ P50, P99 time.Duration }
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &st) == nil {
			return st.FetchLatency.P50, st.FetchLatency.P99
		}
	}
	return 0, 0
}

// spawnBaseline times n runs of `true` with k spawners at once.
func spawnBaseline(n, k int) SpawnBaseline {
	cpu0 := procTreeCPU(os.Getpid())
	start := time.Now()
	var wg sync.WaitGroup
	per := n / k
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				exec.Command("true").Run()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := procTreeCPU(os.Getpid()) - cpu0
	return SpawnBaseline{Spawns: per * k, PerSecond: float64(per*k) / elapsed.Seconds(),
		CPUPerSpawn: time.Duration(cpu / float64(per*k) * float64(time.Second))}
}

// NoopWorker is a worker whose tasks do nothing. It records the gap
// between finishing one task and starting the next — report, fetch,
// receive — and writes the samples to its working directory (the suite's
// dir) when it stops.
func NoopWorker(ctx context.Context) error {
	var samples []int64
	last := time.Time{}
	err := worker.Run(ctx, func(ctx context.Context, t worker.Task) worker.Result {
		now := time.Now()
		if !last.IsZero() {
			samples = append(samples, int64(now.Sub(last)))
		}
		last = time.Now()
		return worker.Result{}
	})
	var b strings.Builder
	for _, s := range samples {
		b.WriteString(strconv.FormatInt(s, 10))
		b.WriteByte('\n')
	}
	os.WriteFile(latencyFile+os.Getenv(worker.EnvWorkerID), []byte(b.String()), 0o644)
	return err
}

// finishSpan is when the suite's first and last results were stored.
func finishSpan(ctx context.Context, c *client.Client, suiteID string, want int) (first, last time.Time, err error) {
	p := client.Page{Limit: client.MaxPageLimit}
	seen := 0
	for {
		page, err := c.TasksPage(ctx, suiteID, "", p)
		if err != nil {
			return first, last, err
		}
		for _, t := range page.Tasks {
			if t.Result == nil {
				continue
			}
			seen++
			if at := t.Result.FinishedAt; first.IsZero() || at.Before(first) {
				first = at
			}
			if at := t.Result.FinishedAt; at.After(last) {
				last = at
			}
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	if seen != want {
		// A span over part of the tasks gives a rate that is false, not
		// just rough (a server whose API pages otherwise, say).
		return first, last, fmt.Errorf("suite %s: the task list showed %d results, want %d: the rate would be false; is the server's API older than this bench's (compare binaries that page their task lists)?", suiteID, seen, want)
	}
	return first, last, nil
}
