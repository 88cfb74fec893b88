package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryRunsUntilTheContextEnds: the chore runs on each tick, not at
// once, and Every returns once the context ends, calling it no more.
func TestEveryRunsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		Every(ctx, 5*time.Millisecond, func() {
			if calls.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("chore ran %d times, want 3 (it stops with the context)", got)
	}
}

// TestEveryWaitsForTheFirstTick: nothing runs before the first period.
func TestEveryWaitsForTheFirstTick(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	ran := false
	Every(ctx, time.Hour, func() { ran = true })
	if ran {
		t.Error("the chore ran before its first period passed")
	}
}

// TestFromStartsAtOnce: with no first delay the chore runs at once, long
// before its period.
func TestFromStartsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan struct{}, 1)
	go From(ctx, 0, time.Hour, func() {
		select {
		case ran <- struct{}{}:
		default:
		}
	})
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("From with no first delay did not run the chore at once")
	}
}
