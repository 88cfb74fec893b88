package orchestrate

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Demand is a suite with Ready tasks, as the server sees it.
type Demand struct {
	SuiteID     string
	Suite       string // its name
	Priority    int
	Ready       int      // tasks waiting to run
	WorkerCount int      // its workers per node
	Tags        []string // a node needs all of them
	Group       string   // "" or the group whose nodes may run it
	Cores       int      // cores its cpu_binding needs a node to have; 0 any
	// Serving counts online nodes that run it now or may take it up at
	// once (connected, eligible and free).
	Serving int

	// Ensemble, when set, names an ensemble waiting for machines, and the
	// demand is one of its allocations (Suite is "ENSEMBLE/ALLOCATION"):
	// Ready counts its replicas that fit on no node, WorkerCount is 1
	// (each asks for a machine of its own), and a pool serves it only when
	// its machines hold one replica's CPUs and MemoryMB and its agents are
	// in one of Groups (when set).
	Ensemble string
	CPUs     float64
	MemoryMB int64
	Groups   []string
}

// Wants is how many nodes the suite asks for: one per worker_count Ready
// tasks, rounded up.
func (d Demand) Wants() int {
	wc := max(d.WorkerCount, 1)
	return (d.Ready + wc - 1) / wc
}

// serves reports whether a pool's agents may run the suite: they carry its
// tags, are in its group, and have its cores (when the pool's machines
// have a known size).
func serves(p poolView, d Demand) bool {
	spec := p.spec
	for _, t := range d.Tags {
		if !slices.Contains(spec.Tags, t) {
			return false
		}
	}
	if d.Group != "" && !slices.Contains(spec.Groups, d.Group) {
		return false
	}
	if len(d.Groups) > 0 && !slices.ContainsFunc(d.Groups, func(g string) bool { return slices.Contains(spec.Groups, g) }) {
		return false
	}
	if p.cpus > 0 && d.CPUs > p.cpus || p.memoryMB > 0 && d.MemoryMB > p.memoryMB {
		return false
	}
	return d.Cores == 0 || p.cpus == 0 || float64(d.Cores) <= p.cpus
}

// poolView is what the planner knows of one pool.
type poolView struct {
	spec     api.PoolSpec
	live     []store.PoolMachine // not gone or failed
	cpus     float64             // size of the machine it would make next (its best candidate); 0 unknown
	memoryMB int64
	// connected are the nodes of its ready machines whose agent is
	// connected.
	connected map[string]bool
}

// launching counts machines being made: requested, provisioning or
// bootstrapping (what max_launching caps).
func (p poolView) launching() int {
	n := 0
	for _, m := range p.live {
		switch m.State {
		case api.MachineRequested, api.MachineProvisioning, api.MachineBootstrapping:
			n++
		}
	}
	return n
}

// onTheWay is the capacity already coming: machines being made, and ready
// ones whose agent has not connected yet (the demand does not count them
// as serving).
func (p poolView) onTheWay() int {
	n := p.launching()
	for _, m := range p.live {
		if m.State == api.MachineReady && !p.connected[m.NodeID] {
			n++
		}
	}
	return n
}

// counted are the machines that count against max and the limits: every
// live one but those being drained or terminated.
func (p poolView) counted() []store.PoolMachine {
	var out []store.PoolMachine
	for _, m := range p.live {
		if m.State != api.MachineDraining && m.State != api.MachineTerminating {
			out = append(out, m)
		}
	}
	return out
}

// room is how many more machines of the next size the pool may have, and
// if none, which limit stops it.
func (p poolView) room() (int, string) {
	counted := p.counted()
	n := p.spec.Max - len(counted)
	limit := fmt.Sprintf("at max %d machines", p.spec.Max)
	var cpus float64
	var mem int64
	for _, m := range counted {
		cpus += m.CPUs
		mem += m.MemoryMB
	}
	if p.spec.MaxCPUs > 0 && p.cpus > 0 {
		if byCPU := int((p.spec.MaxCPUs - cpus + 1e-9) / p.cpus); byCPU < n {
			n, limit = byCPU, fmt.Sprintf("at its CPU limit (%g of max_cpus %g used; a machine has %g)", cpus, p.spec.MaxCPUs, p.cpus)
		}
	}
	if p.spec.MaxMemoryMB > 0 && p.memoryMB > 0 {
		if byMem := int((p.spec.MaxMemoryMB - mem) / p.memoryMB); byMem < n {
			n, limit = byMem, fmt.Sprintf("at its memory limit (%d of max_memory_mb %d MiB used; a machine has %d MiB)", mem, p.spec.MaxMemoryMB, p.memoryMB)
		}
	}
	if n < 0 {
		n = 0
	}
	return n, limit
}

// plan is what one reconcile round decides for a pool.
type plan struct {
	add     int      // machines to start now (before max_launching)
	demand  []string // which suites asked, for events and pool show
	wanted  int      // machines demand asks of this pool beyond what is on the way
	limited string   // the limit that cut add short, if one did
	serving map[string]bool
}

// planPools shares the demand out among the pools. Suites go in priority
// order; each first uses machines already on their way in pools that
// serve it (so nothing is counted twice), then asks those pools for more,
// in poolOrder, up to each pool's room. A pool below min asks for the
// difference whatever the demand. A paused pool is asked for nothing: its
// machines on their way still count, and the demand goes to the next pool.
func planPools(pools []poolView, demands []Demand) map[string]*plan {
	sort.SliceStable(demands, func(i, j int) bool { return demands[i].Priority > demands[j].Priority })
	slices.SortFunc(pools, poolOrder)
	plans := map[string]*plan{}
	onway := map[string]int{}
	room := map[string]int{}
	limit := map[string]string{}
	for _, p := range pools {
		plans[p.spec.Name] = &plan{serving: map[string]bool{}}
		onway[p.spec.Name] = p.onTheWay()
		room[p.spec.Name], limit[p.spec.Name] = p.room()
		if p.spec.Paused {
			room[p.spec.Name], limit[p.spec.Name] = 0, "paused (nodemgr pool resume "+p.spec.Name+")"
		}
		// min first: machines below it are wanted whatever the demand.
		if short := p.spec.Min - len(p.counted()); short > 0 {
			n := min(short, room[p.spec.Name])
			plans[p.spec.Name].add += n
			room[p.spec.Name] -= n
			plans[p.spec.Name].demand = append(plans[p.spec.Name].demand, fmt.Sprintf("min %d", p.spec.Min))
		}
	}
	for _, d := range demands {
		need := d.Wants() - d.Serving
		if need <= 0 {
			continue
		}
		var servers []poolView
		for _, p := range pools {
			if serves(p, d) {
				servers = append(servers, p)
			}
		}
		for _, p := range servers {
			pl := plans[p.spec.Name]
			pl.serving[d.Suite] = true
			pl.demand = append(pl.demand, d.line())
			take := min(need, onway[p.spec.Name])
			onway[p.spec.Name] -= take
			need -= take
		}
		for _, p := range servers {
			if need <= 0 {
				break
			}
			pl := plans[p.spec.Name]
			pl.wanted += need
			n := min(need, room[p.spec.Name])
			if n < need && pl.limited == "" {
				pl.limited = limit[p.spec.Name]
			}
			pl.add += n
			room[p.spec.Name] -= n
			need -= n
		}
	}
	return plans
}

// poolOrder is the order pools are asked for machines: higher priority
// first, then the cheaper (by the lowest known price among their
// candidates; a pool with none after priced ones), then by name.
func poolOrder(a, b poolView) int {
	ap, aKnown := lowestPrice(a.spec)
	bp, bKnown := lowestPrice(b.spec)
	switch {
	case a.spec.Priority != b.spec.Priority:
		return cmp.Compare(b.spec.Priority, a.spec.Priority)
	case aKnown != bKnown:
		if aKnown {
			return -1
		}
		return 1
	case ap != bp:
		return cmp.Compare(ap, bp)
	}
	return strings.Compare(a.spec.Name, b.spec.Name)
}

// lowestPrice is the lowest known price among a pool's candidates.
func lowestPrice(spec api.PoolSpec) (float64, bool) {
	var low float64
	known := false
	for _, c := range Candidates(spec) {
		if c.Price != nil && *c.Price >= 0 && (!known || *c.Price < low) {
			low, known = *c.Price, true
		}
	}
	return low, known
}

// line is the demand in a few words, for events and pool show.
func (d Demand) line() string {
	if d.Ensemble != "" {
		return fmt.Sprintf("ensemble %s: %d replicas fit on no node", d.Suite, d.Ready)
	}
	return fmt.Sprintf("suite %s: %d ready, %d per node, %d serving", d.Suite, d.Ready, max(d.WorkerCount, 1), d.Serving)
}

// demandLine is a plan's demand in one line.
func (pl *plan) demandLine() string {
	if len(pl.demand) == 0 {
		return "no demand"
	}
	return strings.Join(pl.demand, "; ")
}
