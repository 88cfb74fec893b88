// Package clocktest is a clock for tests: it stands still until told to
// move, and is safe to read and move from several goroutines.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a settable clock; its Now fits where code takes a
// func() time.Time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock set to a fixed moment, the same in every test.
func New() *Clock { return &Clock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
