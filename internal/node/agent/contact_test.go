package agent

import (
	"testing"
	"time"
)

// The agent stops starting tasks before the server would take them back,
// and never so soon that a late answer to one ping stalls it.
func TestContactLimit(t *testing.T) {
	for _, tc := range []struct {
		reclaim, keepalive, want time.Duration
	}{
		{10 * time.Second, 2 * time.Second, 6 * time.Second},          // the defaults: two pings lost, well inside the grace
		{7 * time.Second, 2 * time.Second, 5 * time.Second},           // a period before the server's grace ends
		{500 * time.Millisecond, 2 * time.Second, 4 * time.Second},    // a tiny grace: two periods at least
		{time.Minute, 100 * time.Millisecond, 300 * time.Millisecond}, // fast pings: three periods
		{0, 2 * time.Second, 0},                                       // a server that does not say: no limit
	} {
		if got := newContact(nil, time.Now(), tc.reclaim, tc.keepalive).limit; got != tc.want {
			t.Errorf("limit for grace %s, keepalive %s = %s, want %s", tc.reclaim, tc.keepalive, got, tc.want)
		}
	}
}
