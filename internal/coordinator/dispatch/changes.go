package dispatch

import "sync"

// SuiteChanges tells those who wait on a suite (a long-polled GET of it:
// suite wait, suite watch) that it may have changed: tasks added,
// reported, answered from the cache or given back, its state moved. It
// hears this server's changes only; a waiter also looks again now and
// then, for the other servers' (the store is the truth).
type SuiteChanges struct {
	mu    sync.Mutex
	chans map[string]chan struct{} // closed at the suite's next change
}

// Changed returns a channel closed at the suite's next change.
func (c *SuiteChanges) Changed(suiteID string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chans == nil {
		c.chans = map[string]chan struct{}{}
	}
	ch, ok := c.chans[suiteID]
	if !ok {
		ch = make(chan struct{})
		c.chans[suiteID] = ch
	}
	return ch
}

// Notify wakes those waiting on the suites; none named: on every suite.
func (c *SuiteChanges) Notify(suiteIDs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(suiteIDs) == 0 {
		for id, ch := range c.chans {
			close(ch)
			delete(c.chans, id)
		}
		return
	}
	for _, id := range suiteIDs {
		if ch, ok := c.chans[id]; ok {
			close(ch)
			delete(c.chans, id)
		}
	}
}
