package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

func newSuiteCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "suite", Short: "Create, watch and control task suites"}
	cmd.AddCommand(suiteCreateCmd(e), suiteLsCmd(e), suiteShowCmd(e), suiteWatchCmd(e), suiteWaitCmd(e), suiteFetchCmd(e),
		suiteStateCmd(e, "close", "Take no more tasks; the suite completes when its last task ends"),
		suiteStateCmd(e, "cancel", "Cancel the suite and its unfinished tasks"),
		suiteAssignCmd(e))
	return cmd
}

// LoadSuiteFile reads a suite spec from YAML (or JSON, which is YAML).
// Unknown keys are errors with their line.
func LoadSuiteFile(path string) (api.SuiteSpec, error) {
	return yamlAs[api.SuiteSpec](path)
}

func readFileOrStdin(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

// runAsString says who a suite's hooks and tasks run as on its nodes.
func runAsString(runAs string) string {
	switch runAs {
	case "":
		return "an unprivileged user of each node (nodemgr-task, else nobody)"
	case api.RunAsAgent:
		return "agent (each agent's own user and rights)"
	}
	return runAs
}

func suiteCreateCmd(e *env) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create -f suite.yaml",
		Short: "Create a task suite from a YAML file",
		Long: `Create a task suite. The file (YAML; - reads standard input):

  name: render-frames
  group: ml-team                 # who may use it, and which agents may run it
  tags: [linux]                  # agents need all of these tags
  priority: 10                   # higher runs first
  worker_schedule:
    worker_count: 4              # 1..256 worker processes per agent
    cpu_binding: {cores: [0, 1, 2, 3], strategy: RoundRobin}   # or Exclusive, Shared
    task_prefetch_count: 32      # tasks buffered on the agent (0: none)
  hooks:
    prepare: {command: [sh, -c, "make data"], timeout: 10m,
              resources: [{url: "http://depot/data.tar", path: data.tar}]}
    cleanup: {command: [rm, -rf, data]}
  run_as: builder                # the node's user tasks and hooks run as; absent: an
                                 # unprivileged one (nodemgr-task, else nobody); root or
                                 # agent (the agent's own user): group admins only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := readSpec(file, "give the suite file with -f FILE", LoadSuiteFile)
			if err != nil {
				return err
			}
			s, err := clientFor(cmd, e).CreateSuite(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, s)
			}
			fmt.Fprintf(e.stdout, "created suite %s (%s); submit tasks with: nodemgr task submit --suite %s -- CMD ARGS...\n", s.Name, s.ID, s.Name)
			if s.WaitingReason != "" {
				fmt.Fprintf(e.stderr, "warning: no current node could run it: %s (it waits until one can: a node that joins, or one a pool starts for it; see nodemgr pool ls)\n", s.WaitingReason)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "suite file (YAML or JSON; - for standard input)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func suiteLsCmd(e *env) *cobra.Command {
	var state string
	cmd := &cobra.Command{Use: "ls", Short: "List suites", Args: cobra.NoArgs}
	cmd.Flags().StringVar(&state, "state", "", "only suites in this state: open, closed, complete, cancelled (any case)")
	return lsCmd(e, cmd, "all",
		func(c *client.Client, ctx context.Context, p client.Page) (api.SuiteList, error) {
			return c.SuitesPage(ctx, state, p)
		},
		func(suites []api.Suite, next string) any { return api.SuiteList{Suites: suites, Next: next} },
		printSuites)
}

func printSuites(e *env, suites []api.Suite) error {
	t := newTable(e.stdout, "ID", "NAME", "STATE", "PRIORITY", "GROUP", "TAGS", "WORKERS", "READY", "RUNNING", "HELD", "FINISHED", "FAILED", "CANCELLED", "WAITING")
	for _, s := range suites {
		c := s.Counts
		// The reason whole: a table cell cut short would hide what to do.
		t.row(s.ID, s.Name, s.State, strconv.Itoa(s.Priority), orDash(s.Group), orDash(strings.Join(s.Tags, ",")),
			strconv.Itoa(s.WorkerSchedule.WorkerCount), strconv.Itoa(c.Ready), strconv.Itoa(runningNow(c)), strconv.Itoa(c.Held),
			strconv.Itoa(c.Finished), strconv.Itoa(c.Failed), strconv.Itoa(c.Cancelled), orDash(s.WaitingReason))
	}
	return t.flush()
}

// runningNow is how many of a suite's tasks run now: the ones nodes
// claimed (Running) less those they hold and have not started (Held).
func runningNow(c api.TaskCounts) int { return c.Running - c.Held }

func suiteShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "show SUITE", Short: "Show a suite and its task counts", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := clientFor(cmd, e).Suite(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, s)
			}
			ws := s.WorkerSchedule
			binding := "none"
			if b := ws.CPUBinding; b != nil {
				binding = fmt.Sprintf("%s over cores %v", b.Strategy, b.Cores)
			}
			prefetch := "32"
			if ws.TaskPrefetchCount != nil {
				prefetch = strconv.Itoa(*ws.TaskPrefetchCount)
			}
			assigned := "automatic (tags and group)"
			if len(s.AssignedNodes) > 0 {
				assigned = strings.Join(s.AssignedNodes, ", ")
			}
			c := s.Counts
			t := newTable(e.stdout, "FIELD", "VALUE")
			for _, r := range [][2]string{
				{"ID", s.ID}, {"Name", s.Name}, {"State", s.State}, {"Owner", s.Owner},
				{"Description", orDash(s.Description)}, {"Group", orDash(s.Group)},
				{"Tags", orDash(strings.Join(s.Tags, ", "))}, {"Labels", orDash(labelString(s.Labels))},
				{"Priority", strconv.Itoa(s.Priority)}, {"Assigned to", assigned},
				{"Workers", fmt.Sprintf("%d, binding %s, prefetch %s", ws.WorkerCount, binding, prefetch)},
				{"Prepare hook", hookString(s.Hooks.Prepare)}, {"Cleanup hook", hookString(s.Hooks.Cleanup)},
				{"Runs as", runAsString(s.RunAs)},
				{"Tasks", fmt.Sprintf("%d: %d ready, %d running, %d held (fetched by nodes, not started), %d finished, %d failed, %d cancelled",
					c.Total(), c.Ready, runningNow(c), c.Held, c.Finished, c.Failed, c.Cancelled)},
				{"Created", s.CreatedAt.Format(time.RFC3339)},
			} {
				t.row(r[0], r[1])
			}
			if s.WaitingReason != "" {
				t.row("Waiting", s.WaitingReason)
			}
			if err := t.flush(); err != nil {
				return err
			}
			printProblems(e.stdout, s.Problems)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printProblems lists why nodes could not take the suite up, each with
// the end of its hook's output indented under it.
func printProblems(w io.Writer, problems []api.SuiteProblem) {
	if len(problems) == 0 {
		return
	}
	fmt.Fprintln(w, "\nProblems (the latest per node):")
	for _, p := range problems {
		node := p.NodeID
		if p.NodeName != "" && p.NodeName != p.NodeID {
			node = p.NodeName + " (" + p.NodeID + ")"
		}
		fmt.Fprintf(w, "  node %s, %s failed at %s: %s (exit code %d)\n", node, p.Stage, p.At.Format(time.RFC3339), p.Reason, p.ExitCode)
		for line := range strings.Lines(p.OutputTail) {
			fmt.Fprintf(w, "      %s", line)
			if !strings.HasSuffix(line, "\n") {
				fmt.Fprintln(w)
			}
		}
	}
}

func hookString(h *api.Hook) string {
	if h == nil {
		return "-"
	}
	s := strings.Join(h.Command, " ")
	if h.Timeout > 0 {
		s += fmt.Sprintf(" (timeout %s)", time.Duration(h.Timeout))
	}
	if n := len(h.Resources); n > 0 {
		s += fmt.Sprintf(", %d resources", n)
	}
	return s
}

func suiteStateCmd(e *env, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use: verb + " SUITE", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			do := c.CloseSuite
			if verb == "cancel" {
				do = c.CancelSuite
			}
			s, err := do(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "suite %s is %s\n", s.Name, s.State)
			return nil
		},
	}
}

func suiteAssignCmd(e *env) *cobra.Command {
	var auto, add bool
	cmd := &cobra.Command{
		Use:   "assign SUITE NODE... | SUITE --auto",
		Short: "Run a suite on these nodes only (or --auto: any node whose tags match)",
		Long: `Run a suite on these nodes only. The list replaces the suite's assignment:
nodes left out finish the tasks they hold and take no more (--add keeps them).
--auto goes back to assignment by tags and group.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if auto == (len(args) > 1) {
				return fmt.Errorf("name nodes, or give --auto to go back to assignment by tags")
			}
			if auto && add {
				return usagef("--add needs nodes to add; --auto goes back to assignment by tags")
			}
			assign := clientFor(cmd, e).AssignSuite
			if add {
				assign = clientFor(cmd, e).AddSuiteNodes
			}
			s, err := assign(cmd.Context(), args[0], args[1:])
			if err != nil {
				return err
			}
			if len(s.AssignedNodes) == 0 {
				fmt.Fprintf(e.stdout, "suite %s runs on any node whose tags match\n", s.Name)
			} else {
				fmt.Fprintf(e.stdout, "suite %s runs on %s\n", s.Name, strings.Join(s.AssignedNodes, ", "))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&auto, "auto", false, "assign by tags and group again")
	cmd.Flags().BoolVar(&add, "add", false, "keep the nodes assigned already and add these")
	return cmd
}

// suiteWatchCmd shows a live progress bar until the suite ends.
func suiteWatchCmd(e *env) *cobra.Command {
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "watch SUITE",
		Short: "Show a suite's progress live until it completes; fail if a task failed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := clientFor(cmd, e)
			start := time.Now()
			waiting, drawn := "", false
			var s api.Suite
			// Each change is shown at once; with none, the bar's clock
			// moves every --every.
			for etag := ""; ; {
				got, tag, changed, err := nextSuiteChange(cmd.Context(), c, args[0], etag, min(every, time.Minute))
				if cmd.Context().Err() != nil {
					fmt.Fprintln(e.stdout)
					return nil
				}
				if err != nil {
					return err
				}
				if changed {
					s, etag = got, tag
				}
				// Why it waits, on a line of its own each time it changes:
				// a bar that does not move says nothing of the reason.
				if s.WaitingReason != waiting {
					if waiting = s.WaitingReason; waiting != "" {
						if drawn {
							fmt.Fprintln(e.stdout) // the bar so far stays above
						}
						fmt.Fprintf(e.stdout, "waiting: %s\n", waiting)
					}
				}
				redraw(e.rawOut(), progressLine(s, time.Since(start)))
				drawn = true
				if s.State == api.SuiteComplete || s.State == api.SuiteCancelled {
					fmt.Fprintln(e.stdout)
					return suiteOutcome(s)
				}
			}
		},
	}
	cmd.Flags().DurationVar(&every, "every", 500*time.Millisecond, "redraw at least this often (changes show at once)")
	return cmd
}

func progressLine(s api.Suite, elapsed time.Duration) string {
	c := s.Counts
	total := c.Total()
	done := c.Finished + c.Failed + c.Cancelled
	const width = 30
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	pending := ""
	if c.Pending > 0 {
		pending = fmt.Sprintf("pending %d  ", c.Pending)
	}
	held := ""
	if c.Held > 0 {
		held = fmt.Sprintf("held %d  ", c.Held)
	}
	return fmt.Sprintf("%s %s %d/%d  %sready %d  running %d  %sfinished %d  failed %d  cancelled %d  %s  %s ",
		s.Name, bar, done, total, pending, c.Ready, runningNow(c), held, c.Finished, c.Failed, c.Cancelled, s.State, elapsed.Round(time.Second))
}

func newTaskCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Submit, inspect and cancel tasks"}
	cmd.AddCommand(taskSubmitCmd(e), taskLsCmd(e), taskShowCmd(e), taskGetCmd(e), taskLogsCmd(e), taskCancelCmd(e))
	return cmd
}

func newCacheCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "Manage the action cache that answers tasks which opt in (cache: true)"}
	var group, key string
	var asJSON bool
	rm := &cobra.Command{
		Use:   "rm",
		Short: "Empty the action cache of a group, or your own, or remove one entry",
		Long: `Empty the action cache, so that the tasks it would answer run again: a
group's (--group, needs Write there), or by default your own, which holds the
results of your suites outside any group. --key removes one entry only (an
action key, as the server logs it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := clientFor(cmd, e).ClearActionCache(cmd.Context(), group, key)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, api.ActionCacheCleared{Deleted: n})
			}
			fmt.Fprintf(e.stdout, "removed %d cached result(s); their tasks run again\n", n)
			return nil
		},
	}
	rm.Flags().StringVar(&group, "group", "", "the group whose cache to empty (default: your own)")
	rm.Flags().StringVar(&key, "key", "", "remove this action key only")
	rm.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(rm)
	return cmd
}

func taskSubmitCmd(e *env) *cobra.Command {
	var suite, file, workdir, name string
	var envs, labels, inputs, outputs, after, inputFrom []string
	var timeout, killGrace, backoff time.Duration
	var priority, maxAttempts int
	var finalCodes []int
	var asJSON, cache bool
	cmd := &cobra.Command{
		Use:   "submit --suite SUITE [flags] -- CMD ARGS... | --suite SUITE -f tasks.jsonl",
		Short: "Submit one task, or many from a file",
		Long: `Submit one task (the command after --) or many from a file: one JSON task
per line ({"argv": [...], "env": {...}, "workdir": "...", "timeout": "30s",
"kill_grace": "10s", "priority": 0, "name": "...", "labels": {...},
"inputs": [{"path": "src/a.c"}], "outputs": ["*.o"], "after": ["other-task"],
"input_from": [{"task": "other-task", "path": "a.o"}], "retry": {"max_attempts": 1},
"cache": true}),
or a YAML list of such tasks. Files are sent in batches of 10,000; each batch
is stored all or none.

Input files (--input, or "inputs" entries with a path and no digest) are paths
relative to the current directory, which are also their paths in the task's
sandbox; each distinct file is uploaded once to the server's blob store.
A task with files runs in a fresh sandbox directory per attempt; --workdir is
relative to it. Outputs (--output GLOB) come back with nodemgr task get and
nodemgr suite fetch.

  nodemgr task submit --suite build --name lapi --input src/lapi.c \
      --input 'src/*.h' --output src/lapi.o --final-exit-code 1 -- gcc -c src/lapi.c -o src/lapi.o
  nodemgr task submit --suite build --after lapi --input-from lapi \
      --output lua -- gcc -o lua src/lapi.o`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if suite == "" {
				return usagef("--suite is required")
			}
			var tasks []api.TaskSpec
			switch {
			case file != "" && len(args) > 0:
				return &usageError{fmt.Errorf("give either -f FILE or a command after --, not both")}
			case file != "":
				var err error
				if tasks, err = loadTasks(file); err != nil {
					return err
				}
				up := newUploader(clientFor(cmd, e), e)
				if err := up.fill(cmd.Context(), tasks); err != nil {
					return err
				}
				up.report()
			case len(args) > 0:
				env, err := validate.KeyValues("--env", envs)
				if err != nil {
					return err
				}
				lbl, err := validate.KeyValues("--label", labels)
				if err != nil {
					return err
				}
				t := api.TaskSpec{Argv: args, Env: env, Workdir: workdir, Timeout: api.Duration(timeout),
					KillGrace: api.Duration(killGrace), Priority: priority, Name: name, Labels: lbl,
					Outputs: outputs, After: after}
				for _, f := range inputFrom {
					in, err := parseInputFrom(f)
					if err != nil {
						return err
					}
					t.InputFrom = append(t.InputFrom, in)
				}
				if maxAttempts != 0 || finalCodes != nil || backoff != 0 {
					t.Retry = &api.RetryPolicy{MaxAttempts: maxAttempts, FinalExitCodes: finalCodes, Backoff: api.Duration(backoff)}
				}
				if cmd.Flags().Changed("cache") {
					t.Cache = &cache
				}
				up := newUploader(clientFor(cmd, e), e)
				if t.Inputs, err = up.expand(cmd.Context(), inputs); err != nil {
					return err
				}
				up.report()
				tasks = []api.TaskSpec{t}
			default:
				return &usageError{fmt.Errorf("give the task's command after --, e.g. nodemgr task submit --suite %s -- echo hello", suite)}
			}
			ids, err := submitInBatches(cmd.Context(), clientFor(cmd, e), suite, tasks, e)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, api.SubmitResult{IDs: ids})
			}
			if len(ids) == 1 {
				fmt.Fprintln(e.stdout, ids[0])
			} else {
				fmt.Fprintf(e.stdout, "submitted %d tasks to %s\n", len(ids), suite)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&suite, "suite", "", "suite ID or name")
	cmd.Flags().StringVarP(&file, "file", "f", "", "tasks file: JSON lines or a YAML list (- for standard input)")
	cmd.Flags().StringSliceVar(&envs, "env", nil, "KEY=VALUE for the task's environment (repeatable)")
	cmd.Flags().StringVar(&workdir, "workdir", "", "working directory on the node")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop the task after this long (0: no limit)")
	cmd.Flags().DurationVar(&killGrace, "kill-grace", 0, "when the task is stopped (timeout, cancel, shutdown), how long its processes have between SIGTERM and SIGKILL (0: 10s, at most 10m)")
	cmd.Flags().IntVar(&priority, "priority", 0, "higher runs first within the suite")
	cmd.Flags().StringVar(&name, "name", "", "a name unique in the suite, for --after, --input-from and task ls --name")
	cmd.Flags().StringSliceVar(&labels, "label", nil, "KEY=VALUE label (repeatable)")
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "file, directory or glob to stage into the task's sandbox, relative to here (repeatable)")
	cmd.Flags().StringArrayVar(&outputs, "output", nil, "glob, relative to the sandbox, of files to bring back (repeatable)")
	cmd.Flags().StringArrayVar(&after, "after", nil, "run after this task (ID or name) finished; cancelled if it fails (repeatable)")
	cmd.Flags().StringArrayVar(&inputFrom, "input-from", nil, "TASK (all its outputs), TASK:PATH or TASK:PATH=AS as inputs; TASK must be in --after (repeatable)")
	cmd.Flags().BoolVar(&cache, "cache", false, "answer the task from the action cache when an equal one succeeded before (--cache=false: always run it); default: the suite's cache setting")
	cmd.Flags().IntVar(&maxAttempts, "max-attempts", 0, "give the task up after this many failed attempts (0: the suite's policy, else the seed's rules)")
	cmd.Flags().IntSliceVar(&finalCodes, "final-exit-code", nil, "exit codes that retrying cannot fix: fail at once (repeatable)")
	cmd.Flags().DurationVar(&backoff, "retry-backoff", 0, "pause before the second attempt, doubled after each failure (0: the server's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the IDs as JSON")
	return cmd
}

// loadTasks reads JSON lines or a YAML list of task specs.
func loadTasks(path string) ([]api.TaskSpec, error) {
	b, err := readFileOrStdin(path)
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var tasks []api.TaskSpec
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for line := 1; sc.Scan(); line++ {
			text := bytes.TrimSpace(sc.Bytes())
			if len(text) == 0 {
				continue
			}
			var t api.TaskSpec
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&t); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			tasks = append(tasks, t)
		}
		return tasks, sc.Err()
	}
	var tasks []api.TaskSpec
	if err := yamlfield.UnmarshalLimit(b, path, maxTaskFile, &tasks); err != nil {
		return nil, err
	}
	return tasks, nil
}

func submitInBatches(ctx context.Context, c interface {
	SubmitTasks(context.Context, string, []api.TaskSpec) ([]string, error)
}, suite string, tasks []api.TaskSpec, e *env) ([]string, error) {
	const batch = 10000
	var ids []string
	for i := 0; i < len(tasks); i += batch {
		end := min(i+batch, len(tasks))
		got, err := c.SubmitTasks(ctx, suite, tasks[i:end])
		if err != nil {
			if len(ids) > 0 {
				return ids, fmt.Errorf("after %d tasks were stored, the batch of tasks %d-%d failed: %w", len(ids), i+1, end, err)
			}
			return nil, err
		}
		ids = append(ids, got...)
		if len(tasks) > batch {
			redraw(e.rawErr(), fmt.Sprintf("submitted %d/%d", len(ids), len(tasks)))
		}
	}
	if len(tasks) > batch {
		fmt.Fprintln(e.stderr)
	}
	return ids, nil
}

func taskLsCmd(e *env) *cobra.Command {
	var suite string
	var labels []string
	var f client.TaskFilter
	cmd := &cobra.Command{
		Use: "ls --suite SUITE", Short: "List a suite's tasks", Args: cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error {
			if suite == "" {
				return usagef("--suite is required")
			}
			var err error
			f.Labels, err = validate.KeyValues("--label", labels)
			return err
		},
	}
	cmd.Flags().StringVar(&suite, "suite", "", "suite ID or name")
	cmd.Flags().StringVar(&f.State, "state", "", "only tasks in this state: pending, ready, running, finished, failed, cancelled (any case)")
	cmd.Flags().StringVar(&f.Name, "name", "", "only the task of this name")
	cmd.Flags().StringSliceVar(&labels, "label", nil, "only tasks with this KEY=VALUE label (repeatable)")
	return lsCmd(e, cmd, "all",
		func(c *client.Client, ctx context.Context, p client.Page) (api.TaskList, error) {
			return c.TasksFiltered(ctx, suite, f, p)
		},
		func(tasks []api.Task, next string) any { return api.TaskList{Tasks: tasks, Next: next} },
		printTasks)
}

func printTasks(e *env, tasks []api.Task) error {
	t := newTable(e.stdout, "ID", "NAME", "STATE", "ATTEMPTS", "EXIT", "NODE", "COMMAND")
	for _, tk := range tasks {
		exit := "-"
		if r := tk.Result; r != nil {
			exit = strconv.Itoa(r.ExitCode)
			if r.Signal != "" {
				exit = r.Signal
			}
		}
		t.row(tk.ID, orDash(tk.Name), tk.State, strconv.Itoa(tk.Attempt), exit, orDash(tk.NodeID), truncate(strings.Join(tk.Argv, " "), 60))
	}
	return t.flush()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func taskShowCmd(e *env) *cobra.Command {
	return showCmd(e, "show TASK", "Show a task: attempts, result, failures with signals and output tails", (*client.Client).Task, printTask)
}

func printTask(e *env, tk api.Task) {
	w := e.stdout
	fmt.Fprintf(w, "Task      %s (suite %s)\nState     %s after %d attempt(s)\nCommand   %s\n", tk.ID, tk.SuiteID, tk.State, tk.Attempt, strings.Join(tk.Argv, " "))
	if tk.Name != "" {
		fmt.Fprintf(w, "Name      %s\n", tk.Name)
	}
	if tk.Reason != "" {
		fmt.Fprintf(w, "Reason    %s\n", tk.Reason)
	}
	if len(tk.After) > 0 {
		fmt.Fprintf(w, "After     %s\n", strings.Join(tk.After, ", "))
	}
	if len(tk.Inputs) > 0 {
		var size int64
		for _, in := range tk.Inputs {
			size += in.Size
		}
		fmt.Fprintf(w, "Inputs    %d files (%s)\n", len(tk.Inputs), sizeString(size))
	}
	if len(tk.Outputs) > 0 {
		fmt.Fprintf(w, "Outputs   %s\n", strings.Join(tk.Outputs, " "))
	}
	if r := tk.Result; r != nil {
		outcome := fmt.Sprintf("exit %d", r.ExitCode)
		if r.Signal != "" {
			outcome = "killed by " + r.Signal
		}
		if r.CachedFrom != "" {
			fmt.Fprintf(w, "Result    %s, from the action cache: not run; task %s ran it in %s\n", outcome, r.CachedFrom, time.Duration(r.DurationMS)*time.Millisecond)
		} else {
			fmt.Fprintf(w, "Result    %s in %s on node %s\n", outcome, time.Duration(r.DurationMS)*time.Millisecond, r.NodeID)
		}
		for _, o := range r.Outputs {
			fmt.Fprintf(w, "  output  %s  %s  %s\n", o.Path, sizeString(o.Size), o.Digest)
		}
		if len(r.Missing) > 0 {
			fmt.Fprintf(w, "  missing %s (matched no file)\n", strings.Join(r.Missing, " "))
		}
		if r.Log != nil {
			fmt.Fprintf(w, "  log     %s of output kept whole%s: nodemgr task logs %s\n", sizeString(r.Log.Bytes), truncatedNote(r.Log), tk.ID)
		}
		printTail(w, "stdout", r.Stdout)
		printTail(w, "stderr", r.Stderr)
	}
	if len(tk.Failures) > 0 {
		fmt.Fprintln(w, "\nFailures:")
		t := newTable(w, "ATTEMPT", "NODE", "EXIT", "SIGNAL", "REASON", "LOG", "AT")
		for _, f := range tk.Failures {
			t.row(strconv.Itoa(f.Attempt), f.NodeID, strconv.Itoa(f.ExitCode), orDash(f.Signal), f.Reason, logSize(f.Log), f.At.Format(time.RFC3339))
		}
		t.flush()
		fmt.Fprintf(w, "(an attempt's whole output: nodemgr task logs %s --attempt N)\n", tk.ID)
	}
}

// logSize is the size of an attempt's kept log, "tails" when it kept none
// (its output is its tails).
func logSize(l *api.TaskLog) string {
	if l == nil {
		return "tails"
	}
	return sizeString(l.Bytes) + truncatedNote(l)
}

func truncatedNote(l *api.TaskLog) string {
	if l.Truncated {
		return " (cut at the server's --task-log-max)"
	}
	return ""
}

func printTail(w io.Writer, name, s string) {
	if s == "" {
		return
	}
	fmt.Fprintf(w, "--- %s (tail) ---\n%s", name, s)
	if !strings.HasSuffix(s, "\n") {
		fmt.Fprintln(w)
	}
}

func taskCancelCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "cancel TASK", Short: "Cancel a pending, ready or running task, and the tasks that wait for it", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tk, err := clientFor(cmd, e).CancelTask(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "task %s is %s\n", tk.ID, tk.State)
			return nil
		},
	}
}
