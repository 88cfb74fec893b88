package postgres

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

// The benchmarks that store/sqlite has, of the same shape and names, so
// that one run compares the two:
//
//	go test -run '^$' -bench 'ClaimAndFinish|AddTasks|RecordHeartbeats' ./internal/coordinator/store/sqlite ./internal/coordinator/store/postgres
//
// On the server pgtest starts, fsync is off: these measure the store's
// statements, not a disk.

// BenchmarkRecordHeartbeats measures one batch the size a busy coordinator
// writes each second.
func BenchmarkRecordHeartbeats(b *testing.B) {
	const nodes = 5000
	ctx := b.Context()
	s := open(b, newDatabase(b))
	batch := make([]store.Heartbeat, nodes)
	for i := range batch {
		id := fmt.Sprintf("n%05d", i)
		if _, err := s.CreateNode(ctx, store.Node{ID: id, MachineID: id, DataDir: "/d"}); err != nil {
			b.Fatal(err)
		}
		batch[i] = store.Heartbeat{NodeID: id, AgentState: api.AgentIdle}
	}
	at := time.Now()
	for b.Loop() {
		at = at.Add(time.Second)
		for i := range batch {
			batch[i].At = at
		}
		if err := s.RecordHeartbeats(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(nodes*b.N)/b.Elapsed().Seconds(), "heartbeats/s")
}

// benchTasks are n tasks of a realistic size, with IDs that start with
// prefix.
func benchTasks(prefix string, n int) []store.Task {
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = store.Task{
			ID:   fmt.Sprintf("%s-%07d", prefix, i),
			Spec: api.TaskSpec{Argv: []string{"/usr/bin/fuzz", "--seed", fmt.Sprint(i), "--iterations", "1000"}, Timeout: api.Duration(time.Minute)},
		}
	}
	return tasks
}

// BenchmarkClaimAndFinish measures the dispatch loop: an agent claims
// batches of tasks and reports them done in batches, small ones as a
// lightly loaded agent sends them and large ones as a busy one does.
func BenchmarkClaimAndFinish(b *testing.B) {
	for _, bc := range []struct{ claim, report int }{{1, 1}, {16, 16}, {32, 256}, {256, 256}} {
		b.Run(fmt.Sprintf("claim=%d/report=%d", bc.claim, bc.report), func(b *testing.B) {
			const refill = 50_000
			ctx := b.Context()
			s := open(b, newDatabase(b))
			if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
				b.Fatal(err)
			}
			storetest.RegisterNodes(b, s, "n1")
			added := 0
			var reports []store.Attempt
			for b.Loop() {
				for len(reports) < bc.report {
					tasks, err := s.ClaimTasks(ctx, "s1", "n1", bc.claim)
					if err != nil {
						b.Fatal(err)
					}
					if len(tasks) < bc.claim {
						b.StopTimer()
						if err := s.AddTasks(ctx, "s1", benchTasks(fmt.Sprint(added), refill)); err != nil {
							b.Fatal(err)
						}
						added++
						b.StartTimer()
					}
					for _, t := range tasks {
						reports = append(reports, store.Attempt{
							TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeSucceeded,
							Result: api.TaskResult{ExitCode: 0, Stdout: "ok\n", DurationMS: 12},
						})
					}
				}
				done, err := s.FinishAttempts(ctx, "n1", reports[:bc.report], nil)
				if err != nil || done.Applied != bc.report {
					b.Fatalf("FinishAttempts(%d) = %+v, %v", bc.report, done, err)
				}
				reports = append(reports[:0], reports[bc.report:]...)
			}
			b.ReportMetric(float64(bc.report*b.N)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
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
	if err := stores[1].AddTasks(ctx, "s1", benchTasks("r", b.N*batch)); err != nil {
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

// BenchmarkAddTasks measures one large submission.
func BenchmarkAddTasks(b *testing.B) {
	const n = 10_000
	ctx := b.Context()
	s := open(b, newDatabase(b))
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if err := s.AddTasks(ctx, "s1", benchTasks(fmt.Sprint(i), n)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tasks/s")
}
