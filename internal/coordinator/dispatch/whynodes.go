package dispatch

import (
	"context"
	"slices"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Why keeps what describes the registered nodes (IDs, names, tags,
// groups, hardware) in memory instead of reading and decoding every node
// row to explain a suite: dashboards and `suite watch` ask over and over,
// and that read grew with the fleet (70 ms with 5,000 nodes on SQLite).
// The copy is as of one store revision (store.Nodes.NodesRevision), which
// the database moves in the same transaction as any write that adds,
// removes or redescribes a node, whichever server made it; each answer
// reads the revision first (one row) and reads the nodes again when it
// moved. So a node registered, retagged or deleted through another
// replica counts at the next answer, as it did when every answer read
// every node, and the dispatcher, which reads the node it hands a suite
// to, and the reason never disagree for longer than they did then.
// Liveness (status, heartbeats) is not kept: who is online comes from the
// sessions, as before.

// registered is what describes the nodes as of revision rev.
type registered struct {
	rev int64
	// nodes are in ListNodes' order (name, then ID) with only the fields
	// NodesRevision covers set: ID, name, tags, labels, groups, hardware.
	nodes   []store.Node
	at      map[string]int   // node ID → index in nodes
	tagged  map[string][]int // tag → indexes of the nodes that have it, ascending
	grouped map[string][]int // group → indexes of its nodes, ascending
}

func newRegistered(rev int64, nodes []store.Node) *registered {
	r := &registered{rev: rev, nodes: make([]store.Node, len(nodes)), at: make(map[string]int, len(nodes)),
		tagged: map[string][]int{}, grouped: map[string][]int{}}
	index := func(m map[string][]int, keys []string, i int) {
		for _, k := range keys {
			if l := m[k]; len(l) == 0 || l[len(l)-1] != i { // a key twice on a node is one entry
				m[k] = append(l, i)
			}
		}
	}
	for i, n := range nodes {
		r.nodes[i] = store.Node{ID: n.ID, Name: n.Name, Tags: n.Tags, Labels: n.Labels, Groups: n.Groups, Hardware: n.Hardware}
		r.at[n.ID] = i
		index(r.tagged, n.Tags, i)
		index(r.grouped, n.Groups, i)
	}
	return r
}

// registered returns the nodes as of the store's revision now, read again
// when it moved. Answers that find the same new revision at once share
// one read; each waits for it only as long as its own ctx lets it.
func (w *Why) registered(ctx context.Context) (*registered, error) {
	rev, err := w.store.NodesRevision(ctx)
	if err != nil {
		return nil, err
	}
	if r := w.known.Load(); r != nil && r.rev == rev {
		return r, nil
	}
	w.mu.Lock()
	if r := w.known.Load(); r != nil && r.rev == rev { // read meanwhile
		w.mu.Unlock()
		return r, nil
	}
	l := w.loading
	if l == nil || l.rev != rev {
		l = &nodesLoad{rev: rev, done: make(chan struct{})}
		w.loading = l
		// Not cancelled with the caller who started it, who may leave
		// while others wait; still bound as a store call of its request.
		go w.load(context.WithoutCancel(ctx), l)
	}
	w.mu.Unlock()
	select {
	case <-l.done:
		return l.r, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// nodesLoad is a read of the nodes under way.
type nodesLoad struct {
	rev  int64
	done chan struct{} // closed when r or err is set
	r    *registered
	err  error
}

func (w *Why) load(ctx context.Context, l *nodesLoad) {
	nodes, err := w.store.ListNodes(ctx, store.NodeFilter{})
	if err == nil {
		// Tagged with the revision read before the nodes: a change
		// between the two reads is in them, and shows as a new revision
		// next time. Kept before loading is cleared, so that a caller
		// that finds no load under way finds its result.
		l.r = newRegistered(l.rev, nodes)
		w.known.Store(l.r)
	}
	l.err = err
	close(l.done)
	w.mu.Lock()
	if w.loading == l {
		w.loading = nil
	}
	w.mu.Unlock()
}

// placed lists, by name, the nodes that su's placement allows. Only the
// nodes that might fit are looked at: the suite's assigned nodes, else
// those with the tag it needs that fewest nodes have, else its group's.
func (r *registered) placed(su store.Suite) []*store.Node {
	candidates, all := r.mayFit(su)
	count := len(candidates)
	if all {
		count = len(r.nodes)
	}
	var out []*store.Node
	for k := range count {
		i := k
		if !all {
			i = candidates[k]
		}
		if n := &r.nodes[i]; Placement(su, *n) == nil {
			out = append(out, n)
		}
	}
	return out
}

// mayFit narrows the nodes su's placement (store.Placement.Fit) may allow
// to a list of indexes, ascending; all when it cannot.
func (r *registered) mayFit(su store.Suite) (candidates []int, all bool) {
	switch p := su.Placement(); {
	case len(p.Assigned) > 0: // these alone, whatever their tags and group
		for _, id := range p.Assigned {
			if i, ok := r.at[id]; ok {
				candidates = append(candidates, i)
			}
		}
		slices.Sort(candidates)
		return slices.Compact(candidates), false
	case len(p.Tags) > 0: // a node needs every tag: any one tag's nodes hold them all
		candidates = r.tagged[p.Tags[0]]
		for _, t := range p.Tags[1:] {
			if l := r.tagged[t]; len(l) < len(candidates) {
				candidates = l
			}
		}
		return candidates, false
	case p.Group != "":
		return r.grouped[p.Group], false
	}
	return nil, true
}
