// Package registry keeps records of one kind by name, safe for use from
// several goroutines: drivers register theirs from init, the rest look
// them up by name or list them in the order people read them. The
// provider and executor registries (drivers/provision, drivers/execute)
// are two.
package registry

import (
	"cmp"
	"maps"
	"slices"
	"sync"
)

// Registry holds records of type R by name.
type Registry[R any] struct {
	key     func(R) (name string, order int)
	mu      sync.Mutex
	records map[string]R
}

// New returns an empty registry whose records key names and orders
// (lower first in lists; names break ties).
func New[R any](key func(R) (name string, order int)) *Registry[R] {
	return &Registry[R]{key: key, records: map[string]R{}}
}

// Add registers r unless a record of its name is there already, or one
// that clashes with it says so (clash may be nil); it says whether r was
// added.
func (g *Registry[R]) Add(r R, clash func(old R) bool) bool {
	name, _ := g.key(r)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.records[name]; dup {
		return false
	}
	for _, old := range g.records {
		if clash != nil && clash(old) {
			return false
		}
	}
	g.records[name] = r
	return true
}

// Get returns the record of name.
func (g *Registry[R]) Get(name string) (R, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.records[name]
	return r, ok
}

// Find returns a record that match holds for.
func (g *Registry[R]) Find(match func(R) bool) (R, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range g.records {
		if match(r) {
			return r, true
		}
	}
	var none R
	return none, false
}

// All lists the records in their order.
func (g *Registry[R]) All() []R {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := slices.Collect(maps.Values(g.records))
	slices.SortFunc(rs, func(a, b R) int {
		an, ao := g.key(a)
		bn, bo := g.key(b)
		return cmp.Or(cmp.Compare(ao, bo), cmp.Compare(an, bn))
	})
	return rs
}

// Names lists the records' names in their order.
func (g *Registry[R]) Names() []string {
	rs := g.All()
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i], _ = g.key(r)
	}
	return names
}
