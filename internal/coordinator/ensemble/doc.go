// Package ensemble places ensembles: it decides, for every replica of every
// allocation of an api.EnsembleSpec, which node it goes to, from the nodes'
// books as the server knows them (NodeBooks). It is pure logic — no store,
// no HTTP, no agent calls — so the same input always gives the same Plan,
// and every choice and every refusal says why.
//
// Place is greedy and all or nothing. It places the largest allocations
// first (they are the hardest to fit), and each replica on the best node
// that fits: online, carrying the allocation's tags, among its named nodes
// and groups, with the CPUs, memory, GPUs, disk and ports free after what
// this ensemble's earlier replicas took there, and, for a spread
// allocation, holding no replica of it yet. The policy ranks the nodes
// that fit: binpack takes the fullest first, spread the emptiest; ties go
// by node name. If one replica fits nowhere, Place returns a *NoFitError
// naming the allocation, the replica and what each of the closest nodes
// lacks, and no plan: the caller commits nothing.
//
// The server validates a spec with Validate, calls Place, commits the
// plan's resources node by node (releasing them all if one commit fails),
// then deploys; `ensemble deploy --dry-run` prints the plan.
package ensemble
