// Package workerproto is the wire protocol between a worker pool (the agent,
// internal/node/workerpool) and its worker processes (the public worker package):
// newline-delimited JSON frames over a unix socket.
//
// A worker connects to $NODEMGR_WORKER_SOCKET and says Hello with its ID and
// the one-time token from its environment; the pool answers Ack once the
// worker is registered (and pinned to its cores). Then the worker loops:
// Fetch → Task (or Task with Done: exit) → run it → Report → Fetch ...
// A Fetch may ask for several tasks; they come in one Task frame and are
// run and reported one by one before the next Fetch. The pool may send
// Cancel for a task the worker holds: abandon it if it runs, skip it if it
// has not started, and report it at once. A worker that says so in Hello
// (Release) also answers Release, which takes back tasks it holds and has
// not started, with Released. Anything else is a protocol error, and the
// pool drops a worker that commits one.
package workerproto

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// Version is the protocol version a worker announces in Hello.
const Version = 1

// Environment of a worker process, set by the pool.
const (
	EnvSocket      = "NODEMGR_WORKER_SOCKET" // unix socket to dial
	EnvWorkerID    = "NODEMGR_WORKER_ID"     // 0..count-1, kept across respawns
	EnvToken       = "NODEMGR_WORKER_TOKEN"  // one-time proof of being this spawn
	EnvWorkerCount = "NODEMGR_WORKER_COUNT"
	EnvSuiteID     = "NODEMGR_SUITE_ID"
	EnvSuiteName   = "NODEMGR_SUITE_NAME"
	EnvNodeID      = "NODEMGR_NODE_ID"
	// EnvProcs is the worker's share of the cores it may run on: a Go
	// worker (package worker) runs that many threads of Go code
	// (GOMAXPROCS), the command worker one more, unless GOMAXPROCS says
	// otherwise.
	EnvProcs = "NODEMGR_WORKER_PROCS"
	// EnvRunAs tells the command worker (`nodemgr worker`), which stays
	// the agent's user to look after its tasks' processes, to start each
	// task as this user: "UID:GID" or "UID:GID:G1,G2,..." with the
	// supplementary groups (FormatRunAs). Unset: tasks run as the worker.
	EnvRunAs = "NODEMGR_WORKER_RUN_AS"
	// EnvLogDir is where a worker writes each attempt's full output
	// (package tasklog, <dir>/<task>.<attempt>.log), and EnvLogMax the
	// bytes of output it keeps per attempt. Unset: no full logs, only
	// the tails in the reports.
	EnvLogDir = "NODEMGR_WORKER_LOG_DIR"
	EnvLogMax = "NODEMGR_WORKER_LOG_MAX"
)

// FormatRunAs is the value of EnvRunAs for a user.
func FormatRunAs(uid, gid uint32, groups []uint32) string {
	s := strconv.FormatUint(uint64(uid), 10) + ":" + strconv.FormatUint(uint64(gid), 10)
	if len(groups) == 0 {
		return s
	}
	ids := make([]string, len(groups))
	for i, g := range groups {
		ids[i] = strconv.FormatUint(uint64(g), 10)
	}
	return s + ":" + strings.Join(ids, ",")
}

// ParseRunAs reads an EnvRunAs value.
func ParseRunAs(s string) (uid, gid uint32, groups []uint32, err error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, nil, fmt.Errorf("%s=%q: want UID:GID[:GROUPS]", EnvRunAs, s)
	}
	ids := []string{parts[0], parts[1]}
	if len(parts) == 3 && parts[2] != "" {
		ids = append(ids, strings.Split(parts[2], ",")...)
	}
	nums := make([]uint32, len(ids))
	for i, id := range ids {
		n, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("%s=%q: %q is not an id", EnvRunAs, s, id)
		}
		nums[i] = uint32(n)
	}
	return nums[0], nums[1], nums[2:], nil
}

// Frame operations.
const (
	OpHello  = "hello"  // worker → pool: first frame (Hello)
	OpAck    = "ack"    // pool → worker: hello accepted (Ack)
	OpFetch  = "fetch"  // worker → pool: give me a task (Fetch, optional)
	OpTask   = "task"   // pool → worker: a task, or Done (TaskFrame)
	OpReport = "report" // worker → pool: how the held task ended (Report)
	OpCancel = "cancel" // pool → worker: abandon the running task (Cancel)
	// OpRelease and OpReleased take back tasks a worker holds unstarted
	// (Release), for a worker whose Hello says it answers them.
	OpRelease  = "release"  // pool → worker: give back unstarted tasks (Release)
	OpReleased = "released" // worker → pool: these were not started (Released)
)

// Frame is one line on the socket. Op says which body is set.
type Frame struct {
	Op     string     `json:"op"`
	Fetch  *Fetch     `json:"fetch,omitempty"`
	Hello  *Hello     `json:"hello,omitempty"`
	Ack    *Ack       `json:"ack,omitempty"`
	Task   *TaskFrame `json:"task,omitempty"`
	Report *Report    `json:"report,omitempty"`
	Cancel *Cancel    `json:"cancel,omitempty"`

	Release  *Release  `json:"release,omitempty"`
	Released *Released `json:"released,omitempty"`
}

// Hello introduces a worker.
type Hello struct {
	Version  int    `json:"version"`
	WorkerID int    `json:"worker_id"`
	Token    string `json:"token"`
	PID      int    `json:"pid"`
	// Release says the worker answers Release. An older worker does not
	// say it and is never sent one; an older pool ignores it, so the
	// version stays 1.
	Release bool `json:"release,omitempty"`
}

// Ack accepts a Hello.
type Ack struct {
	WorkerID int `json:"worker_id"`
}

// Fetch asks for up to Max tasks at once (0 or absent: one). A worker
// whose tasks are short takes a few at a time and saves a round trip per
// task. It runs them in order and reports each as soon as it ends, so the
// pool always knows which one is running: the first it holds that is not
// reported yet. It fetches again only once all are reported.
type Fetch struct {
	Max int `json:"max,omitempty"`
}

// TaskFrame answers Fetch: a task to run (and More to run after it, in
// order), or Done when there will be no more and the worker should exit.
type TaskFrame struct {
	Task *api.Task   `json:"task,omitempty"`
	More []*api.Task `json:"more,omitempty"`
	Done bool        `json:"done,omitempty"`
}

// Report is how the worker's task ended. The pool fills in the node, the
// attempt and the finishing time.
type Report struct {
	api.TaskReport
}

// Cancel asks the worker to abandon one attempt of a task. Reason is what
// the pool will report ("timeout", "cancelled"). Attempt says which
// attempt (0: whichever the worker holds): a cancel that crosses the
// attempt's report on the wire must not hit the task's next attempt,
// which the worker may fetch a moment later.
type Cancel struct {
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt,omitempty"`
	Reason  string `json:"reason"`
}

// Release asks the worker to give back the tasks named that it holds
// behind the one it runs and has not started: the server gives them to
// another node. The worker answers at once with Released, and in any
// case before its next Fetch, naming those it dropped: it will neither
// run nor report them, and the pool returns them to the server. One it
// has started, or no longer holds, it leaves out and runs and reports as
// usual. Released may cross the report of the task before them: the pool
// takes it that the first one it names did not start either. Task IDs suffice, without attempts: a worker holds one attempt
// of a task at a time, and a later attempt comes in a Task frame after
// this one.
type Release struct {
	TaskIDs []string `json:"task_ids"`
}

// Released answers Release: the tasks the worker dropped unstarted.
type Released struct {
	TaskIDs []string `json:"task_ids"`
}
