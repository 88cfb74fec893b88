package ensemble

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// NoFitError says that one replica of an allocation fits on no node, and
// what kept it off each. It is a conflict (HTTP 409): the spec is valid,
// but the nodes' books refuse it now, and it may fit once something is
// freed or a node joins. Nothing of the ensemble was placed.
type NoFitError struct {
	Allocation string
	Replica    int // 1..Count
	Count      int
	// Rejections has every node, the closest to fitting first: those
	// whose constraints allow the replica and that are short of resources
	// only, then by how many reasons keep them off, then by name.
	Rejections []Rejection
}

// Rejection is why one node cannot take a replica.
type Rejection struct {
	NodeID   string
	NodeName string
	// Reasons are phrases that follow the node's name, e.g. "lacks tag
	// ssd" or "has 0.5 of 2 CPUs free (1.5 went to this ensemble)".
	Reasons []string
	kinds   []reasonKind // of Reasons, for the summary of the nodes not shown
}

// shown is how many rejections Error tells in full; the rest it counts by
// their first reason.
const shown = 5

func (e *NoFitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "allocation %s replica %d of %d: no node fits: ", e.Allocation, e.Replica, e.Count)
	if len(e.Rejections) == 0 {
		b.WriteString("there are no nodes")
		return b.String()
	}
	for i, r := range e.Rejections[:min(len(e.Rejections), shown)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(cmp.Or(r.NodeName, r.NodeID) + " " + strings.Join(r.Reasons, " and "))
	}
	rest := e.Rejections[min(len(e.Rejections), shown):]
	if len(rest) == 0 {
		return b.String()
	}
	counts := map[reasonKind]int{}
	for _, r := range rest {
		if len(r.kinds) > 0 {
			counts[r.kinds[0]]++
		}
	}
	kinds := make([]reasonKind, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b reasonKind) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d %s", counts[k], summaries[k])
	}
	noun := "nodes"
	if len(rest) == 1 {
		noun = "node"
	}
	fmt.Fprintf(&b, "; and %d more %s: %s", len(rest), noun, strings.Join(parts, ", "))
	return b.String()
}

// Is makes errors.Is(err, errdefs.ErrConflict) true.
func (e *NoFitError) Is(target error) bool { return target == errdefs.ErrConflict }

// noFit explains why replica r of a fits on no node; cands are a's, as
// its earlier replicas left them (nil for its first). It is the slow
// path: it runs once, when placement has failed.
func (p *planner) noFit(cands []cand, a *alloc, r int) *NoFitError {
	e := &NoFitError{Allocation: a.spec.Name, Replica: r, Count: a.count}
	held := map[int]int{}
	for i := range p.nodes {
		held[i] = p.nodes[i].Held[a.spec.Name]
	}
	for _, c := range cands {
		held[c.i] = c.held
	}
	for i := range p.nodes {
		rs := staticReasons(&p.nodes[i], &a.spec.Placement)
		if a.spec.Placement.Spread && held[i] > 0 {
			rs = append(rs, reason{holdsReplica, "already holds a replica (spread)"})
		}
		rs = append(rs, p.short(i, a)...)
		rej := Rejection{NodeID: p.nodes[i].ID, NodeName: p.nodes[i].Name}
		for _, x := range rs {
			rej.Reasons = append(rej.Reasons, x.text)
			rej.kinds = append(rej.kinds, x.kind)
		}
		e.Rejections = append(e.Rejections, rej)
	}
	statics := func(r Rejection) int {
		n := 0
		for _, k := range r.kinds {
			if k < staticKinds {
				n++
			}
		}
		return n
	}
	slices.SortStableFunc(e.Rejections, func(x, y Rejection) int {
		return cmp.Or(
			cmp.Compare(statics(x), statics(y)),
			cmp.Compare(len(x.kinds), len(y.kinds)),
			strings.Compare(x.NodeName, y.NodeName),
			strings.Compare(x.NodeID, y.NodeID),
		)
	})
	return e
}

// short says what node i lacks for one more replica of a, after what this
// plan took there.
func (p *planner) short(i int, a *alloc) []reason {
	var rs []reason
	left, ports := p.left(i)
	var took use
	if u := p.taken[i]; u != nil {
		took = *u
	}
	note := func(took string) string {
		if took == "0" {
			return ""
		}
		return " (" + took + " went to this ensemble)"
	}
	if left.milliCPU < a.need.milliCPU {
		unit := "CPUs"
		if a.need.milliCPU == 1000 {
			unit = "CPU"
		}
		rs = append(rs, reason{shortCPU, fmt.Sprintf("has %s of %s %s free%s",
			cpus(max(left.milliCPU, 0)), cpus(a.need.milliCPU), unit, note(cpus(took.amount.milliCPU)))})
	}
	if left.memMB < a.need.memMB {
		rs = append(rs, reason{shortMemory, fmt.Sprintf("has %d of %d MB memory free%s",
			max(left.memMB, 0), a.need.memMB, note(fmt.Sprint(took.amount.memMB)))})
	}
	if left.gpus < a.need.gpus {
		unit := "GPUs"
		if a.need.gpus == 1 {
			unit = "GPU"
		}
		rs = append(rs, reason{shortGPU, fmt.Sprintf("has %d of %d %s free%s",
			max(left.gpus, 0), a.need.gpus, unit, note(fmt.Sprint(took.amount.gpus)))})
	}
	if left.diskMB < a.need.diskMB {
		rs = append(rs, reason{shortDisk, fmt.Sprintf("has %d of %d MB disk free%s",
			max(left.diskMB, 0), a.need.diskMB, note(fmt.Sprint(took.amount.diskMB)))})
	}
	if ports >= 0 && ports < a.ports {
		rs = append(rs, reason{shortPorts, fmt.Sprintf("has %d of %d ports free%s",
			ports, a.ports, note(fmt.Sprint(took.ports)))})
	}
	return rs
}
