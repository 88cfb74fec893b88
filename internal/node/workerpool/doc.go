// Package workerpool runs a task suite's workers on the agent's machine.
//
// A Pool spawns Config.Workers processes of Config.Command, each pinned to
// its cores (see api.CPUBinding), and serves them tasks over a unix socket
// in Config.Dir (protocol: internal/node/workerproto; the worker side is the
// public worker package). Tasks come from a Source, the agent's link to the
// server, and are prefetched into a small buffer so that a worker's fetch
// is answered locally; results go back through Source.Report.
//
// The pool watches each worker with a goroutine blocked in Wait, so a death
// is seen at once: the task the worker held is reported (crashed with its
// signal or exit status, or stopped if it was a SIGTERM/SIGINT the pool
// sent), and the
// worker is started again, with a growing delay if it keeps dying young. A
// worker that breaks the protocol is killed and replaced, and its task goes
// back to the front of the buffer. Task timeouts and cancellations ask the
// worker to abandon the task and kill it if it does not within a grace.
//
// Every task the pool takes from its Source ends in exactly one Report or
// one Return (unstarted tasks given back when the pool stops, or for
// another node: Release).
package workerpool
