//go:build !agentonly && !clientonly

package cli

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/internal/bench"
)

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load harnesses that measure nodemgr on this machine"}
	cmd.AddCommand(benchAgentsCmd(e), benchDispatchCmd(e), benchLatencyCmd(e), benchProvisionCmd(e), benchPoolCmd(e), benchBuildCmd(e), benchRSSCmd(e), &cobra.Command{
		Use: "noop-worker", Hidden: true, Short: "A worker whose tasks do nothing (used by bench dispatch)",
		RunE: func(cmd *cobra.Command, _ []string) error { return bench.NoopWorker(cmd.Context()) },
	}, &cobra.Command{
		Use: "sim-agents", Hidden: true, Short: "Run a share of bench agents' simulated agents, driven over stdin and stdout",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return bench.RunSimAgents(cmd.Context(), os.Stdin, os.Stdout)
		},
	})
	return cmd
}

func benchDispatchCmd(e *env) *cobra.Command {
	cfg := bench.DispatchConfig{Prefetches: []int{32, 0}}
	var asJSON bool
	var against, db string
	var rounds, replicas int
	cmd := &cobra.Command{
		Use:   "dispatch",
		Short: "Push no-op tasks through server → agent → workers and report the rate",
		Long: `Start a server and an agent as processes, queue tasks, and time how fast
they flow server → agent → workers → results stored: the rate from the first
stored result to the last, and apart from it the time to the first result
(assignment, the pool's start, one task). Four cases: in-process
workers (a Go program on the worker package whose tasks do nothing) and
command workers (nodemgr worker running ` + "`true`" + `), each with prefetch 32 and
0. Agent fetch is the time from a worker's fetch reaching the agent to its
task written back (from the buffer when prefetching); the worker gap is what
an in-process worker waits between two tasks, report and fetch included. As
a baseline, the same run times this machine spawning ` + "`true`" + ` directly, just
before and just after each command case; a command case is compared with the
mean of the two, so that the machine's drift does not tilt the ratio.

With --against BINARY, another nodemgr binary (the build before a change)
gets a server and an agent of its own beside this one's, and every case runs
on both, --rounds times, alternating which goes first; the table gives each
one's median rate and the median of the rounds' ratios.

With --db postgres://... (a user that may CREATE DATABASE), the in-process
cases run instead on SQLite, on PostgreSQL with one server, and with
--replicas servers (the agent on the first, tasks submitted through the
last), side by side for --rounds rounds; the table gives each store's median
rate and the median of its ratios to SQLite's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Tasks < 0 || cfg.CommandTasks < 0 || cfg.Tasks+cfg.CommandTasks == 0 {
				return usagef("--tasks and --command-tasks must not be negative, and one must be above 0")
			}
			if against != "" {
				return compareDispatch(cmd, e, cfg, against, rounds, asJSON)
			}
			if db != "" {
				return compareStores(cmd, e, cfg, db, replicas, rounds, asJSON)
			}
			results, base, err := bench.RunDispatch(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, map[string]any{"cases": results, "spawn_baseline": base})
			}
			t := newTable(e.stdout, "WORKER", "PREFETCH", "TASKS", "FIRST RESULT", "ELAPSED", "TASKS/S", "VS SPAWN BASELINE",
				"AGENT FETCH P50", "AGENT FETCH P99", "WORKER GAP P50", "WORKER GAP P99", "SERVER CPU/TASK", "AGENT+WORKERS CPU/TASK")
			d := func(x time.Duration) string { return x.Round(100 * time.Nanosecond).String() }
			for _, r := range results {
				ratio, p50, p99 := "-", "-", "-"
				if r.Worker == "command" {
					ratio = fmt.Sprintf("%.0f%%", 100*r.VsSpawn)
				} else {
					p50, p99 = d(r.FetchP50), d(r.FetchP99)
				}
				t.row(r.Worker, strconv.Itoa(r.Prefetch), strconv.Itoa(r.Tasks), r.FirstResult.Round(time.Millisecond).String(), r.Elapsed.Round(time.Millisecond).String(),
					fmt.Sprintf("%.0f", r.PerSecond), ratio, d(r.AgentFetchP50), d(r.AgentFetchP99), p50, p99,
					d(r.ServerCPUPerTask), d(r.AgentCPUPerTask))
			}
			if base.Spawns > 0 {
				t.row("spawn `true`", "-", strconv.Itoa(base.Spawns), "-", "-", fmt.Sprintf("%.0f", base.PerSecond), "100%", "-", "-", "-", "-", "-", d(base.CPUPerSpawn))
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVar(&cfg.Tasks, "tasks", 100000, "no-op tasks per in-process case (0: no in-process case)")
	cmd.Flags().IntVar(&cfg.CommandTasks, "command-tasks", 5000, "tasks per command-worker case (0: no command case)")
	cmd.Flags().IntVar(&cfg.Workers, "workers", 2, "workers in the pool")
	cmd.Flags().IntSliceVar(&cfg.Prefetches, "prefetch", []int{32, 0}, "prefetch sizes to compare")
	cmd.Flags().StringVar(&against, "against", "", "another nodemgr binary to run every case on too, interleaved")
	cmd.Flags().IntVar(&rounds, "rounds", 3, "with --against or --db: rounds of each case on each binary or store")
	cmd.Flags().StringVar(&db, "db", "", "compare stores instead: in-process cases on SQLite and on this PostgreSQL server (postgres://USER@HOST/DB; a fresh database per rig), interleaved")
	cmd.Flags().IntVar(&replicas, "replicas", 3, "with --db: also PostgreSQL with this many servers (the agent on the first, tasks submitted through the last)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func compareStores(cmd *cobra.Command, e *env, cfg bench.DispatchConfig, db string, replicas, rounds int, asJSON bool) error {
	results, err := bench.CompareStores(cmd.Context(), cfg, db, replicas, rounds, e.stderr)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, map[string]any{"cases": results})
	}
	t := newTable(e.stdout, "STORE", "PREFETCH", "TASKS", "TASKS/S", "VS SQLITE", "SERVER CPU/TASK", "WORKER GAP P50", "WORKER GAP P99")
	d := func(x time.Duration) string { return x.Round(100 * time.Nanosecond).String() }
	for _, r := range results {
		t.row(r.Store, strconv.Itoa(r.Prefetch), strconv.Itoa(r.Result.Tasks), fmt.Sprintf("%.0f", r.Result.PerSecond),
			fmt.Sprintf("%.2f", r.VsSQLite), d(r.Result.ServerCPUPerTask), d(r.Result.FetchP50), d(r.Result.FetchP99))
	}
	return t.flush()
}

func compareDispatch(cmd *cobra.Command, e *env, cfg bench.DispatchConfig, against string, rounds int, asJSON bool) error {
	results, err := bench.CompareDispatch(cmd.Context(), cfg, against, rounds, e.stderr)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(e.stdout, map[string]any{"cases": results})
	}
	t := newTable(e.stdout, "WORKER", "PREFETCH", "TASKS", "TASKS/S", "AGAINST TASKS/S", "RATIO",
		"SERVER CPU/TASK", "AGAINST SERVER CPU/TASK", "AGENT+WORKERS CPU/TASK", "AGAINST AGENT+WORKERS CPU/TASK")
	d := func(x time.Duration) string { return x.Round(100 * time.Nanosecond).String() }
	for _, r := range results {
		t.row(r.Worker, strconv.Itoa(r.Prefetch), strconv.Itoa(r.Tasks), fmt.Sprintf("%.0f", r.This.PerSecond),
			fmt.Sprintf("%.0f", r.Against.PerSecond), fmt.Sprintf("%.2f", r.Ratio),
			d(r.This.ServerCPUPerTask), d(r.Against.ServerCPUPerTask), d(r.This.AgentCPUPerTask), d(r.Against.AgentCPUPerTask))
	}
	return t.flush()
}

func benchLatencyCmd(e *env) *cobra.Command {
	var cfg bench.LatencyConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Time one task at a time through an idle pool, submit to stored result",
		Long: `Start a server and an agent as processes, give the agent an open suite of one
command worker with the default prefetch, and submit one ` + "`true`" + ` task at a
time through the API, --gap apart so the pool is idle each time. STORED is
from sending the submit to the result stored (the server stamps it as it
applies the agent's report), SEEN to a poll every 2 ms finding it.

With --against BINARY, another nodemgr binary (the build before a change)
gets a server and an agent of its own beside this one's, and the samples
alternate between the two.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			results, err := bench.RunLatency(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, map[string]any{"results": results})
			}
			t := newTable(e.stdout, "BINARY", "SAMPLES", "STORED P50", "STORED P90", "STORED P99", "SEEN P50", "SEEN P99")
			d := func(x time.Duration) string { return x.Round(10 * time.Microsecond).String() }
			for _, r := range results {
				t.row(r.Binary, strconv.Itoa(r.Samples), d(r.P50), d(r.P90), d(r.P99), d(r.SeenP50), d(r.SeenP99))
			}
			if len(results) == 2 {
				ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }
				t.row("ratio", "-", ratio(results[0].P50, results[1].P50), ratio(results[0].P90, results[1].P90),
					ratio(results[0].P99, results[1].P99), ratio(results[0].SeenP50, results[1].SeenP50), ratio(results[0].SeenP99, results[1].SeenP99))
			}
			return t.flush()
		},
	}
	cmd.Flags().IntVar(&cfg.Samples, "samples", 100, "tasks, one at a time")
	cmd.Flags().DurationVar(&cfg.Gap, "gap", 200*time.Millisecond, "idle time before each task")
	cmd.Flags().StringVar(&cfg.Against, "against", "", "another nodemgr binary to measure in the same run, samples alternating")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func benchAgentsCmd(e *env) *cobra.Command {
	var counts string
	var cfg bench.AgentsConfig
	var asJSON bool
	var baseline int
	var noSQLite bool
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Simulate many agents against a real server and report heartbeat capacity",
		Long: `Start a nodemgr server process and connect simulated agents to it over
loopback with the real protocol (register, WebSocket, hello, heartbeats). For
each count in --agents, a fresh server runs for --measure; the report gives
heartbeats handled per second, p50/p99 heartbeat latency, the server's RSS and
CPU, and any node wrongly declared offline. A small baseline run comes first,
and latencies are also given as ratios to it, since this machine is noisy.

The agents are idle as real ones are: each also asks for a suite every
idle_poll the server's welcome gives (5s from servers that give none), and
when the server wakes it; IDLE ASKS counts those calls. --open-suites adds
suites with work that no simulated agent may run, which every ask looks at.

The server's offline threshold is 3 heartbeats, stricter than the default.

With --db postgres://... (a user that may CREATE DATABASE), every count also
runs on PostgreSQL, right after its SQLite run: --replicas servers on a fresh
database, the agents spread over them in turn; RSS is the largest replica's,
CPU the replicas' together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := parseCounts(counts)
			if err != nil {
				return err
			}
			if baseline > 0 {
				ns = append([]int{baseline}, ns...)
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			var results []bench.AgentsResult
			for i, n := range ns {
				var stores []bench.AgentsConfig
				if !noSQLite || i == 0 && baseline > 0 {
					sq := cfg
					sq.DB = ""
					stores = append(stores, sq)
				}
				if cfg.DB != "" && (i > 0 || baseline == 0) {
					stores = append(stores, cfg)
				}
				for _, c := range stores {
					c.Agents = n
					fmt.Fprintf(e.stderr, "%d agents on %s, heartbeat %s, measuring %s\n", n, storeName(c), c.Heartbeat, c.Measure)
					r, err := bench.RunAgents(cmd.Context(), c, e.stderr)
					if err != nil {
						return fmt.Errorf("bench with %d agents on %s: %w", n, storeName(c), err)
					}
					results = append(results, r)
				}
			}
			if asJSON {
				return printJSON(e.stdout, map[string]any{"results": results})
			}
			printAgentsBench(e, results, baseline > 0)
			return nil
		},
	}
	cmd.Flags().StringVar(&counts, "agents", "1000,5000,10000", "comma-separated agent counts to try, each on a fresh server")
	cmd.Flags().IntVar(&baseline, "baseline", 100, "agents in the baseline run (0: none)")
	cmd.Flags().DurationVar(&cfg.Heartbeat, "heartbeat", 5*time.Second, "heartbeat interval")
	cmd.Flags().DurationVar(&cfg.Measure, "measure", 30*time.Second, "measured window per count")
	cmd.Flags().IntVar(&cfg.Connect, "connect-concurrency", 64, "agents connecting at once")
	cmd.Flags().StringVar(&cfg.DB, "db", "", "also run each count on this PostgreSQL server (postgres://USER@HOST/DB; a fresh database per run)")
	cmd.Flags().IntVar(&cfg.Replicas, "replicas", 1, "with --db: servers sharing the database")
	cmd.Flags().IntVar(&cfg.OpenSuites, "open-suites", 0, "open suites with Ready tasks that no simulated agent may run")
	cmd.Flags().DurationVar(&cfg.IdlePoll, "idle-poll", 0, "the server's --idle-poll (0: its default)")
	cmd.Flags().BoolVar(&noSQLite, "no-sqlite", false, "with --db: skip the SQLite run of each count (one server may not hold that many sockets)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func parseCounts(s string) ([]int, error) {
	var ns []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, usagef("--agents: %q is not a positive count", p)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// storeName says where a run keeps its state.
func storeName(c bench.AgentsConfig) string {
	if c.DB == "" {
		return "sqlite"
	}
	return fmt.Sprintf("postgres×%d", max(c.Replicas, 1))
}

func printAgentsBench(e *env, rs []bench.AgentsResult, hasBaseline bool) {
	t := newTable(e.stdout, "STORE", "AGENTS", "CONNECTED", "CONNECT", "HB/S", "EXPECTED", "P50", "P99", "P50×BASE", "P99×BASE",
		"SERVER RSS", "SERVER CPU", "IDLE ASKS/S", "FALSE OFFLINE", "HOLDS")
	base := rs[0]
	best := 0
	for _, r := range rs {
		ratio := func(a, b time.Duration) string {
			if !hasBaseline || b == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", float64(a)/float64(b))
		}
		store := r.Store
		if r.Store == "postgres" {
			store = fmt.Sprintf("postgres×%d", r.Replicas)
		}
		t.row(store, strconv.Itoa(r.Agents), strconv.Itoa(r.Connected), r.ConnectTime.Round(time.Millisecond).String(),
			fmt.Sprintf("%.0f", r.PerSecond), fmt.Sprintf("%.0f", r.Expected),
			r.P50.Round(time.Microsecond).String(), r.P99.Round(time.Microsecond).String(),
			ratio(r.P50, base.P50), ratio(r.P99, base.P99),
			bytesIEC(r.ServerRSS), fmt.Sprintf("%.0f%%", 100*r.ServerCPUSecs/r.MeasureSeconds),
			fmt.Sprintf("%.1f", float64(r.IdleAsks)/r.MeasureSeconds), strconv.Itoa(r.FalseOffline), strconv.FormatBool(r.Holds()))
		if r.Holds() && r.Agents > best {
			best = r.Agents
		}
	}
	t.flush()
	fmt.Fprintf(e.stdout, "\nlargest agent count with every agent connected, no failed heartbeat and no false offline: %d\n", best)
	if len(rs) > 0 {
		fmt.Fprintf(e.stdout, "idle agents ask for a suite every %s (the server's idle_poll) and when woken; %d open suites none may run\n", rs[0].IdlePoll, rs[0].OpenSuites)
	}
}

func benchProvisionCmd(e *env) *cobra.Command {
	cfg := bench.ProvisionConfig{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "provision",
		Short: "Time provisioning a docker machine and running true in it, against docker run --rm",
		Long: `Start a server process and, round by round, provision a docker machine
through it, run ` + "`true`" + ` in it with nodemgr exec, and destroy it; interleaved
with ` + "`docker run --rm IMAGE true`" + ` (create, start, wait, remove) through the same
engine. Then provision --parallel machines in one request, against creating and
starting as many containers at once. The image must be on the engine already.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			r, err := bench.RunProvision(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, r)
			}
			return printRatios(e, "NODEMGR", "DOCKER RUN --RM", []ratioRow{
				{fmt.Sprintf("p50 of %d rounds", r.Runs), r.NodemgrP50, r.EngineP50},
				{fmt.Sprintf("p90 of %d rounds", r.Runs), r.NodemgrP90, r.EngineP90},
				{fmt.Sprintf("%d at once, until running", r.Parallel), r.NodemgrBatch, r.EngineBatch},
			})
		},
	}
	cmd.Flags().StringVar(&cfg.Image, "image", "nodemgr-test/busybox:latest", "image on the engine")
	cmd.Flags().IntVar(&cfg.Runs, "runs", 20, "rounds per side")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", 20, "machines provisioned at once")
	cmd.Flags().StringVar(&cfg.DockerHost, "docker-host", "", "Docker engine (default $DOCKER_HOST or the local socket)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func benchPoolCmd(e *env) *cobra.Command {
	cfg := bench.PoolConfig{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Time a pool's cold path: suite create to a task's result on a machine made for it",
		Long: `Start a server process with a docker pool at 0 machines and, round by
round, create a suite the pool serves, submit one task and wait for its
result: the machine is made, the agent delivered and registered, the task
run. Interleaved with the same steps by hand: docker run of the same image,
the agent binary copied in and started with a join token, until its node is
online. Each round starts with no machine. The image must be on the engine,
and the agent binary static (CGO_ENABLED=0 go build).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			r, err := bench.RunPool(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, r)
			}
			return printRatios(e, "POOL COLD PATH", "BY HAND", []ratioRow{
				{fmt.Sprintf("p50 of %d rounds", r.Runs), r.ColdP50, r.ByHandP50},
				{fmt.Sprintf("p90 of %d rounds", r.Runs), r.ColdP90, r.ByHandP90},
			})
		},
	}
	cmd.Flags().StringVar(&cfg.Image, "image", "nodemgr-test/busybox:latest", "image on the engine")
	cmd.Flags().StringVar(&cfg.AgentBinary, "agent-binary", "", "static nodemgr binary to deliver (default this one)")
	cmd.Flags().IntVar(&cfg.Runs, "runs", 10, "rounds per side")
	cmd.Flags().StringVar(&cfg.DockerHost, "docker-host", "", "Docker engine (default $DOCKER_HOST or the local socket)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// ratioRow is a time of nodemgr's beside its baseline's.
type ratioRow struct {
	what         string
	ours, theirs time.Duration
}

// printRatios prints times beside their baselines and the ratio of each.
func printRatios(e *env, ours, theirs string, rows []ratioRow) error {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t := newTable(e.stdout, "WHAT", ours, theirs, "RATIO")
	for _, r := range rows {
		t.row(r.what, ms(r.ours), ms(r.theirs), fmt.Sprintf("%.2f", float64(r.ours)/float64(r.theirs)))
	}
	return t.flush()
}

func benchBuildCmd(e *env) *cobra.Command {
	cfg := bench.BuildConfig{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build a C project through nodemgr on two local agents against make -j2, round by round",
		Long: `Generate a C project (--units compile units, main.c among them, each about
150 ms of CPU at -O2, one header included by all), or copy --project DIR (a
Makefile whose default target compiles *.c to *.o and links one program).
Start a server and --agents agents as processes on this machine, each with
the default worker schedule (one worker per CPU). Each agent is pinned
(taskset) to its share of the machine's CPUs, so that --agents 2 on 2 CPUs
are two machines of one CPU, which together have make -j2's CPUs;
--oversubscribe lets each see them all. Then, round by round:
make -j2 from no objects, timed; and the same build through nodemgr, timed
from the first upload to the last file fetched: the sources and headers
uploaded to the blob store, a suite of one compile task per object (its
source and the headers as inputs, the object as output, exit code 1 final)
and a link task after them all taking their objects, the suite waited for,
every output fetched. The compile and link command lines are make's own
(from make -n -B). The fetched program must print what make's does.

Each round ends every source and header with a comment naming the round,
so every round uploads all of them again: the blob store keeps what it has
seen, and a round on unchanged files would upload nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Rounds < 1 || cfg.Agents < 1 || cfg.Jobs < 1 {
				return usagef("--rounds, --agents and --jobs must be at least 1")
			}
			r, err := bench.RunBuild(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, r)
			}
			return printBuildBench(e, r)
		},
	}
	cmd.Flags().IntVar(&cfg.Units, "units", 34, "compile units of the generated project, main.c included")
	cmd.Flags().StringVar(&cfg.Project, "project", "", "build this project instead of a generated one")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", 5, "rounds, each make then nodemgr")
	cmd.Flags().IntVar(&cfg.Agents, "agents", 2, "agents on this machine")
	cmd.Flags().IntVar(&cfg.Jobs, "jobs", 2, "make -j")
	cmd.Flags().BoolVar(&cfg.Cache, "cache", false, "suites use the action cache, and each round builds the same sources again, as from a clean tree (every task a hit)")
	cmd.Flags().BoolVar(&cfg.Oversubscribe, "oversubscribe", false, "let every agent see all CPUs (N agents then run N workers per CPU) instead of pinning each to its share")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printBuildBench(e *env, r bench.BuildResult) error {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t := newTable(e.stdout, "ROUND", "LOAD", fmt.Sprintf("MAKE -J%d", r.Jobs), "NODEMGR", "RATIO", "UPLOAD", "SUBMIT", "COMPILE", "LINK", "SEEN", "FETCH",
		"UPLOADED", "COMPILES PER AGENT", "MAKE CPU", "AGENTS+TASKS CPU", "SERVER CPU", "CLIENT CPU", "SAME .O AS MAKE")
	row := func(round, load string, x bench.BuildRound, uploaded, per, same string) {
		t.row(round, load, ms(x.Make), ms(x.Nodemgr), fmt.Sprintf("%.2f", x.Ratio), ms(x.Upload), ms(x.Submit), ms(x.Compile),
			ms(x.Link), ms(x.Seen), ms(x.Fetch), uploaded, per,
			ms(x.MakeCPU), ms(x.AgentCPU), ms(x.ServerCPU), ms(x.ClientCPU), same)
	}
	for _, x := range r.Rounds {
		per := make([]string, len(x.PerAgent))
		for i, n := range x.PerAgent {
			per[i] = strconv.Itoa(n)
		}
		row(strconv.Itoa(x.Round), fmt.Sprintf("%.1f", x.Load), x, fmt.Sprintf("%d/%d files, %s", x.Uploaded, x.Inputs, sizeString(x.UploadedBytes)),
			strings.Join(per, "/"), fmt.Sprintf("%d/%d", x.SameObjects, r.CompileTasks))
	}
	row("median", "-", r.Median, "-", "-", "-")
	if err := t.flush(); err != nil {
		return err
	}
	verdict := "within"
	if r.Median.Ratio > 1.10 {
		verdict = "above"
	}
	fmt.Fprintf(e.stdout, "\n%s: %d compile tasks and a link; %d agents on this machine, default worker schedule\n", r.Project, r.CompileTasks, r.Agents)
	if r.AgentCPUs != nil {
		fmt.Fprintf(e.stdout, "each agent pinned to its share of the CPUs (taskset -c): %s\n", strings.Join(r.AgentCPUs, " / "))
	} else if r.Agents > 1 {
		fmt.Fprintf(e.stdout, "every agent sees all %d CPUs: %d agents run %d workers per CPU\n", runtime.NumCPU(), r.Agents, r.Agents)
	}
	fmt.Fprintln(e.stdout, "every round ends each source and header with a comment naming the round, so every round uploads all of them")
	fmt.Fprintf(e.stdout, "LOAD is the 1-minute load average as the round began, on %d CPUs\n", runtime.NumCPU())
	fmt.Fprintf(e.stdout, "median ratio nodemgr / make -j%d: %.2f (%s the 1.10 target)\n", r.Jobs, r.Median.Ratio, verdict)
	if len(r.Rounds) > 0 && r.Rounds[0].Rebuild > 0 {
		fmt.Fprintln(e.stdout, "\nagain from the action cache, as from a clean tree:")
		c := newTable(e.stdout, "ROUND", fmt.Sprintf("MAKE -J%d", r.Jobs), "NODEMGR CACHED", "RATIO", "CACHE HITS")
		for _, x := range r.Rounds {
			c.row(strconv.Itoa(x.Round), ms(x.Make), ms(x.Rebuild), fmt.Sprintf("%.2f", x.RebuildRatio), fmt.Sprintf("%d/%d", x.CacheHits, r.CompileTasks+1))
		}
		c.row("median", ms(r.Median.Make), ms(r.Median.Rebuild), fmt.Sprintf("%.2f", r.Median.RebuildRatio), "-")
		if err := c.flush(); err != nil {
			return err
		}
	}
	return nil
}

func benchRSSCmd(e *env) *cobra.Command {
	var cfg bench.RSSConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rss",
		Short: "Start an idle agent and report its memory, beside other builds' agents",
		Long: `Start a server and an agent as processes, let the agent idle (--idle), and
read its memory from /proc: VmRSS, and its parts RssAnon (heap, stacks) and
RssFile (pages of the binary), the latter split by where they lie in the
binary (code, read-only data, the function tables, data).

With --against BINARY (repeatable), each other nodemgr binary (the build
before a change, an agent-only build) gets a server and an agent of its own,
started beside this one's and read at the same time. An agent-only build,
which has no server command, gets a server of this binary.

Each agent runs from a copy of its binary dropped from the page cache, as
after a reboot, so its file pages are the ones it faulted in itself. They
count once mapped, and with each page the kernel maps neighbours it has in
the cache (readahead, fault-around, large folios): a binary just written or
read whole can show far more than here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			results, err := bench.RunRSS(cmd.Context(), cfg, e.stderr)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, map[string]any{"agents": results})
			}
			t := newTable(e.stdout, "BINARY", "SIZE", "VmRSS", "RssAnon", "RssFile", "CODE", "RODATA", "PCLNTAB", "DATA")
			mb := func(n uint64) string { return fmt.Sprintf("%.1fM", float64(n)/(1<<20)) }
			for _, r := range results {
				t.row(r.Binary, mb(uint64(r.Size)), mb(r.VmRSS), mb(r.RssAnon), mb(r.RssFile), mb(r.Text), mb(r.Rodata), mb(r.Pclntab), mb(r.Data))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringSliceVar(&cfg.Against, "against", nil, "another nodemgr binary whose idle agent is measured beside this one's (repeatable)")
	cmd.Flags().DurationVar(&cfg.Idle, "idle", 20*time.Second, "how long the agents idle, connected, before they are read")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
