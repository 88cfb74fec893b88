package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// The dispatch loop's benchmarks, which both stores' tests run under the
// same names, so that one run compares the two:
//
//	go test -run '^$' -bench 'ClaimAndFinish|AddTasks|RecordHeartbeats' ./internal/coordinator/store/sqlite ./internal/coordinator/store/postgres

// BenchRecordHeartbeats measures one batch the size a busy coordinator
// writes each second, on a new store s.
func BenchRecordHeartbeats(b *testing.B, s store.Store) {
	const nodes = 5000
	ctx := b.Context()
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

// BenchTasks are n tasks of a realistic size, with IDs that start with
// prefix.
func BenchTasks(prefix string, n int) []store.Task {
	tasks := make([]store.Task, n)
	for i := range tasks {
		tasks[i] = store.Task{
			ID:   fmt.Sprintf("%s-%07d", prefix, i),
			Spec: api.TaskSpec{Argv: []string{"/usr/bin/fuzz", "--seed", fmt.Sprint(i), "--iterations", "1000"}, Timeout: api.Duration(time.Minute)},
		}
	}
	return tasks
}

// BenchClaimAndFinish measures the dispatch loop: an agent claims batches
// of tasks and reports them done in batches, small ones as a lightly
// loaded agent sends them and large ones as a busy one does. open gives
// each sub-benchmark a new store.
func BenchClaimAndFinish(b *testing.B, open func(b *testing.B) store.Store) {
	for _, bc := range []struct{ claim, report int }{{1, 1}, {16, 16}, {32, 256}, {256, 256}} {
		b.Run(fmt.Sprintf("claim=%d/report=%d", bc.claim, bc.report), func(b *testing.B) {
			const refill = 50_000
			ctx := b.Context()
			s := open(b)
			if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
				b.Fatal(err)
			}
			RegisterNodes(b, s, "n1")
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
						if err := s.AddTasks(ctx, "s1", BenchTasks(fmt.Sprint(added), refill)); err != nil {
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

// BenchAddTasks measures one large submission, on a new store s.
func BenchAddTasks(b *testing.B, s store.Store) {
	const n = 10_000
	ctx := b.Context()
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if err := s.AddTasks(ctx, "s1", BenchTasks(fmt.Sprint(i), n)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tasks/s")
}
