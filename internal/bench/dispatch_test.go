package bench

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"
)

// TestRunDispatchSmall runs the dispatch harness on a few hundred tasks:
// every case completes, rates and latencies come out, and the in-process
// workers left their samples.
func TestRunDispatchSmall(t *testing.T) {
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results, base, err := RunDispatch(ctx, DispatchConfig{Binary: bin, Tasks: 300, CommandTasks: 30, Workers: 2, Prefetches: []int{32, 0}}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 || base.PerSecond <= 0 {
		t.Fatalf("got %d cases and baseline %+v; want 4 cases and a spawn rate", len(results), base)
	}
	for _, r := range results {
		if r.PerSecond <= 0 || r.Elapsed <= 0 {
			t.Errorf("%s prefetch %d: %+v; want a rate", r.Worker, r.Prefetch, r)
		}
		if r.Worker == "in-process" && (r.FetchP50 <= 0 || r.FetchP99 < r.FetchP50) {
			t.Errorf("in-process prefetch %d: worker gap p50 %v p99 %v; want samples", r.Prefetch, r.FetchP50, r.FetchP99)
		}
		if r.AgentFetchP50 <= 0 {
			t.Errorf("%s prefetch %d: no agent-side fetch latency", r.Worker, r.Prefetch)
		}
	}
}

// A count of 0 tasks leaves its kind of worker out: a rate over no task
// printed -Inf and NaN.
func TestDispatchCasesLeaveOutNoTasks(t *testing.T) {
	for _, tc := range []struct {
		cfg  DispatchConfig
		want []dispatchKind
	}{
		{DispatchConfig{Tasks: 10, CommandTasks: 5}, []dispatchKind{{"in-process", 10}, {"command", 5}}},
		{DispatchConfig{Tasks: 10}, []dispatchKind{{"in-process", 10}}},
		{DispatchConfig{CommandTasks: 5}, []dispatchKind{{"command", 5}}},
	} {
		if got := dispatchCases(tc.cfg); !slices.Equal(got, tc.want) {
			t.Errorf("dispatchCases(%+v) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
