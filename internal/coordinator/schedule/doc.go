// Package schedule chooses where a machine comes from: given what the work
// needs from one machine (a Request: CPUs, memory, tags, arch, policy) and
// the ways there are to get one (Candidates: a template rendered for a
// provider, offered by a pool, with what the caller has observed of it),
// it filters out the candidates that cannot serve — unavailable, backing
// off after failures, wrong arch, too small, lacking a tag, over their
// pool's quota — and ranks the rest by the request's policy (cheapest,
// fastest, spread, binpack, prefer-local).
//
// It is pure logic: no store, no clock, no I/O. The caller gathers the
// candidates and their observed state (boot times, machines alive,
// backoffs, quota usage) and passes the time in, so the same input always
// gives the same answer, and every answer says why.
//
// Two callers:
//
//   - The orchestrator's pools call Choose (or Explain, to record the whole
//     decision as an event) each time a pool needs one more machine; a
//     candidate that fails goes into backoff, and the next call falls back
//     to the next one.
//   - `nodemgr schedule explain --cpus 2 --memory-mb 2048 --tag linux
//     [--policy P]` prints Explain's verdicts: every candidate, feasible or
//     not and why, in rank order.
package schedule
