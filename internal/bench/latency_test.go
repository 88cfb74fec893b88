package bench

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestRunLatencySmall runs the latency harness on a few tasks, against the
// same binary: every sample ends with a stored result, and both get
// latencies.
func TestRunLatencySmall(t *testing.T) {
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results, err := RunLatency(ctx, LatencyConfig{Binary: bin, Against: bin, Samples: 5, Gap: 20 * time.Millisecond}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d results, want 2: the binary and the one against it", len(results))
	}
	for _, r := range results {
		if r.Samples != 5 || r.P50 <= 0 || r.P99 < r.P50 || r.SeenP50 <= 0 {
			t.Errorf("%+v; want 5 samples with latencies", r)
		}
	}
}

// TestCompareDispatchSmall runs one small case on two binaries (the same
// one twice) and gets a rate for each and their ratio.
func TestCompareDispatchSmall(t *testing.T) {
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results, err := CompareDispatch(ctx, DispatchConfig{Binary: bin, Tasks: 200, CommandTasks: 20, Workers: 2, Prefetches: []int{32}}, bin, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d cases, want 2 (in-process and command at prefetch 32)", len(results))
	}
	for _, r := range results {
		if r.This.PerSecond <= 0 || r.Against.PerSecond <= 0 || r.Ratio <= 0 {
			t.Errorf("%s prefetch %d: %+v; want rates and a ratio", r.Worker, r.Prefetch, r)
		}
	}
}
