package dispatch

import (
	"fmt"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// reasonTTL is how long a suite's waiting reason is reused. Finding it
// reads the store (the nodes' revision, the suite's problems) and walks
// the agents connected here, and dashboards and `suite show --watch` ask
// for the same suite over and over; a reason a couple of seconds old is
// still the truth for a person reading it.
const reasonTTL = 2 * time.Second

// ReasonCache keeps recent waiting reasons by suite.
type ReasonCache struct {
	mu sync.Mutex
	m  map[string]cachedReason
}

type cachedReason struct {
	key    string // what the reason depends on in the suite itself
	reason string
	at     time.Time
}

// Get returns su's reason from the cache when it is fresh and the suite's
// state and Ready count are the same, else computes and keeps it.
func (c *ReasonCache) Get(su store.Suite, compute func() (string, error)) (string, error) {
	key := fmt.Sprintf("%s/%d/%v", su.State, su.Counts.Ready, su.Counts.Running > 0)
	now := time.Now()
	c.mu.Lock()
	if r, ok := c.m[su.ID]; ok && r.key == key && now.Sub(r.at) < reasonTTL {
		c.mu.Unlock()
		return r.reason, nil
	}
	c.mu.Unlock()
	reason, err := compute()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 10_000 {
		c.m = map[string]cachedReason{} // bounded: forget all rather than track age
	}
	c.m[su.ID] = cachedReason{key: key, reason: reason, at: now}
	return reason, nil
}
