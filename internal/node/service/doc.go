// Package service runs nodee-style supervised services on one node: long-
// running processes started from installed artifacts, each named by a
// coordinate instance.service.user.cell and living in its runtime dir
// <prefix>/runtime/<cell>/<user>/<service>/<instance>.
//
// The agent hosts a Supervisor. It exposes Start, Stop, Drain, Restart,
// Remove, Get, List and Logs on its local API, lists Summaries in the
// node's presence (OnChange tells it when to publish again), and asks
// UsedBy before it removes an artifact.
//
// Services outlive the agent. Each runs in a session of its own with its
// output appended straight to <runtime dir>/logs/service.log, so nothing
// ties it to the agent's process. Every change is written to a record in
// the state dir before it is reported; a new Supervisor over the same
// state dir re-adopts the processes that still run (recognised by pid and
// start time, watched with a pidfd), restarts those that died while no
// agent watched them, and finishes stops that were cut short.
//
// Each service is kept running as its restart policy says, with a
// back-off and a limit on quick deaths, and its log is rotated by size.
package service
