package api

// Fair dispatch between the agents serving one suite.
//
// The server caps each tasks.fetch at the node's fair share of the suite's
// unfinished tasks, and when a node runs out while another holds more than
// its share unstarted, it asks the holder to give some back: the holder's
// pool returns up to Count of its buffered, unstarted tasks with
// tasks.return, and the server wakes the others to claim them.
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
// reach the server with tasks.return.
type TasksGivenBack struct {
	Returned int `json:"returned"`
}
