package dispatch

import (
	"testing"
	"time"
)

func TestRetryWait(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, 60 * time.Second}, {100, 60 * time.Second},
	} {
		if got := retryWait(tc.failures, time.Second, time.Minute); got != tc.want {
			t.Errorf("retryWait(%d, 1s, 1m) = %s, want %s", tc.failures, got, tc.want)
		}
	}
}
