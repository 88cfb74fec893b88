package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// BuildConfig sets up the remote-make harness.
type BuildConfig struct {
	Binary string // nodemgr binary: server and agents
	// Project is a directory with a Makefile whose default target compiles
	// *.c files to *.o and links them into one program; "" generates one.
	Project string
	Units   int // generated project: compile units, main.c included
	Rounds  int
	Agents  int // agents, each with the default worker schedule
	Jobs    int // make -j
	// Cache makes the suites use the action cache, and has each round
	// build the same sources a second time, as from a clean tree: every
	// task a hit.
	Cache bool
	// Oversubscribe lets every agent see all of this machine's CPUs, so
	// that N agents run N workers per CPU. By default each is pinned to
	// its share of them (agentCPUs), as N machines that together have
	// the CPUs make -j runs on.
	Oversubscribe bool
}

// BuildRound is one round: make, then nodemgr, on the same sources.
type BuildRound struct {
	Round int `json:"round"`
	// Load is the machine's 1-minute load average as the round began:
	// other work on it slows both sides, not always alike.
	Load    float64       `json:"load"`
	Make    time.Duration `json:"make"`
	Nodemgr time.Duration `json:"nodemgr"` // first upload to last file fetched
	Ratio   float64       `json:"ratio"`
	// Where nodemgr's time went. Upload: hashing and sending the sources
	// (a HEAD, then a PUT for each file the server lacks). Submit: creating
	// the suite, submitting the tasks and closing it. Compile: submitted to
	// the last compile result stored (the server's stamp). Link: from there
	// to the link's result stored. Seen: from there to this client's poll
	// seeing the suite complete. Fetch: listing the results and
	// downloading every output, one after the other as suite fetch does.
	Upload  time.Duration `json:"upload"`
	Submit  time.Duration `json:"submit"`
	Compile time.Duration `json:"compile"`
	Link    time.Duration `json:"link"`
	Seen    time.Duration `json:"seen"`
	Fetch   time.Duration `json:"fetch"`
	// Uploaded counts the files whose bytes went up (all of them: each
	// round's sources differ from the last's) out of Inputs.
	Uploaded      int   `json:"uploaded"`
	Inputs        int   `json:"inputs"`
	UploadedBytes int64 `json:"uploaded_bytes"`
	// PerAgent is how many compile tasks each agent ran, in agent order.
	PerAgent []int `json:"per_agent"`
	// CPU each side used. Make: make with its compilers. Nodemgr: the
	// agents with the workers and compilers they reaped, the server, and
	// this client (hashing, uploads, polls, fetches).
	MakeCPU   time.Duration `json:"make_cpu"`
	AgentCPU  time.Duration `json:"agent_cpu"`
	ServerCPU time.Duration `json:"server_cpu"`
	ClientCPU time.Duration `json:"client_cpu"`
	// SameObjects counts the fetched objects byte-identical to make's.
	SameObjects int `json:"same_objects"`
	// With the action cache (BuildConfig.Cache): the same build again, as
	// from a clean tree, first upload to last file fetched; its ratio to
	// make; and how many of its tasks the cache answered.
	Rebuild      time.Duration `json:"rebuild,omitempty"`
	RebuildRatio float64       `json:"rebuild_ratio,omitempty"`
	CacheHits    int           `json:"cache_hits,omitempty"`
}

// BuildResult is a whole run.
type BuildResult struct {
	Project      string `json:"project"` // "generated" or the directory
	CompileTasks int    `json:"compile_tasks"`
	Agents       int    `json:"agents"`
	// AgentCPUs are the CPUs each agent was pinned to (taskset -c), in
	// start order; absent when they all saw every CPU.
	AgentCPUs []string     `json:"agent_cpus,omitempty"`
	Jobs      int          `json:"jobs"`
	Rounds    []BuildRound `json:"rounds"`
	// Median holds each time and the ratio of the rounds, each the median
	// of its own column.
	Median BuildRound `json:"median"`
}

// RunBuild builds a C project round after round, alternately with make -j
// on this machine and through nodemgr: a server and cfg.Agents agents as
// processes on this machine, one compile task per object with its source
// and headers as inputs and the object as output, a link task after them
// taking their objects, the outputs fetched back and the program run.
// Each round appends a comment with its number to every source and
// header, so nodemgr uploads all of them again and no agent has them
// cached, as after an edit to a header that every file includes.
func RunBuild(ctx context.Context, cfg BuildConfig, progress io.Writer) (BuildResult, error) {
	res := BuildResult{Project: "generated", Agents: cfg.Agents, Jobs: cfg.Jobs}
	for _, tool := range []string{"make", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return res, fmt.Errorf("bench build needs %s: %w", tool, err)
		}
	}
	work, err := os.MkdirTemp("", "nodemgr-bench-build-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(work)
	// The agents' data dirs are in it: agents run as root start their
	// tasks as an unprivileged user, who must pass through to them.
	if err := os.Chmod(work, 0o711); err != nil {
		return res, err
	}
	src := filepath.Join(work, "src")
	var files map[string]string
	if cfg.Project != "" {
		res.Project = cfg.Project
		files, err = copyProject(cfg.Project, src)
	} else {
		files = generateProject(cfg.Units)
	}
	if err != nil {
		return res, err
	}
	if err := writeRound(src, files, 0); err != nil {
		return res, err
	}
	plan, err := planBuild(ctx, src, files)
	if err != nil {
		return res, err
	}
	res.CompileTasks = len(plan.units)
	fmt.Fprintf(progress, "  %s: %d compile tasks, then the link of %s\n", res.Project, len(plan.units), plan.program)

	srv, err := startServer(ctx, cfg.Binary)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	c := client.New(srv.addr, srv.token)
	if !cfg.Oversubscribe {
		if res.AgentCPUs, err = agentCPUs(cfg.Agents, runtime.NumCPU()); err != nil {
			return res, err
		}
	}
	agents, err := startAgents(ctx, c, srv.addr, cfg.Binary, work, cfg.Agents, res.AgentCPUs)
	defer agents.stop()
	if err != nil {
		return res, err
	}

	for i := 1; i <= cfg.Rounds; i++ {
		if err := writeRound(src, files, i); err != nil {
			return res, err
		}
		r := BuildRound{Round: i, Load: loadAverage()}
		if r.Make, r.MakeCPU, err = runMake(ctx, src, plan, cfg.Jobs); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "  round %d/%d: make -j%d %v", i, cfg.Rounds, cfg.Jobs, r.Make.Round(time.Millisecond))
		dest := filepath.Join(work, fmt.Sprintf("fetched-%d", i))
		if err := nodemgrBuild(ctx, c, srv, agents, src, dest, plan, i, cfg.Cache, &r); err != nil {
			return res, fmt.Errorf("round %d: %w", i, err)
		}
		fmt.Fprintf(progress, ", nodemgr %v", r.Nodemgr.Round(time.Millisecond))
		if err := checkBuild(src, dest, plan, &r); err != nil {
			return res, fmt.Errorf("round %d: %w", i, err)
		}
		if cfg.Cache {
			if err := rebuild(ctx, c, srv, agents, src, work, plan, i, &r); err != nil {
				return res, fmt.Errorf("round %d, again from the cache: %w", i, err)
			}
			fmt.Fprintf(progress, ", again from the cache %v (%d hits)", r.Rebuild.Round(time.Millisecond), r.CacheHits)
		}
		fmt.Fprintln(progress)
		r.Ratio = r.Nodemgr.Seconds() / r.Make.Seconds()
		res.Rounds = append(res.Rounds, r)
	}
	res.Median = medianRound(res.Rounds)
	return res, nil
}

// rebuild builds the round's sources through nodemgr again, as from a
// clean tree, the action cache warm from the first build, and checks the
// result as the first build's.
func rebuild(ctx context.Context, c *client.Client, srv *benchServer, agents *buildAgents, src, work string, p buildPlan, round int, r *BuildRound) error {
	again := BuildRound{Round: round, Make: r.Make}
	dest := filepath.Join(work, fmt.Sprintf("fetched-%d-again", round))
	if err := nodemgrBuild(ctx, c, srv, agents, src, dest, p, round, true, &again); err != nil {
		return err
	}
	if err := checkBuild(src, dest, p, &again); err != nil {
		return err
	}
	r.Rebuild, r.RebuildRatio, r.CacheHits = again.Nodemgr, again.Nodemgr.Seconds()/r.Make.Seconds(), again.CacheHits
	return nil
}

// medianRound is the median of each time and of the ratio.
func medianRound(rs []BuildRound) BuildRound {
	col := func(f func(BuildRound) time.Duration) time.Duration {
		var xs []time.Duration
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return middle(xs)
	}
	var ratios, rebuildRatios []float64
	for _, r := range rs {
		ratios = append(ratios, r.Ratio)
		rebuildRatios = append(rebuildRatios, r.RebuildRatio)
	}
	return BuildRound{
		Make:         col(func(r BuildRound) time.Duration { return r.Make }),
		Nodemgr:      col(func(r BuildRound) time.Duration { return r.Nodemgr }),
		Ratio:        middle(ratios),
		Upload:       col(func(r BuildRound) time.Duration { return r.Upload }),
		Submit:       col(func(r BuildRound) time.Duration { return r.Submit }),
		Compile:      col(func(r BuildRound) time.Duration { return r.Compile }),
		Link:         col(func(r BuildRound) time.Duration { return r.Link }),
		Seen:         col(func(r BuildRound) time.Duration { return r.Seen }),
		Fetch:        col(func(r BuildRound) time.Duration { return r.Fetch }),
		MakeCPU:      col(func(r BuildRound) time.Duration { return r.MakeCPU }),
		AgentCPU:     col(func(r BuildRound) time.Duration { return r.AgentCPU }),
		ServerCPU:    col(func(r BuildRound) time.Duration { return r.ServerCPU }),
		ClientCPU:    col(func(r BuildRound) time.Duration { return r.ClientCPU }),
		Rebuild:      col(func(r BuildRound) time.Duration { return r.Rebuild }),
		RebuildRatio: middle(rebuildRatios),
	}
}

// middle is the median; of an even count, the mean of the two middle ones.
func middle[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// buildPlan is what make would run, read from make -n -B: nodemgr runs
// the same command lines.
type buildPlan struct {
	units   []buildUnit
	headers []string // every *.h of the project, an input of every compile
	link    string   // the link's command line
	program string   // what it writes
}

type buildUnit struct {
	cmd, src, obj string
}

// planBuild reads the commands make would run from scratch and sorts
// them into compiles (-c X.c -o X.o) and one link (-o PROGRAM of the
// objects); anything else is refused, since it would not be the same
// build on both sides.
func planBuild(ctx context.Context, dir string, files map[string]string) (buildPlan, error) {
	var p buildPlan
	for f := range files {
		if strings.HasSuffix(f, ".h") {
			p.headers = append(p.headers, f)
		}
	}
	slices.Sort(p.headers)
	cmd := exec.CommandContext(ctx, "make", "-n", "-B", "--no-print-directory")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return p, fmt.Errorf("make -n -B in %s: %w", dir, err)
	}
	objs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		o := slices.Index(f, "-o")
		if o < 0 || o+1 == len(f) || strings.HasSuffix(line, "\\") {
			return p, fmt.Errorf("make -n -B printed %q: bench build handles a Makefile that compiles *.c to *.o and links them into one program, nothing else", line)
		}
		if slices.Contains(f, "-c") {
			i := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, ".c") })
			if i < 0 || !strings.HasSuffix(f[o+1], ".o") {
				return p, fmt.Errorf("make -n -B printed %q: a compile must name one .c and -o an .o", line)
			}
			if _, ok := files[f[i]]; !ok {
				return p, fmt.Errorf("compile %q: %s is not a source file of the project", line, f[i])
			}
			p.units = append(p.units, buildUnit{cmd: line, src: f[i], obj: f[o+1]})
			objs[f[o+1]] = true
			continue
		}
		if p.link != "" {
			return p, fmt.Errorf("make -n -B printed two commands that are not compiles, %q and %q: bench build handles one link", p.link, line)
		}
		p.link, p.program = line, f[o+1]
	}
	if p.link == "" || len(p.units) == 0 {
		return p, fmt.Errorf("make -n -B in %s printed no compile or no link", dir)
	}
	for _, w := range strings.Fields(p.link) {
		if strings.HasSuffix(w, ".o") && !objs[w] {
			return p, fmt.Errorf("the link %q takes %s, which no compile makes", p.link, w)
		}
	}
	return p, nil
}

// commandArgv runs a command line as make does: through sh only when it
// holds characters the shell would treat specially (make's own list).
func commandArgv(line string) []string {
	if strings.ContainsAny(line, "#;\"*?[]&|<>(){}$`'~!\\\n") {
		return []string{"sh", "-c", line}
	}
	return strings.Fields(line)
}

// runMake times make -jN from no objects and no program, and says how
// much CPU it and its compilers used.
func runMake(ctx context.Context, dir string, p buildPlan, jobs int) (wall, cpu time.Duration, err error) {
	os.Remove(filepath.Join(dir, p.program))
	for _, u := range p.units {
		os.Remove(filepath.Join(dir, u.obj))
	}
	cmd := exec.CommandContext(ctx, "make", fmt.Sprintf("-j%d", jobs))
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("make -j%d: %w\n%s", jobs, err, out.Bytes())
	}
	// The rusage of a waited-for child counts the children it waited for.
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// buildAgents are the agent processes and their nodes, in start order.
type buildAgents struct {
	procs []*exec.Cmd
	nodes []api.Node
}

// agentCPUs shares ncpu CPUs among n agents, as taskset -c lists: each
// agent its own contiguous run while there are enough, else one CPU each,
// round robin. An agent sees only the CPUs it may run on (its affinity),
// so its default worker schedule starts one worker for each of them, and
// its tasks inherit the pinning: two agents on 2 CPUs are two machines of
// one CPU, not two of two that run four compiles at once. Nil when one
// agent has every CPU anyway.
func agentCPUs(n, ncpu int) ([]string, error) {
	if n == 1 {
		return nil, nil
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("bench build pins each agent to its share of the CPUs with taskset (Debian: util-linux), or give --oversubscribe: %w", err)
	}
	sets := make([]string, n)
	for i := range n {
		if n > ncpu {
			sets[i] = strconv.Itoa(i % ncpu)
			continue
		}
		first, last := i*ncpu/n, (i+1)*ncpu/n-1
		sets[i] = strconv.Itoa(first)
		if last > first {
			sets[i] += "-" + strconv.Itoa(last)
		}
	}
	return sets, nil
}

func startAgents(ctx context.Context, c *client.Client, addr, binary, work string, n int, cpus []string) (*buildAgents, error) {
	a := &buildAgents{}
	jt, err := c.CreateJoinToken(ctx, api.CreateTokenRequest{Name: "bench-build"})
	if err != nil {
		return a, err
	}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("bench-build-%d", i)
		dir := filepath.Join(work, name)
		cmd := exec.Command(binary, "agent", "--server", "http://"+addr, "--data-dir", dir, "--name", name, "--log-level", "warn")
		if cpus != nil {
			cmd = exec.Command("taskset", append([]string{"-c", cpus[i-1], binary}, cmd.Args[1:]...)...)
		}
		// The join token in the environment: on the command line other
		// users could read it, and the agent would warn.
		cmd.Env = append(os.Environ(), "NODEMGR_JOIN_TOKEN="+jt.Secret)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return a, fmt.Errorf("start agent %s: %w", name, err)
		}
		a.procs = append(a.procs, cmd)
		node, err := waitNode(ctx, c, name)
		if err != nil {
			return a, err
		}
		a.nodes = append(a.nodes, node)
	}
	return a, nil
}

func (a *buildAgents) stop() {
	for _, p := range a.procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range a.procs {
		p.Wait()
	}
}

// cpu is the agents' CPU seconds with their reaped workers' and tasks'.
func (a *buildAgents) cpu() float64 {
	var s float64
	for _, p := range a.procs {
		s += procTreeCPU(p.Process.Pid)
	}
	return s
}

// unitSources are the units' sources, each once.
func unitSources(units []buildUnit) []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range units {
		if !seen[u.src] {
			seen[u.src] = true
			out = append(out, u.src)
		}
	}
	return out
}

// nodemgrBuild is one round through nodemgr, timed from the first upload
// to the last output written into dest.
func nodemgrBuild(ctx context.Context, c *client.Client, srv *benchServer, agents *buildAgents, src, dest string, p buildPlan, round int, cache bool, r *BuildRound) error {
	serverCPU, agentCPU, clientCPU := procCPU(srv.pid()), agents.cpu(), selfCPU()
	suite := fmt.Sprintf("bench-build-%d-%d", time.Now().UnixNano()%1e6, round)
	final := &api.RetryPolicy{FinalExitCodes: []int{1}}

	start := time.Now()
	// Every source and header, once, uploaded as the CLI does (a few at
	// once).
	var local []client.LocalFile
	for _, rel := range append(slices.Clone(p.headers), unitSources(p.units)...) {
		local = append(local, client.LocalFile{Path: filepath.Join(src, filepath.FromSlash(rel)), Rel: rel})
	}
	sent, err := c.UploadFiles(ctx, local, nil)
	if err != nil {
		return err
	}
	inputs := map[string]api.TaskFile{}
	for _, up := range sent {
		inputs[up.Input.Path] = up.Input
		r.Inputs++
		if up.Sent {
			r.Uploaded++
			r.UploadedBytes += up.Input.Size
		}
	}
	var tasks []api.TaskSpec
	link := api.TaskSpec{Name: "link", Argv: commandArgv(p.link), Outputs: []string{p.program}, Retry: final}
	for _, u := range p.units {
		t := api.TaskSpec{Name: "cc-" + u.obj, Argv: commandArgv(u.cmd), Outputs: []string{u.obj}, Retry: final}
		for _, f := range append([]string{u.src}, p.headers...) {
			t.Inputs = append(t.Inputs, inputs[f])
		}
		tasks = append(tasks, t)
		link.After = append(link.After, t.Name)
		link.InputFrom = append(link.InputFrom, api.InputFrom{Task: t.Name, Path: u.obj})
	}
	tasks = append(tasks, link)
	uploaded := time.Now()
	r.Upload = uploaded.Sub(start)

	// No worker_schedule: the default, one worker per CPU of each node.
	su, err := c.CreateSuite(ctx, api.SuiteSpec{Name: suite, Cache: cache})
	if err != nil {
		return err
	}
	if _, err := c.SubmitTasks(ctx, su.ID, tasks); err != nil {
		return err
	}
	if _, err := c.CloseSuite(ctx, su.ID); err != nil {
		return err
	}
	submitted := time.Now()
	r.Submit = submitted.Sub(uploaded)

	// A closed suite completes the moment its last task ends, and a
	// waiting GET hears it then (as suite wait does): one request per
	// change, not a poll every few milliseconds taking CPU from the
	// compiles. SEEN shows what the wait adds.
	var s api.Suite
	for etag := ""; !isState(s.State, api.SuiteComplete, api.SuiteCancelled); {
		got, tag, changed, err := c.SuiteChange(ctx, su.ID, etag, 30*time.Second)
		if err != nil {
			return err
		}
		if changed {
			s, etag = got, tag
		}
	}
	seen := time.Now()

	all, err := c.Tasks(ctx, su.ID, "")
	if err != nil {
		return err
	}
	if s.Counts.Finished != len(tasks) {
		return fmt.Errorf("suite %s ended %s with %d of %d tasks finished: %s", suite, s.State, s.Counts.Finished, len(tasks), firstFailure(all))
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	for _, t := range all {
		for _, out := range t.Result.Outputs {
			if err := fetchOutput(ctx, c, t.ID, out, dest); err != nil {
				return fmt.Errorf("fetch %s of %s: %w", out.Path, t.Name, err)
			}
		}
	}
	r.Nodemgr = time.Since(start)
	r.Fetch = time.Since(seen)
	r.ServerCPU = time.Duration((procCPU(srv.pid()) - serverCPU) * float64(time.Second))
	r.AgentCPU = time.Duration((agents.cpu() - agentCPU) * float64(time.Second))
	r.ClientCPU = selfCPU() - clientCPU

	var lastCompile, linked time.Time
	r.PerAgent = make([]int, len(agents.nodes))
	for _, t := range all {
		if t.Result.CachedFrom != "" {
			r.CacheHits++
		}
		at := t.Result.FinishedAt
		if t.Name == "link" {
			linked = at
			continue
		}
		lastCompile = later(lastCompile, at)
		for i, n := range agents.nodes {
			if t.Result.NodeID == n.ID {
				r.PerAgent[i]++
			}
		}
	}
	r.Compile = lastCompile.Sub(submitted)
	r.Link = linked.Sub(lastCompile)
	r.Seen = seen.Sub(linked)
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func firstFailure(tasks []api.Task) string {
	for _, t := range tasks {
		if isState(t.State, api.TaskFinished) {
			continue
		}
		if n := len(t.Failures); n > 0 {
			f := t.Failures[n-1]
			return fmt.Sprintf("%s is %s: %s\n%s", t.Name, t.State, f.Reason, f.Stderr)
		}
		return fmt.Sprintf("%s is %s %s", t.Name, t.State, t.Reason)
	}
	return "no task failed"
}

func fetchOutput(ctx context.Context, c *client.Client, task string, out api.TaskFile, dest string) error {
	rc, _, err := c.TaskOutput(ctx, task, out.Path)
	if err != nil {
		return err
	}
	defer rc.Close()
	mode := fs.FileMode(out.Mode)
	if mode == 0 {
		mode = 0o644
	}
	dst := filepath.Join(dest, filepath.FromSlash(out.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != out.Size {
		err = fmt.Errorf("got %d bytes, want %d", n, out.Size)
	}
	return err
}

// checkBuild runs the fetched program beside make's, wanting the same
// output and exit status, and counts the objects identical to make's.
func checkBuild(src, dest string, p buildPlan, r *BuildRound) error {
	run := func(dir string) (string, error) {
		out, err := exec.Command(filepath.Join(dir, p.program)).CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return "", fmt.Errorf("run %s: %w", filepath.Join(dir, p.program), err)
		}
		return fmt.Sprintf("%s(%v)", out, err), nil
	}
	want, err := run(src)
	if err != nil {
		return err
	}
	got, err := run(dest)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("the program built through nodemgr printed %q; make's printed %q", got, want)
	}
	for _, u := range p.units {
		a, err1 := os.ReadFile(filepath.Join(src, u.obj))
		b, err2 := os.ReadFile(filepath.Join(dest, u.obj))
		if err1 == nil && err2 == nil && bytes.Equal(a, b) {
			r.SameObjects++
		}
	}
	return nil
}

// selfCPU is this process's CPU time.
func selfCPU() time.Duration {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// loadAverage is the 1-minute load average, 0 where unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

// roundComment ends every source and header in a round, so no two
// rounds upload the same bytes.
func roundComment(round int) string {
	return fmt.Sprintf("\n/* nodemgr bench build, round %d */\n", round)
}

// writeRound writes the project's files, the sources and headers with
// the round's comment.
func writeRound(dir string, files map[string]string, round int) error {
	for rel, text := range files {
		if strings.HasSuffix(rel, ".c") || strings.HasSuffix(rel, ".h") {
			text += roundComment(round)
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyProject reads a project's files (not .git, not objects), to write
// into a copy each round: the project itself is left alone.
func copyProject(from, to string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, ".o") {
			return nil
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read project %s: %w", from, err)
	}
	if _, ok := files["Makefile"]; !ok {
		return nil, fmt.Errorf("project %s has no Makefile", from)
	}
	return files, os.MkdirAll(to, 0o755)
}

// generateProject writes a C program of units compile units (main.c one
// of them) that share one header, with enough loops, arrays and branches
// in each that the optimizer has work to do, as in a real project.
func generateProject(units int) map[string]string {
	units = max(units, 1)
	files := map[string]string{"bench.h": benchHeader(units - 1)}
	var objs []string
	var main strings.Builder
	main.WriteString("#include \"bench.h\"\n\nint main(int argc, char **argv) {\n\tlong seed = argc > 1 ? atol(argv[1]) : 7, sum = 0;\n")
	for u := range units - 1 {
		name := fmt.Sprintf("u%02d", u)
		files[name+".c"] = benchUnit(name, rand.New(rand.NewPCG(uint64(u), 1)))
		objs = append(objs, name+".o")
		fmt.Fprintf(&main, "\tsum = sum * 31 + %s_run(seed + %d);\n", name, u)
	}
	main.WriteString("\tprintf(\"checksum %ld\\n\", sum);\n\treturn 0;\n}\n")
	files["main.c"] = main.String()
	objs = append(objs, "main.o")
	files["Makefile"] = fmt.Sprintf(`# Generated by nodemgr bench build.
CFLAGS = -O2
OBJS = %s
prog: $(OBJS)
	$(CC) -o $@ $(OBJS) -lm
%%.o: %%.c bench.h
	$(CC) $(CFLAGS) -c $< -o $@
`, strings.Join(objs, " "))
	return files
}

func benchHeader(units int) string {
	var b strings.Builder
	b.WriteString(`#ifndef BENCH_H
#define BENCH_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>

typedef struct { double x, y, z; } vec3;
typedef struct { int n; double v[64]; } series;
typedef struct { uint32_t key; int count; char name[24]; } entry;

static inline double dot3(vec3 a, vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
static inline uint32_t mix32(uint32_t h) {
	h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
	return h;
}
static inline void series_fill(series *s, long seed) {
	s->n = 64;
	for (int i = 0; i < s->n; i++) s->v[i] = (double)(mix32((uint32_t)(seed + i)) % 1000) / 10.0;
}

`)
	for u := range units {
		fmt.Fprintf(&b, "long u%02d_run(long seed);\n", u)
	}
	b.WriteString("#endif\n")
	return b.String()
}

// unitFuncs is how many functions a generated unit has: about 150 ms of CPU at
// -O2 with gcc 12 on the machines this was written on.
const unitFuncs = 10

// benchUnit is one compile unit: unitFuncs functions of a few kinds with
// constants of their own, and NAME_run calling them all.
func benchUnit(name string, rng *rand.Rand) string {
	var b, run strings.Builder
	fmt.Fprintf(&b, "#include \"bench.h\"\n\nstatic int %s_table[256];\n\n", name)
	fmt.Fprintf(&run, "long %s_run(long seed) {\n\tseries s;\n\tseries_fill(&s, seed);\n\tlong acc = seed;\n", name)
	fmt.Fprintf(&run, "\tfor (int i = 0; i < 256; i++) %s_table[i] = (int)mix32((uint32_t)(i * %d + seed));\n", name, 1+rng.IntN(97))
	for i := range unitFuncs {
		fn := fmt.Sprintf("%s_f%02d", name, i)
		k1, k2, k3 := 2+rng.IntN(9), 3+rng.IntN(29), 101+rng.IntN(900)
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, `double %[1]s(series *s, int k) {
	double acc = 0;
	for (int i = 0; i < s->n; i++) {
		for (int j = 0; j < k && i + j < s->n; j++)
			acc += s->v[i + j] * (j + %[2]d) / (double)(k + i + 1);
		if (acc > 1e6) acc = fmod(acc, %[4]d.0);
	}
	return acc;
}

`, fn, k1, k2, k3)
			fmt.Fprintf(&run, "\tacc += (long)%s(&s, %d);\n", fn, k1)
		case 1:
			fmt.Fprintf(&b, `uint32_t %[1]s(const char *p, size_t n) {
	uint32_t h = 2166136261u ^ %[4]du;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
		switch (h & 7) {
		case 0: h = mix32(h + %[2]d); break;
		case 1: h ^= h << %[2]d; break;
		case 2: h += %[5]s_table[h & 255]; break;
		case 3: h = (h >> 5) | (h << 27); break;
		case 4: h -= (uint32_t)i * %[3]du; break;
		default: h ^= 0x9e3779b9u;
		}
	}
	return h;
}

`, fn, k1, k2, k3, name)
			fmt.Fprintf(&run, "\t{ char buf[64]; snprintf(buf, sizeof buf, \"%%s-%%ld\", \"%s\", acc); acc ^= %s(buf, strlen(buf)); }\n", fn, fn)
		case 2:
			fmt.Fprintf(&b, `double %[1]s(long seed) {
	double a[8][8], m[8][8], c[8][8];
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++) {
			a[i][j] = (double)((seed + i * %[2]d + j) %% %[3]d);
			m[i][j] = (double)((seed * %[2]d + j - i) %% %[4]d) / %[3]d.0;
		}
	for (int r = 0; r < %[2]d; r++) {
		for (int i = 0; i < 8; i++)
			for (int j = 0; j < 8; j++) {
				double s = 0;
				for (int k = 0; k < 8; k++) s += a[i][k] * m[k][j];
				c[i][j] = s / 8.0;
			}
		memcpy(a, c, sizeof a);
	}
	vec3 v = { c[0][0], c[3][4], c[7][7] };
	return dot3(v, v);
}

`, fn, k1, k2, k3)
			fmt.Fprintf(&run, "\tacc += (long)fmod(%s(seed), 1e9);\n", fn)
		case 3:
			fmt.Fprintf(&b, `int %[1]s(long seed) {
	entry e[48];
	for (int i = 0; i < 48; i++) {
		e[i].key = mix32((uint32_t)(seed * %[3]d + i));
		e[i].count = (int)(e[i].key %% %[4]d);
		snprintf(e[i].name, sizeof e[i].name, "e%%d-%%d", i, e[i].count);
	}
	for (int i = 1; i < 48; i++) {
		entry x = e[i];
		int j = i - 1;
		while (j >= 0 && (e[j].key > x.key || (e[j].key == x.key && strcmp(e[j].name, x.name) > 0))) {
			e[j + 1] = e[j];
			j--;
		}
		e[j + 1] = x;
	}
	int lo = 0, hi = 47, want = (int)(seed %% 48), found = 0;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (e[mid].key == e[want].key) { found = mid; break; }
		if (e[mid].key < e[want].key) lo = mid + 1; else hi = mid - 1;
	}
	return found + e[0].count + %[2]d;
}

`, fn, k1, k2, k3)
			fmt.Fprintf(&run, "\tacc += %s(seed);\n", fn)
		case 4:
			fmt.Fprintf(&b, `long %[1]s(const char *text) {
	long total = 0, num = 0;
	int state = 0, words = 0;
	for (const char *p = text; *p; p++) {
		char ch = *p;
		switch (state) {
		case 0:
			if (ch >= '0' && ch <= '9') { num = ch - '0'; state = 1; }
			else if (ch != ' ') { words++; state = 2; }
			break;
		case 1:
			if (ch >= '0' && ch <= '9') num = num * 10 + (ch - '0');
			else { total += num * %[2]d; num = 0; state = ch == ' ' ? 0 : 2; }
			break;
		default:
			if (ch == ' ') state = 0;
			else if (ch == '%%') total %%= %[4]d;
		}
	}
	return total + num + words * %[3]d;
}

`, fn, k1, k2, k3)
			fmt.Fprintf(&run, "\t{ char buf[96]; snprintf(buf, sizeof buf, \"%%ld apples %%d pears %%%% %%ld\", acc %% 1000, %d, seed); acc += %s(buf); }\n", k2, fn)
		}
	}
	run.WriteString("\treturn acc;\n}\n")
	b.WriteString(run.String())
	return b.String()
}
