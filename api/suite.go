package api

import "time"

// Suite states (Mitosis): Open takes tasks; Closed takes none (closed by hand
// or after a quiet period) and completes when its last task ends; Complete
// and Cancelled are final.
const (
	SuiteOpen      = "open"
	SuiteClosed    = "closed"
	SuiteComplete  = "complete"
	SuiteCancelled = "cancelled"
)

// CPU binding strategies of a worker pool.
const (
	BindRoundRobin = "RoundRobin" // worker i on core i mod len(cores)
	BindExclusive  = "Exclusive"  // disjoint, equal slices of the cores
	BindShared     = "Shared"     // every worker on all the cores
)

// Task states. A task with dependencies is Pending until they all
// finished, then Ready; it is Cancelled, with the reason, when one of them
// fails or is cancelled.
const (
	TaskPending   = "pending"
	TaskReady     = "ready"
	TaskRunning   = "running"
	TaskFinished  = "finished"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// SuiteSpec is what a user submits (nodemgr suite create -f suite.yaml).
type SuiteSpec struct {
	Name           string            `json:"name" yaml:"name"`
	Description    string            `json:"description,omitempty" yaml:"description"`
	Group          string            `json:"group,omitempty" yaml:"group"`
	Tags           []string          `json:"tags,omitempty" yaml:"tags"`
	Labels         map[string]string `json:"labels,omitempty" yaml:"labels"`
	Priority       int               `json:"priority,omitempty" yaml:"priority"`
	WorkerSchedule WorkerSchedule    `json:"worker_schedule" yaml:"worker_schedule"`
	Hooks          Hooks             `json:"hooks,omitempty" yaml:"hooks"`
	// Retry is the suite's retry policy; a task may override its fields.
	Retry *RetryPolicy `json:"retry,omitempty" yaml:"retry"`
	// RunAs is the user of the node that the suite's tasks and hooks run
	// as: a user name or numeric uid. Empty: an unprivileged user the
	// agent keeps for this (nodemgr-task, else nobody). "root" and "agent"
	// (the agent's own user) give them the agent's rights, and only an
	// admin of the suite's group may ask for them.
	RunAs string `json:"run_as,omitempty" yaml:"run_as"`
	// Cache answers the suite's tasks from the action cache: a task whose
	// command, environment, working directory, inputs and outputs (and the
	// suite's worker command, hooks and run_as) equal those of one that
	// succeeded before in the same group is not run again; it gets that
	// run's result and outputs, marked cached. Only for deterministic
	// tasks; a task's own cache field overrides it.
	Cache bool `json:"cache,omitempty" yaml:"cache"`
}

// Privileged RunAs values: the agent's own rights.
const (
	RunAsRoot  = "root"
	RunAsAgent = "agent"
)

// RetryPolicy says when a failed task runs again. Unset fields keep the
// seed's rules: give up after 2 crashes by SIGSEGV/SIGILL/SIGBUS/SIGFPE or
// 3 failures of other kinds, with the server's backoff between attempts.
type RetryPolicy struct {
	// MaxAttempts caps the attempts that may fail (1: never retried);
	// 0 keeps the seed's rule.
	MaxAttempts int `json:"max_attempts,omitempty" yaml:"max_attempts"`
	// FinalExitCodes are exit codes retrying cannot fix (a compiler's
	// syntax error): the task fails at the first of them.
	FinalExitCodes []int `json:"final_exit_codes,omitempty" yaml:"final_exit_codes"`
	// Backoff is the pause before the second attempt, doubled for each
	// further failure up to the server's maximum; 0 is the server's default.
	Backoff Duration `json:"backoff,omitempty" yaml:"backoff"`
}

// WorkerSchedule says how an agent runs the suite's workers.
type WorkerSchedule struct {
	WorkerCount int         `json:"worker_count" yaml:"worker_count"` // 1..256
	CPUBinding  *CPUBinding `json:"cpu_binding,omitempty" yaml:"cpu_binding"`
	// TaskPrefetchCount is the agent's buffer of claimed tasks; nil means 32,
	// 0 means none (every fetch goes to the server).
	TaskPrefetchCount *int `json:"task_prefetch_count,omitempty" yaml:"task_prefetch_count"`
	// WorkerCommand is the worker program; empty means `nodemgr worker`,
	// which runs each task's argv. A program built on the worker package
	// takes tasks in-process instead.
	WorkerCommand []string `json:"worker_command,omitempty" yaml:"worker_command"`
}

// CPUBinding pins workers to cores.
type CPUBinding struct {
	Cores    []int  `json:"cores" yaml:"cores"`
	Strategy string `json:"strategy" yaml:"strategy"` // RoundRobin (default) | Exclusive | Shared
}

// Hooks run once per suite on each agent: prepare before the workers start,
// cleanup after they stop.
type Hooks struct {
	Prepare *Hook `json:"prepare,omitempty" yaml:"prepare"`
	Cleanup *Hook `json:"cleanup,omitempty" yaml:"cleanup"`
}

// Hook is a command with its environment and resources to download first.
type Hook struct {
	Command   []string          `json:"command" yaml:"command"`
	Env       map[string]string `json:"env,omitempty" yaml:"env"`
	Resources []Resource        `json:"resources,omitempty" yaml:"resources"`
	Timeout   Duration          `json:"timeout,omitempty" yaml:"timeout"`
}

// Resource is a file downloaded before a hook runs.
type Resource struct {
	URL  string `json:"url" yaml:"url"`
	Path string `json:"path" yaml:"path"` // relative to the suite's work dir
}

// TaskCounts counts a suite's tasks by state.
type TaskCounts struct {
	Pending int `json:"pending"`
	Ready   int `json:"ready"`
	// Running counts the tasks nodes claimed: those that run, and those
	// held (prefetched) that have not started yet.
	Running   int `json:"running"`
	Finished  int `json:"finished"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	// Held is how many of Running the nodes hold unstarted, as their
	// agents last said (within a second or two); Running - Held run now.
	// Only the server's answers fill it in.
	Held int `json:"held"`
}

// Total is the number of tasks.
func (c TaskCounts) Total() int {
	return c.Pending + c.Ready + c.Running + c.Finished + c.Failed + c.Cancelled
}

// Suite is a stored suite.
type Suite struct {
	ID string `json:"id"`
	SuiteSpec
	State         string   `json:"state"`
	Owner         string   `json:"owner"`
	AssignedNodes []string `json:"assigned_nodes"` // explicit assignment; empty: automatic by tags
	// StoppedNodes are nodes where the suite's pool was stopped by hand;
	// it is not offered to them until assigned to them again.
	StoppedNodes []string   `json:"stopped_nodes,omitempty"`
	Counts       TaskCounts `json:"counts"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	LastTaskAt   time.Time  `json:"last_task_at"`
	// WaitingReason says, in one line, why a suite with Ready tasks is not
	// running anywhere ("no online node has tags [gpu]"); empty when some
	// node runs or could run it. Only GET /v1/suites/{suite} and suite
	// creation fill it in.
	WaitingReason string `json:"waiting_reason,omitempty"`
	// Problems are the latest prepare (or cleanup hook) failures, one per
	// node, newest first.
	// Only GET /v1/suites/{suite} fills them in.
	Problems []SuiteProblem `json:"problems,omitempty"`
}

// Stages of a suite at which an agent can fail it.
const (
	StagePrepare = "prepare" // the work dir, the binding check, the prepare hook and its resources
	StageWorkers = "workers" // starting the worker pool
	// StageCleanup is the cleanup hook after the suite ran on the node:
	// the suite's tasks are done (it may well be Complete), but the node
	// may be left as the hook did not mean to.
	StageCleanup = "cleanup"
)

// SuiteProblem is why a node could not take a suite up, or could not
// clean up after it: sent by the agent with suite.leave, kept by the
// server per (suite, node), newest wins.
type SuiteProblem struct {
	NodeID   string `json:"node_id,omitempty"` // set by the server
	NodeName string `json:"node_name,omitempty"`
	Stage    string `json:"stage"` // StagePrepare | StageWorkers | StageCleanup
	// ExitCode is the hook's exit status; -1 when it did not exit by
	// itself (timed out, killed, never started, a download failed).
	ExitCode int    `json:"exit_code"`
	Reason   string `json:"reason"` // "exit status 3", "timed out after 30s", "download https://x/y: HTTP 404 Not Found"
	// OutputTail is the end of the hook's output (its last lines, at most
	// MaxProblemOutput bytes).
	OutputTail string    `json:"output_tail,omitempty"`
	At         time.Time `json:"at,omitzero"` // set by the server
}

// Bounds on a SuiteProblem as the agent sends it; the server cuts longer ones.
const (
	MaxProblemOutput = 4 << 10
	MaxProblemLines  = 20
	MaxProblemReason = 1 << 10
)

// SuiteList is the body of GET /v1/suites.
type SuiteList struct {
	Suites []Suite `json:"suites"`
	Next   string  `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// TaskSpec is one task as submitted.
type TaskSpec struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Timeout Duration          `json:"timeout,omitempty"`
	// KillGrace is how long the task's processes have between SIGTERM and
	// SIGKILL when it is stopped (timeout, cancel, the worker stopping);
	// 0: DefaultKillGrace.
	KillGrace Duration `json:"kill_grace,omitempty"`
	Priority  int      `json:"priority,omitempty"`
	// Name, when set, is unique in the suite: other tasks name it in
	// After and InputFrom, and task ls finds it.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Inputs are files staged into the task's sandbox at their relative
	// paths, uploaded to the server's blob store first. A task with inputs
	// or outputs runs in a fresh sandbox directory per attempt, and its
	// Workdir is relative to it.
	Inputs []TaskFile `json:"inputs,omitempty"`
	// Outputs are globs, relative to the sandbox, of the files uploaded
	// after the attempt.
	Outputs []string `json:"outputs,omitempty"`
	// After names tasks (by ID or name) that must finish first.
	After []string `json:"after,omitempty"`
	// InputFrom takes outputs of tasks in After as inputs.
	InputFrom []InputFrom `json:"input_from,omitempty"`
	// Retry overrides the suite's retry policy field by field.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Cache overrides the suite's cache for this task: true answers it
	// from the action cache when it can, false always runs it.
	Cache *bool `json:"cache,omitempty"`
}

// Cached says whether the task may be answered from the action cache.
func (t TaskSpec) Cached(su SuiteSpec) bool {
	if t.Cache != nil {
		return *t.Cache
	}
	return su.Cache
}

// TaskFile is a file in a task's sandbox: an input to stage, or an output
// that came back.
type TaskFile struct {
	Path   string `json:"path"`             // relative, slash-separated
	Digest string `json:"digest,omitempty"` // sha256:<hex> of its content
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode,omitempty"` // permission bits; 0: 0644
	// Error says why an input cannot be staged (its dependency produced
	// no such output); the attempt fails with it.
	Error string `json:"error,omitempty"`
}

// InputFrom takes one output (Path) or all outputs (Path "") of a task
// named in After; As renames a single file in this task's sandbox.
type InputFrom struct {
	Task string `json:"task"`
	Path string `json:"path,omitempty"`
	As   string `json:"as,omitempty"`
}

// MaxTaskOutputFiles caps the files one attempt may return as outputs,
// whatever its globs match: an agent uploads no more, a server takes no
// report with more.
const MaxTaskOutputFiles = 1000

// Bounds of TaskSpec.KillGrace.
const (
	DefaultKillGrace = 10 * time.Second
	MaxKillGrace     = 10 * time.Minute
)

// SubmitTasks is the body of POST /v1/suites/{suite}/tasks.
type SubmitTasks struct {
	Tasks []TaskSpec `json:"tasks"`
}

// SubmitResult answers SubmitTasks with the new task IDs, in order.
type SubmitResult struct {
	IDs []string `json:"ids"`
}

// ActionCacheCleared answers DELETE /v1/action-cache and
// /v1/groups/{group}/action-cache.
type ActionCacheCleared struct {
	Deleted int `json:"deleted"` // entries removed; their tasks run again
}

// Task is a stored task.
type Task struct {
	ID      string `json:"id"`
	SuiteID string `json:"suite_id"`
	TaskSpec
	State string `json:"state"`
	// Reason says why a task was cancelled by nodemgr ("dependency
	// k-x (compile-lapi) failed").
	Reason    string        `json:"reason,omitempty"`
	Attempt   int           `json:"attempt"` // attempts started so far
	NodeID    string        `json:"node_id,omitempty"`
	Result    *TaskResult   `json:"result,omitempty"`
	Failures  []TaskFailure `json:"failures"`
	CreatedAt time.Time     `json:"created_at"`
	UpdatedAt time.Time     `json:"updated_at"`
}

// TaskList is the body of GET /v1/suites/{suite}/tasks.
type TaskList struct {
	Tasks []Task `json:"tasks"`
	Next  string `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// TaskResult is how an attempt ended.
type TaskResult struct {
	ExitCode   int    `json:"exit_code"`        // -1 when killed by a signal
	Signal     string `json:"signal,omitempty"` // e.g. SIGSEGV
	Stdout     string `json:"stdout,omitempty"` // tail, capped
	Stderr     string `json:"stderr,omitempty"` // tail, capped
	DurationMS int64  `json:"duration_ms"`
	// Outputs are the files the attempt produced that matched the task's
	// output globs, stored in the blob store.
	Outputs []TaskFile `json:"outputs,omitempty"`
	// Missing are output globs that matched nothing.
	Missing    []string  `json:"missing,omitempty"`
	NodeID     string    `json:"node_id"`
	FinishedAt time.Time `json:"finished_at"`
	// CachedFrom, when set, says that the task did not run: its result is
	// that of the task named here, found in the action cache.
	CachedFrom string `json:"cached_from,omitempty"`
	// Log is the attempt's full output, kept when it was more than the
	// tails hold or the attempt ran long enough to be followed; read it
	// with GET /v1/tasks/{task}/logs.
	Log *TaskLog `json:"log,omitempty"`
}

// TaskLog is an attempt's full output as the server keeps it: stdout and
// stderr in the order they came, gzipped in the blob store.
type TaskLog struct {
	Digest string `json:"digest"` // of the stored log
	Bytes  int64  `json:"bytes"`  // bytes of output it holds, both streams
	// Truncated says the attempt printed more than the server keeps
	// (nodemgr server --task-log-max): the log ends with a notice.
	Truncated bool `json:"truncated,omitempty"`
}

// Logs answers GET /v1/tasks/{task}/logs in these headers; the body is the
// output itself (text/plain).
const (
	// HeaderLogAttempt is the attempt the answer is about.
	HeaderLogAttempt = "Nodemgr-Log-Attempt"
	// HeaderLogComplete is "true" when the attempt has ended and the
	// answer reaches the end of its output: a follower stops there.
	HeaderLogComplete = "Nodemgr-Log-Complete"
)

// TaskFailure records one failed attempt of a task on a node.
type TaskFailure struct {
	Attempt  int       `json:"attempt"`
	NodeID   string    `json:"node_id"`
	ExitCode int       `json:"exit_code"`
	Signal   string    `json:"signal,omitempty"`
	Reason   string    `json:"reason"` // e.g. "worker crashed (SIGSEGV)", "exit status 3", "timeout"
	Stdout   string    `json:"stdout,omitempty"`
	Stderr   string    `json:"stderr,omitempty"`
	Log      *TaskLog  `json:"log,omitempty"` // as TaskResult's
	At       time.Time `json:"at"`
}

// Agent ↔ server methods for suites and tasks.
const (
	MethodSuiteNext   = "suite.next"   // agent: which suite should I run? → SuiteNext
	MethodSuiteLeave  = "suite.leave"  // agent: I am done with this suite → SuiteLeave
	MethodTasksFetch  = "tasks.fetch"  // agent: claim up to Max Ready tasks → TasksFetched
	MethodTasksReport = "tasks.report" // agent: results of attempts (batched)
	MethodTasksReturn = "tasks.return" // agent: give claimed, unstarted tasks back

	MethodWake           = "wake"            // server request: there may be work; ask suite.next or fetch again (SuiteRef)
	NotifySuiteCancelled = "suite.cancelled" // server: stop this suite now (SuiteRef)
	NotifyTaskCancel     = "task.cancel"     // server: kill this task if it runs here (TaskRef)
)

// SuiteNextRequest is the body of suite.next.
type SuiteNextRequest struct {
	// Poll says the agent asks on its own timer (idle_poll), not because
	// it was woken or just became idle: whatever gives an idle node work
	// wakes it, so a poll is a safety net that the server may answer from
	// what it read of the suites a few seconds ago.
	Poll bool `json:"poll,omitempty"`
}

// SuiteNext answers suite.next; Suite is nil when there is nothing to do.
type SuiteNext struct {
	Suite *Suite `json:"suite,omitempty"`
}

// SuiteLeave tells the server the agent left a suite, and why.
type SuiteLeave struct {
	SuiteID string `json:"suite_id"`
	Reason  string `json:"reason"` // complete | prepare-failed: ... | cancelled | shutdown
	// Problem details a prepare failure, or a cleanup hook that failed
	// after the suite ran (Reason is then the one the suite left for);
	// absent otherwise, and from agents older than it.
	Problem *SuiteProblem `json:"problem,omitempty"`
	// Stopped says the suite's pool was stopped by hand on this node
	// (allocation stop): it is not to be offered to the node again until
	// it is assigned to it again.
	Stopped bool `json:"stopped,omitempty"`
}

// TasksFetch asks for up to Max tasks of a suite.
type TasksFetch struct {
	SuiteID string `json:"suite_id"`
	Max     int    `json:"max"`
	// Held is how many of the suite's tasks the node holds and has not
	// started (prefetched), as it asks; absent from older agents.
	Held *int `json:"held,omitempty"`
	// WaitMS lets the server hold a fetch that finds nothing Ready for up
	// to this many milliseconds (it caps it at 2000), and answer it as
	// soon as tasks are Ready: the claim then costs no wake and no second
	// fetch. Sent only to servers whose welcome says ParksFetch.
	WaitMS int `json:"wait_ms,omitempty"`
}

// TasksFetched answers TasksFetch. When fewer than Max tasks came back,
// SuiteState and Remaining (Ready tasks left) let the agent see the suite
// end; after a full batch they are "" and -1 (not looked up: more is likely).
type TasksFetched struct {
	Tasks      []Task `json:"tasks"`
	SuiteState string `json:"suite_state"`
	Remaining  int    `json:"remaining"`
	// Done says the suite will hand out nothing more: it ended, or it is
	// closed with no task ready or running anywhere (a running one may
	// still fail and come back).
	Done bool `json:"done"`
	// Yield, when set, says why the node should leave the suite now: it
	// is no longer the node's to run, or other suites need the node more.
	// No tasks come with it; the node finishes what it holds and asks for
	// its next suite.
	Yield string `json:"yield,omitempty"`
}

// Outcomes of an attempt.
const (
	OutcomeSucceeded = "succeeded" // exit 0
	OutcomeFailed    = "failed"    // non-zero exit, signal, crash or timeout: the server counts it
	OutcomeStopped   = "stopped"   // SIGTERM/SIGINT or agent shutdown: retried, never counted
)

// TaskReport is the result of one attempt.
type TaskReport struct {
	TaskID  string     `json:"task_id"`
	Attempt int        `json:"attempt"`
	Outcome string     `json:"outcome"`
	Crash   bool       `json:"crash,omitempty"` // the worker process died running it
	Reason  string     `json:"reason,omitempty"`
	Result  TaskResult `json:"result"`
}

// TasksReport carries a batch of reports.
type TasksReport struct {
	Reports []TaskReport `json:"reports"`
	// SuiteID and Held: as TasksFetch's, when the reports leave.
	SuiteID string `json:"suite_id,omitempty"`
	Held    *int   `json:"held,omitempty"`
}

// TasksReturn gives claimed tasks back unstarted.
type TasksReturn struct {
	TaskIDs []string `json:"task_ids"`
}

// SuiteRef names a suite in a notification.
type SuiteRef struct {
	SuiteID string `json:"suite_id"`
}

// TaskRef names a task in a notification. Attempt, when set, names the
// attempt meant: an agent leaves any other attempt of the task alone.
type TaskRef struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt,omitempty"`
}
