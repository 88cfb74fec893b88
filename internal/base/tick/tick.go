// Package tick runs a chore at a steady pace until its context ends: the
// shape of every background loop (write heartbeats, look for silent
// agents, close idle suites, collect unused files).
package tick

import (
	"context"
	"time"
)

// Every calls f every d, the first time d from now, until ctx ends. A call
// that takes longer than d delays the next one rather than piling calls
// up.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
