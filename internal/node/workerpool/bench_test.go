package workerpool

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/node/workerproto"
	"github.com/nodemgr/nodemgr/worker"
)

// BenchmarkInProcessWorkerFetch measures one task's round trips through
// the socket (fetch → task, report) with the worker package running in
// this process in place of slot 0's (idle) process. The source answers at
// once, so with prefetch every fetch is served from the buffer.
func BenchmarkInProcessWorkerFetch(b *testing.B) {
	for _, prefetch := range []int{32, 0} {
		b.Run(fmt.Sprintf("prefetch=%d", prefetch), func(b *testing.B) {
			src := newSource(tasks("t", b.N, "ok")...)
			p := start(b, config(b, "idle", 1, prefetch), src)
			waitFor(b, 20*time.Second, "the slot's process to start", func() bool { return p.Stats().Alive == 1 })
			p.mu.Lock()
			token := p.slots[0].token
			p.mu.Unlock()
			b.Setenv(workerproto.EnvSocket, p.sock)
			b.Setenv(workerproto.EnvWorkerID, strconv.Itoa(0))
			b.Setenv(workerproto.EnvToken, token)

			b.ReportAllocs()
			b.ResetTimer()
			err := worker.Run(context.Background(), func(context.Context, worker.Task) worker.Result { return worker.Result{} })
			b.StopTimer()
			if err != nil {
				b.Fatalf("worker.Run = %v", err)
			}
			st := p.Stats()
			p.Stop(false) // the idle process need not linger
			if err := p.wait(b, 20*time.Second); err != nil {
				b.Fatalf("Run = %v", err)
			}
			if st.Reported != b.N {
				b.Fatalf("reported %d tasks, want %d", st.Reported, b.N)
			}
			b.ReportMetric(float64(st.FetchLatency.P50.Nanoseconds())/1e3, "fetch-p50-µs")
			b.ReportMetric(float64(st.FetchLatency.P99.Nanoseconds())/1e3, "fetch-p99-µs")
		})
	}
}
