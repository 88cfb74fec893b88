package postgres

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

// The dispatch loop's benchmarks are storetest's (dispatch_bench.go),
// which store/sqlite runs too. On the server pgtest starts, fsync is off:
// these measure the store's statements, not a disk.

// BenchmarkRecordHeartbeats: see storetest.BenchRecordHeartbeats.
func BenchmarkRecordHeartbeats(b *testing.B) {
	storetest.BenchRecordHeartbeats(b, open(b, newDatabase(b)))
}

// BenchmarkClaimAndFinish: see storetest.BenchClaimAndFinish.
func BenchmarkClaimAndFinish(b *testing.B) {
	storetest.BenchClaimAndFinish(b, func(b *testing.B) store.Store { return open(b, newDatabase(b)) })
}

// BenchmarkAddTasks: see storetest.BenchAddTasks.
func BenchmarkAddTasks(b *testing.B) {
	storetest.BenchAddTasks(b, open(b, newDatabase(b)))
}

// BenchmarkClaimAndFinishReplicas is BenchmarkClaimAndFinish's small
// batches run by several agents at once (4 per CPU) through two stores on
// one database, as two server replicas do: what SKIP LOCKED claims and
// sharded counts are for. SQLite has no counterpart; compare its tasks/s
// with BenchmarkClaimAndFinish's.
func BenchmarkClaimAndFinishReplicas(b *testing.B) {
	const batch = 16
	ctx := b.Context()
	url := newDatabase(b)
	stores := []*Store{open(b, url), open(b, url)}
	if err := stores[0].CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	for n := range 16 {
		storetest.RegisterNodes(b, stores[0], fmt.Sprintf("n%d", n+1))
	}
	// Each iteration claims a batch and reports it.
	if err := stores[1].AddTasks(ctx, "s1", storetest.BenchTasks("r", b.N*batch)); err != nil {
		b.Fatal(err)
	}
	var agents atomic.Int32
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := agents.Add(1)
		s, node := stores[n%2], fmt.Sprintf("n%d", n)
		for pb.Next() {
			tasks, err := s.ClaimTasks(ctx, "s1", node, batch)
			if err != nil {
				b.Error(err)
				return
			}
			reports := make([]store.Attempt, len(tasks))
			for i, t := range tasks {
				reports[i] = store.Attempt{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeSucceeded,
					Result: api.TaskResult{Stdout: "ok\n", DurationMS: 12}}
			}
			if _, err := s.FinishAttempts(ctx, node, reports, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
}
