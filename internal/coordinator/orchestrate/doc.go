// Package orchestrate keeps pools of machines sized to demand: the
// orchestrator seed 000 named and never built. A pool (api.PoolSpec) says
// which machines to make (a template on a provider, or candidates the
// scheduler ranks) and for which work (the tags, labels and groups its
// agents get). Each round the orchestrator reads the demand — suites with
// Ready tasks that the online nodes do not serve, and ensembles whose
// replicas fit on no node (one machine per such replica) — and the pools'
// machines, and acts on the difference:
//
//   - scale up: store the machine and its deployment (the intent) before
//     the provider is called, provision it with owner labels, bootstrap
//     the agent through an executor (a static binary, a config with a
//     single-use join token bound to the deployment), and wait for the
//     agent to register: requested → provisioning → bootstrapping → ready;
//   - replace: a provider call that fails during a launch is retried with
//     back-off (not a refusal for want of capacity); a launch that still
//     fails, or whose agent does not register within the bootstrap
//     timeout, is destroyed (or left to the sweep while its provider does
//     not answer), stops counting against max, its candidate backs off
//     exponentially, and the next candidate serves in the round that the
//     failure wakes;
//   - scale down: a ready machine that ran no suite, service or container
//     for the idle timeout (and is older than the minimum age) is drained
//     with a graceful shutdown, destroyed and its node forgotten:
//     draining → terminating → gone;
//   - converge after a crash: resources carry the owner labels, so a
//     machine the provider made but the store did not record is found and
//     destroyed, and a launch cut off by a restart is replaced.
//
// The loop is level-triggered (STYLE.md 15): every step reads the stored
// state, writes the next state before its side effect, and is safe to
// repeat. Every decision is a pool event with its reason, so "why is it
// waiting?" has an answer. The server supplies what only it knows through
// the Cluster interface; this package does not import the server.
package orchestrate
