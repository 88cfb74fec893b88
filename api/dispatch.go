package api

import "math"

// Fair dispatch between the agents serving one suite.
//
// The server caps each tasks.fetch at the node's fair share of the suite's
// unfinished tasks, and when a node runs out while another holds more than
// its share unstarted, it asks the holder to give some back: the holder's
// pool returns up to Count of its unstarted tasks (buffered, or queued to
// a worker behind the one it runs) with tasks.return, and the server wakes
// the others to claim them.
//
// It is a request, not a notification: notifications are stored and
// replayed after a reconnect, but a giveback is a hint about this moment,
// stale once the connection that held the tasks is gone (the server then
// reclaims them anyway).
const MethodTasksGiveback = "tasks.giveback" // server request: TasksGiveback → TasksGivenBack

// TasksGiveback asks an agent to return up to Count tasks of the suite that
// it has buffered and not started.
type TasksGiveback struct {
	SuiteID string `json:"suite_id"`
	Count   int    `json:"count"`
}

// TasksGivenBack answers TasksGiveback: how many tasks the agent is
// returning (0 when it runs another suite or holds none unstarted). They
// reach the server with tasks.return; of those a worker holds queued, only
// the ones it turns out not to have started, so possibly fewer.
type TasksGivenBack struct {
	Returned int `json:"returned"`
}

// WorkersOn is how many workers a node with hardware hw runs for the
// schedule: its WorkerCount, or, where it leaves that to the node (0), one
// per CPU the agent may use: the cores of an exclusive binding, else its
// cgroup quota rounded up, else its cores. The agent sizes its pool by it,
// and the server weighs a node's fair share of a suite by it.
func (ws WorkerSchedule) WorkersOn(hw Hardware) int {
	switch {
	case ws.WorkerCount > 0:
		return ws.WorkerCount
	case ws.CPUBinding != nil && ws.CPUBinding.Strategy == BindExclusive:
		return max(1, len(ws.CPUBinding.Cores))
	case hw.CPULimit > 0:
		return max(1, int(math.Ceil(hw.CPULimit)))
	}
	return max(1, hw.Cores)
}
