package ensemble

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
)

// The policies Place ranks the nodes that fit by. Ties go by node name,
// then ID, so a plan never depends on the order the nodes came in.
const (
	// Binpack takes the fullest node that fits first: the fewest GPUs
	// left over (GPU nodes are kept for GPU work), then the fewest CPUs,
	// then the least memory. It is the default: it leaves whole nodes free
	// for large allocations.
	Binpack = "binpack"
	// Spread takes the emptiest node first: the most CPUs left over, then
	// the most memory.
	Spread = "spread"
)

// Policies lists every policy, the default first.
var Policies = []string{Binpack, Spread}

// NodeBooks is one node as the server knows it when it places an
// ensemble: what it is (for the constraints) and what its books have free.
type NodeBooks struct {
	ID     string
	Name   string
	Tags   []string
	Groups []string
	Online bool
	// Free is what the node's books have free now (offered − committed −
	// allocated); a negative or NaN amount counts as none.
	Free api.Resources
	// FreePorts is how many ports the node's allocator has free; negative
	// when the caller does not know, and then ports are not checked.
	FreePorts int
	// Held counts the replicas of this ensemble's allocations the node
	// holds already, by allocation name: when the replicas of a lost node
	// are placed again, a spread allocation does not go where it is.
	Held map[string]int
}

// Plan is where every replica of an ensemble goes, and what to commit on
// each node for it.
type Plan struct {
	Ensemble string
	Policy   string // the policy that ranked, the default filled in
	// Placements has one entry per replica, in the spec's order of
	// allocations, then by replica.
	Placements []Placement
	// Commits has one entry per node that got a replica, by node name
	// then ID: the sum of what its replicas take.
	Commits []Commit
}

// Placement is one replica on its node.
type Placement struct {
	Allocation string // the allocation's name
	Kind       string // api.AllocationContainer or api.AllocationService
	Replica    int    // 1..count
	NodeID     string
	NodeName   string
	Resources  api.Resources // what the replica books
	Ports      int           // host ports it takes from the node's allocator
	// Why says what the choice rests on, e.g. "binpack: leaves 0.5 CPUs,
	// 512 MB memory free; best of 3 nodes that fit".
	Why string
}

// Commit is what a plan takes on one node, to be locked there before
// anything is deployed.
type Commit struct {
	NodeID    string
	NodeName  string
	Resources api.Resources
	Ports     int
	Replicas  int
}

// amount is api.Resources in integers, so that sums are exact: float CPUs
// would drift (0.1 + 0.2 > 0.3) and refuse what fits.
type amount struct {
	milliCPU, memMB, diskMB, gpus int64
}

func toAmount(r api.Resources) amount {
	return amount{schedule.MilliCPUs(r.CPUs), max(r.MemoryMB, 0), max(r.DiskMB, 0), int64(max(r.GPUs, 0))}
}

func (a amount) resources() api.Resources {
	return api.Resources{CPUs: float64(a.milliCPU) / 1000, MemoryMB: a.memMB, DiskMB: a.diskMB, GPUs: int(a.gpus)}
}

func (a amount) add(b amount) amount {
	return amount{a.milliCPU + b.milliCPU, a.memMB + b.memMB, a.diskMB + b.diskMB, a.gpus + b.gpus}
}

func (a amount) sub(b amount) amount {
	return amount{a.milliCPU - b.milliCPU, a.memMB - b.memMB, a.diskMB - b.diskMB, a.gpus - b.gpus}
}

// covers reports whether a is at least b in every dimension.
func (a amount) covers(b amount) bool {
	return a.milliCPU >= b.milliCPU && a.memMB >= b.memMB && a.diskMB >= b.diskMB && a.gpus >= b.gpus
}

// planner holds the books while a plan is made: the nodes as given, and
// what the plan took on each so far, kept only for the nodes it used, so
// that a small ensemble costs little on thousands of nodes.
type planner struct {
	nodes []NodeBooks
	taken map[int]*use // by index in nodes
}

// use is what the plan took on one node.
type use struct {
	amount   amount
	ports    int
	replicas int
}

// left is what node i has free now: its books less what the plan took,
// and its free ports likewise (negative when unknown).
func (p *planner) left(i int) (amount, int) {
	free, ports := toAmount(p.nodes[i].Free), p.nodes[i].FreePorts
	if u := p.taken[i]; u != nil {
		free = free.sub(u.amount)
		if ports >= 0 {
			ports = max(ports-u.ports, 0)
		}
	}
	return free, ports
}

// cand is a node an allocation's constraints allow, with what it has left
// as the allocation's replicas are placed.
type cand struct {
	i     int // in nodes
	left  amount
	ports int // negative: unknown
	held  int // replicas of the allocation it holds (spread)
}

// alloc is one allocation of the spec, normalized.
type alloc struct {
	spec   *api.AllocationSpec
	index  int // in the spec
	count  int
	need   amount
	ports  int
	policy string // the ranking for this allocation
}

// Place decides where every replica of spec goes on nodes, ranking the
// nodes that fit by policy (one of Policies; "" is Binpack). It returns a
// plan for all replicas, or an error and no plan: a *NoFitError (an
// errdefs.ErrConflict) when a replica fits on no node; an ErrInvalid for
// a spec that fails Validate, an unknown policy, or two nodes with one ID
// that the plan would both use. nodes is only read.
func Place(nodes []NodeBooks, spec api.EnsembleSpec, policy string) (Plan, error) {
	p, order, err := newPlanner(nodes, spec, &policy)
	if err != nil {
		return Plan{}, err
	}
	placed := make([][]Placement, len(order))
	for _, a := range order {
		ps, err := p.placeAlloc(a)
		if err != nil {
			return Plan{}, err
		}
		placed[a.index] = ps
	}

	plan := Plan{Ensemble: spec.Name, Policy: policy}
	for _, ps := range placed {
		plan.Placements = append(plan.Placements, ps...)
	}
	used := make([]int, 0, len(p.taken))
	for i := range p.taken {
		used = append(used, i)
	}
	// Commits go by node ID: two nodes with one ID would be one node to
	// the caller, and overcommitted. Only the nodes used are checked, so
	// that a call costs no map of every node.
	slices.SortFunc(used, func(i, j int) int { return cmp.Or(strings.Compare(nodes[i].ID, nodes[j].ID), cmp.Compare(i, j)) })
	for k, i := range used {
		if k > 0 && nodes[used[k-1]].ID == nodes[i].ID {
			return Plan{}, errdefs.Field(fmt.Sprintf("nodes[%d].id", i), "%q is the ID of nodes[%d] too", nodes[i].ID, used[k-1])
		}
		u := p.taken[i]
		plan.Commits = append(plan.Commits, Commit{
			NodeID: nodes[i].ID, NodeName: nodes[i].Name,
			Resources: u.amount.resources(), Ports: u.ports, Replicas: u.replicas,
		})
	}
	slices.SortFunc(plan.Commits, func(a, b Commit) int {
		return cmp.Or(strings.Compare(a.NodeName, b.NodeName), strings.Compare(a.NodeID, b.NodeID))
	})
	return plan, nil
}

// Shortfall places what of spec it can on nodes, as Place would, and
// counts by allocation name the replicas that fit nowhere; an empty map
// means Place would succeed. Each replica is tried once: one that fits
// nowhere leaves the books as they were, so the replicas after it of the
// same allocation fit nowhere either. The server asks the pools for one
// machine per replica counted here.
func Shortfall(nodes []NodeBooks, spec api.EnsembleSpec, policy string) (map[string]int, error) {
	p, order, err := newPlanner(nodes, spec, &policy)
	if err != nil {
		return nil, err
	}
	short := map[string]int{}
	for _, a := range order {
		ps, err := p.placeAlloc(a)
		var nf *NoFitError
		switch {
		case errors.As(err, &nf):
			short[a.spec.Name] = a.count - len(ps)
		case err != nil:
			return nil, err
		}
	}
	return short, nil
}

// newPlanner checks spec and policy (filling in the default) and returns
// a planner over nodes with the allocations in the order they are placed:
// largest first, since they are the hardest to fit and the small ones
// fill the gaps they leave.
func newPlanner(nodes []NodeBooks, spec api.EnsembleSpec, policy *string) (*planner, []*alloc, error) {
	if err := Validate(spec); err != nil {
		return nil, nil, err
	}
	*policy = cmp.Or(*policy, Binpack)
	if !slices.Contains(Policies, *policy) {
		return nil, nil, errdefs.Field("policy", "unknown policy %q; want one of %s", *policy, strings.Join(Policies, ", "))
	}
	allocs := make([]alloc, len(spec.Allocations))
	order := make([]*alloc, len(allocs))
	for i := range spec.Allocations {
		a := &spec.Allocations[i]
		allocs[i] = alloc{spec: a, index: i, count: replicas(*a), need: toAmount(a.Resources), ports: portsPerReplica(*a), policy: *policy}
		if a.Placement.Pack {
			allocs[i].policy = Binpack
		}
		order[i] = &allocs[i]
	}
	slices.SortStableFunc(order, func(a, b *alloc) int {
		return cmp.Or(
			cmp.Compare(b.need.gpus, a.need.gpus),
			cmp.Compare(b.need.milliCPU, a.need.milliCPU),
			cmp.Compare(b.need.memMB, a.need.memMB),
			cmp.Compare(b.need.diskMB, a.need.diskMB),
			cmp.Compare(b.ports, a.ports),
			cmp.Compare(b.count, a.count),
			strings.Compare(a.spec.Name, b.spec.Name),
		)
	})
	return &planner{nodes: nodes, taken: map[int]*use{}}, order, nil
}

// placeAlloc places a's replicas one by one on the best node left for
// each. When a replica fits nowhere it returns those placed before it
// (which stay taken) and a *NoFitError.
func (p *planner) placeAlloc(a *alloc) ([]Placement, error) {
	if a.count == 1 {
		// Most allocations: the best node is found in one pass, with no
		// list of candidates to make.
		var pk pick
		for i := range p.nodes {
			if allows(&p.nodes[i], &a.spec.Placement) {
				c := p.cand(i, a)
				pk.consider(&c, a, p.nodes)
			}
		}
		if !pk.ok {
			return nil, p.noFit(nil, a, 1)
		}
		return []Placement{p.take(&pk.best, a, 1, pk)}, nil
	}
	cands := p.candidates(a)
	placed := make([]Placement, 0, a.count)
	for r := 1; r <= a.count; r++ {
		var pk pick
		best := -1
		for k := range cands {
			if pk.consider(&cands[k], a, p.nodes) {
				best = k
			}
		}
		if best < 0 {
			return placed, p.noFit(cands, a, r)
		}
		placed = append(placed, p.take(&cands[best], a, r, pk))
	}
	return placed, nil
}

// candidates lists the nodes that a's constraints allow whatever their
// books — online, among the named nodes, in one of the groups, carrying
// every tag — with what they have left.
func (p *planner) candidates(a *alloc) []cand {
	out := make([]cand, 0, len(p.nodes))
	for i := range p.nodes {
		if allows(&p.nodes[i], &a.spec.Placement) {
			out = append(out, p.cand(i, a))
		}
	}
	return out
}

// cand is node i as a candidate for a.
func (p *planner) cand(i int, a *alloc) cand {
	c := cand{i: i}
	c.left, c.ports = p.left(i)
	if h := p.nodes[i].Held; a.spec.Placement.Spread && h != nil {
		c.held = h[a.spec.Name]
	}
	return c
}

// take places replica r of a on c, which pk chose, and returns the
// placement.
func (p *planner) take(c *cand, a *alloc, r int, pk pick) Placement {
	c.left = c.left.sub(a.need)
	if c.ports >= 0 {
		c.ports -= a.ports
	}
	c.held++
	u := p.taken[c.i]
	if u == nil {
		u = &use{}
		p.taken[c.i] = u
	}
	u.amount = u.amount.add(a.need)
	u.ports += a.ports
	u.replicas++
	return Placement{
		Allocation: a.spec.Name,
		Kind:       kindOf(*a.spec),
		Replica:    r,
		NodeID:     p.nodes[c.i].ID,
		NodeName:   p.nodes[c.i].Name,
		Resources:  a.need.resources(),
		Ports:      a.ports,
		Why:        why(a, c.left, pk.nfit, pk.tied),
	}
}

// allows is staticReasons without the words, for the hot path; a test
// holds the two to the same answers.
func allows(b *NodeBooks, pl *api.Placement) bool {
	if !b.Online {
		return false
	}
	if len(pl.Nodes) > 0 && !slices.Contains(pl.Nodes, b.ID) && !slices.Contains(pl.Nodes, b.Name) {
		return false
	}
	if len(pl.Groups) > 0 {
		in := false
		for _, g := range pl.Groups {
			if slices.Contains(b.Groups, g) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	for _, t := range pl.Tags {
		if !slices.Contains(b.Tags, t) {
			return false
		}
	}
	return true
}

// reason is one thing that keeps a replica off a node.
type reason struct {
	kind reasonKind
	text string
}

// reasonKind orders the reasons as they are told: the static ones, that
// books never change, first.
type reasonKind int

const (
	offline reasonKind = iota
	notNamed
	notInGroup
	lacksTag
	staticKinds // the kinds before it do not depend on the books
	holdsReplica
	shortCPU
	shortMemory
	shortGPU
	shortDisk
	shortPorts
)

// summaries say, for the nodes an error leaves out, what kept them off.
var summaries = map[reasonKind]string{
	offline:      "offline",
	notNamed:     "not named",
	notInGroup:   "in none of the groups",
	lacksTag:     "lacking tags",
	holdsReplica: "holding a replica (spread)",
	shortCPU:     "short of CPUs",
	shortMemory:  "short of memory",
	shortGPU:     "short of GPUs",
	shortDisk:    "short of disk",
	shortPorts:   "short of ports",
}

// staticReasons says why pl keeps b out whatever its books, all of it.
func staticReasons(b *NodeBooks, pl *api.Placement) []reason {
	var rs []reason
	if !b.Online {
		rs = append(rs, reason{offline, "is offline"})
	}
	if len(pl.Nodes) > 0 && !slices.Contains(pl.Nodes, b.ID) && !slices.Contains(pl.Nodes, b.Name) {
		rs = append(rs, reason{notNamed, "is not one of the named nodes"})
	}
	if len(pl.Groups) > 0 && !slices.ContainsFunc(pl.Groups, func(g string) bool { return slices.Contains(b.Groups, g) }) {
		rs = append(rs, reason{notInGroup, "is in none of the groups " + strings.Join(pl.Groups, ", ")})
	}
	var missing []string
	for _, t := range pl.Tags {
		if !slices.Contains(b.Tags, t) {
			missing = append(missing, t)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		rs = append(rs, reason{lacksTag, "lacks tag " + missing[0]})
	default:
		rs = append(rs, reason{lacksTag, "lacks tags " + strings.Join(missing, ", ")})
	}
	return rs
}

// fits reports whether one more replica of a fits on c now.
func (c *cand) fits(a *alloc) bool {
	if a.spec.Placement.Spread && c.held > 0 {
		return false
	}
	if c.ports >= 0 && c.ports < a.ports {
		return false
	}
	return c.left.covers(a.need)
}

// pick keeps the best of the candidates considered for one replica, how
// many fit, and whether the best tied on the policy with another and won
// by name.
type pick struct {
	best cand
	ok   bool
	nfit int
	tied bool
}

// consider weighs c for one more replica of a, and reports whether it is
// the best so far.
func (pk *pick) consider(c *cand, a *alloc, nodes []NodeBooks) bool {
	if !c.fits(a) {
		return false
	}
	pk.nfit++
	if !pk.ok {
		pk.best, pk.ok = *c, true
		return true
	}
	switch r := rank(a.policy, c.left, pk.best.left); {
	case r < 0:
		pk.best, pk.tied = *c, false
		return true
	case r == 0:
		pk.tied = true // the flag is about the best's rank, whichever node wins
		if byName(&nodes[c.i], &nodes[pk.best.i]) < 0 {
			pk.best = *c
			return true
		}
	}
	return false
}

// rank orders two nodes by what they have left before the replica (the
// replica is the same on both, so the order after is the same), best
// first; 0 for a tie.
func rank(policy string, a, b amount) int {
	if policy == Spread {
		return cmp.Or(cmp.Compare(b.milliCPU, a.milliCPU), cmp.Compare(b.memMB, a.memMB))
	}
	return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.milliCPU, b.milliCPU), cmp.Compare(a.memMB, b.memMB))
}

func byName(a, b *NodeBooks) int {
	return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
}

// why says what placing a replica of a on a node rested on; left is what
// the node has left with the replica.
func why(a *alloc, left amount, nfit int, tied bool) string {
	var b strings.Builder
	b.WriteString(a.policy)
	if a.spec.Placement.Pack {
		b.WriteString(" (pack)")
	}
	fmt.Fprintf(&b, ": leaves %s, %d MB memory", cpuCount(left.milliCPU), left.memMB)
	if a.policy == Binpack && (left.gpus > 0 || a.need.gpus > 0) {
		fmt.Fprintf(&b, ", %s", plural(left.gpus, "GPU"))
	}
	b.WriteString(" free; ")
	if nfit == 1 {
		b.WriteString("the only node that fits")
	} else {
		fmt.Fprintf(&b, "best of %d nodes that fit", nfit)
	}
	if tied {
		b.WriteString("; tied, then by name")
	}
	return b.String()
}

// cpus prints thousandths of a CPU as short as they go: 2, 0.5.
func cpus(m int64) string { return strconv.FormatFloat(float64(m)/1000, 'f', -1, 64) }

// plural prints n with its unit: 1 GPU, 0 GPUs.
func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// cpuCount prints thousandths of a CPU with the unit: 1 CPU, 0.5 CPUs.
func cpuCount(m int64) string {
	if m == 1000 {
		return "1 CPU"
	}
	return cpus(m) + " CPUs"
}
