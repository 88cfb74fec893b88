// Package capacity keeps a node's resource books on the agent side.
//
// Every workload on a node — a suite's worker pool, a service, a container —
// is an allocation holding CPUs, memory, disk, GPUs (by index) and ports. A
// node offers a share (10–90 %) of the capability it registered when it was
// onboarded; a commitment locks resources for a while before a workload is
// placed and expires by itself. Free is offered − committed − allocated; an
// allocation is also checked against the memory and disk the machine really
// has free, since other programs share it. What does not fit is refused,
// all or nothing, with a *ShortError that says what is short.
//
// The agent keeps one Ledger, written to a JSON state file on every change so
// the books survive a restart; the server shows them with
// `nodemgr node resources`. The ledger records ports; internal/node/portalloc
// hands them out.
package capacity
