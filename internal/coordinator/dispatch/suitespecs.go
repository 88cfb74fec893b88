package dispatch

import (
	"sync"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// maxSuiteSpecs bounds suiteSpecs; when full it starts over, which costs
// one store read per suite submitted to next.
const maxSuiteSpecs = 4096

// suiteSpecs keeps suites by ID for ResolveSuiteSpec: their ID, owner and
// spec, which never change once a suite is made (suites are not deleted
// either).
type suiteSpecs struct {
	mu sync.Mutex
	m  map[string]store.Suite
}

func (c *suiteSpecs) get(id string) (store.Suite, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	su, ok := c.m[id]
	return su, ok
}

func (c *suiteSpecs) put(su store.Suite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSuiteSpecs {
		c.m = make(map[string]store.Suite)
	}
	// Only what never changes: a caller must not read an old state or
	// count from here as if it were current.
	c.m[su.ID] = store.Suite{ID: su.ID, Spec: su.Spec, Owner: su.Owner, CreatedAt: su.CreatedAt}
}
