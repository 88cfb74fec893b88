package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// BenchmarkWaitingReason measures a suite's waiting reason as dashboards
// and `suite watch` poll it, on a fleet of 1, 1,000 and 5,000 registered
// nodes in a SQLite store. Every tenth node's agent is connected, busy
// with another suite; every tenth, offset by five, is offline and tagged
// gpu. Each suite has Ready tasks and waits:
//
//   - tags: it needs gpu, which no online node has ("no online node has
//     tags [gpu] (offline ones that would: ...)");
//   - busy: it needs nothing, and every online node is busy ("all N
//     eligible nodes are busy with other suites (...)").
//
// why/ times Why.WaitingReason; get/ times GET /v1/suites/{suite} with the
// server's reason cache emptied before each call, as when the suite's
// Ready count changes between polls. Each reports its median as p50-ns.
func BenchmarkWaitingReason(b *testing.B) {
	for _, size := range []int{1, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			s, st, admin := benchFleet(b, size)
			suites := map[string]api.SuiteSpec{
				"tags": {Name: "tags", Tags: []string{"gpu"}, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
				"busy": {Name: "busy", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
			}
			for _, name := range []string{"tags", "busy"} {
				su := benchSuite(b, st, suites[name])
				b.Run("why/"+name, func(b *testing.B) {
					want, err := s.dispatcher.Why.WaitingReason(b.Context(), su)
					if err != nil || want == "" {
						b.Fatalf("WaitingReason(%s) = %q, %v, want a reason", name, want, err)
					}
					var took []time.Duration
					for b.Loop() {
						su.Counts.Ready++ // a changing suite: nothing may hang on its counts
						t0 := time.Now()
						got, err := s.dispatcher.Why.WaitingReason(b.Context(), su)
						took = append(took, time.Since(t0))
						if err != nil || got != want {
							b.Fatalf("WaitingReason(%s) = %q, %v, want %q", name, got, err, want)
						}
					}
					reportMedian(b, took)
				})
				b.Run("get/"+name, func(b *testing.B) {
					h := s.Handler()
					var took []time.Duration
					for b.Loop() {
						s.reasons = dispatch.ReasonCache{} // a miss, as when Ready changed
						req := httptest.NewRequestWithContext(b.Context(), "GET", "/v1/suites/"+name, nil)
						req.Header.Set("Authorization", "Bearer "+admin)
						rec := httptest.NewRecorder()
						t0 := time.Now()
						h.ServeHTTP(rec, req)
						took = append(took, time.Since(t0))
						if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"waiting_reason"`) {
							b.Fatalf("GET /v1/suites/%s = %d %s, want 200 with a waiting reason", name, rec.Code, rec.Body)
						}
					}
					reportMedian(b, took)
				})
			}
		})
	}
}

// benchFleet is a bootstrapped server over a SQLite store holding size
// nodes, as BenchmarkWaitingReason describes them.
func benchFleet(b *testing.B, size int) (*Server, store.Store, string) {
	b.Helper()
	dir := b.TempDir()
	st, err := sqlite.Open(b.Context(), filepath.Join(dir, "nodemgr.db"), discardLog())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	s, err := New(Config{DataDir: dir}, st, discardLog())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	admin, _, err := Bootstrap(b.Context(), st, dir)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range size {
		n := store.Node{ID: fmt.Sprintf("n-%05d", i), Name: fmt.Sprintf("node-%05d", i), MachineID: fmt.Sprintf("m-%05d", i),
			DataDir: "/d", Hardware: api.Hardware{Cores: 8}, Status: api.StatusOffline, RegisteredAt: now}
		if i%10 == 5 {
			n.Tags = []string{"gpu"}
		}
		if i%10 == 0 {
			n.Status = api.StatusOnline
		}
		if _, err := st.CreateNode(b.Context(), n); err != nil {
			b.Fatal(err)
		}
		if i%10 == 0 {
			sess := hub.NewSession(n.ID, nil, nil)
			sess.Beat(now, api.AgentExecuting, "s-elsewhere")
			s.hub.Add(sess)
		}
	}
	return s, st, admin
}

// benchSuite stores an Open suite of spec with a Ready task.
func benchSuite(b *testing.B, st store.Store, spec api.SuiteSpec) store.Suite {
	b.Helper()
	su := store.Suite{ID: "s-" + spec.Name, Spec: spec, State: api.SuiteOpen, Owner: "admin", CreatedAt: time.Now().UTC()}
	if err := st.CreateSuite(b.Context(), su); err != nil {
		b.Fatal(err)
	}
	if err := st.AddTasks(b.Context(), su.ID, []store.Task{{ID: "k-" + spec.Name, Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		b.Fatal(err)
	}
	su, err := st.GetSuite(b.Context(), su.ID)
	if err != nil {
		b.Fatal(err)
	}
	return su
}

// reportMedian reports the median of took as p50-ns.
func reportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
}
