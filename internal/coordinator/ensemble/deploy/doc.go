// Package deploy runs the ensembles that package ensemble places (seed
// 004): it deploys a plan all or nothing, lets an ensemble that fits
// nowhere wait for the machines pools start for it, restores the replicas
// of a lost node elsewhere, and says how each replica runs.
//
// A deploy takes three steps, all or nothing:
//
//  1. place: the nodes' books (those the caller may write to, online)
//     go to ensemble.Place, which gives a replica → node plan or says
//     which allocation fit nowhere and what was short;
//  2. commit: every replica's resources are locked on its node first, so
//     that nothing else takes them while the ensemble deploys;
//  3. deploy: each replica's container or service runs from its
//     commitment, the allocations in the order written, each told where
//     the ones before it answer (NODEMGR_ALLOC_<NAME>_ADDR, _HOST, _PORT).
//
// A failure at any step undoes everything made so far: workloads deleted,
// commitments released, and the ensemble is stored failed with the reason.
//
// The Runner holds no HTTP: it declares what it needs of the store
// (Store), of the nodes' agents, which only the server reaches (Agents),
// and of the pools (Pools); the server's handlers decode, authorize and
// answer around it.
package deploy
