package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// reportSink is the server's side of tasks.report: it records each call's
// batch, and fails the first failFirst calls. With a gate, the first call
// is in flight until the gate closes.
type reportSink struct {
	mu        sync.Mutex
	calls     [][]string
	failFirst int
	failed    int
	gate      chan struct{}
	inFlight  chan struct{} // closed when the first call arrives
	delay     time.Duration // each call takes this long
}

func (k *reportSink) call(_ context.Context, method string, req, resp any) error {
	if method == api.MethodTasksFetch {
		// As many tasks as asked for: t0, t1, ...; and, as the server
		// says then, maybe more (Remaining -1).
		out := resp.(*api.TasksFetched)
		out.Remaining = -1
		for i := range req.(api.TasksFetch).Max {
			out.Tasks = append(out.Tasks, api.Task{ID: fmt.Sprint("t", i)})
		}
		return nil
	}
	if method != api.MethodTasksReport {
		return fmt.Errorf("unexpected %s", method)
	}
	time.Sleep(k.delay)
	if k.gate != nil {
		k.mu.Lock()
		first := len(k.calls) == 0
		k.mu.Unlock()
		if first {
			close(k.inFlight)
			<-k.gate
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failed < k.failFirst {
		k.failed++
		return errors.New("connection lost")
	}
	var ids []string
	for _, r := range req.(api.TasksReport).Reports {
		ids = append(ids, r.TaskID)
	}
	k.calls = append(k.calls, ids)
	return nil
}

// delivered is every task ID received, in order, and how many calls
// carried them.
func (k *reportSink) delivered() (ids []string, calls int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.calls {
		ids = append(ids, c...)
	}
	return ids, len(k.calls)
}

func newTestSource(t *testing.T, k *reportSink) *taskSource {
	t.Helper()
	stopped := make(chan struct{})
	t.Cleanup(func() { close(stopped) })
	return startTaskSource(k.call, stopped, slog.New(slog.NewTextHandler(io.Discard, nil)), "suite-1")
}

func closeSource(t *testing.T, s *taskSource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.close(ctx)
	if ctx.Err() != nil {
		t.Fatal("close did not deliver the reports in time")
	}
}

func checkDelivered(t *testing.T, k *reportSink, n int) int {
	t.Helper()
	ids, calls := k.delivered()
	if len(ids) != n {
		t.Fatalf("%d reports delivered, want %d", len(ids), n)
	}
	for i, id := range ids {
		if want := fmt.Sprint("t", i); id != want {
			t.Fatalf("report %d is %s, want %s: each once, in order", i, id, want)
		}
	}
	return calls
}

// fetch makes the source hand out n tasks, as the pool's fetches do.
func fetch(t *testing.T, s *taskSource, n int) {
	t.Helper()
	if tasks, _, _, err := s.Fetch(t.Context(), n); err != nil || len(tasks) != n {
		t.Fatalf("Fetch(%d) = %d tasks, %v", n, len(tasks), err)
	}
}

// Reports that trickle in from a busy pool share calls: a batch leaves
// when its first report has waited reportLinger, not as soon as the
// previous call is back.
func TestReportsTrickleIntoBatches(t *testing.T) {
	k := &reportSink{delay: 3 * time.Millisecond}
	s := newTestSource(t, k)
	const n = 60
	fetch(t, s, n+1) // one more runs on: the pool is never empty
	start := time.Now()
	for i := range n {
		s.Report(api.TaskReport{TaskID: fmt.Sprint("t", i)})
		time.Sleep(time.Millisecond)
	}
	spread := time.Since(start)
	closeSource(t, s)
	calls := checkDelivered(t, k, n)
	// One call per reportLinger of the time the reports took to come,
	// give or take the first and the last; sending after every returned
	// call would make it about one per report.
	if most := int(spread/reportLinger) + 2; calls > most {
		t.Errorf("%d reports over %v took %d calls, want at most %d", n, spread, calls, most)
	}
}

// Reports queued while a call is in flight leave in full batches at once,
// and close delivers what is left.
func TestReportsFullBatchAndClose(t *testing.T) {
	k := &reportSink{gate: make(chan struct{}), inFlight: make(chan struct{})}
	s := newTestSource(t, k)
	s.Report(api.TaskReport{TaskID: "t0"})
	<-k.inFlight
	const n = 2*maxReportBatch + 7
	for i := 1; i < n; i++ {
		s.Report(api.TaskReport{TaskID: fmt.Sprint("t", i)})
	}
	close(k.gate)
	closeSource(t, s)
	checkDelivered(t, k, n)
	want := []int{1, maxReportBatch, maxReportBatch, n - 1 - 2*maxReportBatch}
	var got []int
	for _, c := range k.calls {
		got = append(got, len(c))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("batches of %v, want %v", got, want)
	}
}

// A failed call is retried with the same reports; none is lost or sent
// twice.
func TestReportsRetried(t *testing.T) {
	k := &reportSink{failFirst: 2}
	s := newTestSource(t, k)
	for i := range 10 {
		s.Report(api.TaskReport{TaskID: fmt.Sprint("t", i)})
	}
	closeSource(t, s)
	checkDelivered(t, k, 10)
	if k.failed != 2 {
		t.Errorf("%d calls failed, want 2", k.failed)
	}
}

// A report lingers for company only when company is likely: others came
// just before it and more are in flight. Otherwise it leaves at once (the
// flusher is not running here, so the flag stays to be seen).
func TestReportUrgency(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name       string
		held       int
		drained    bool
		lastReport time.Time
		pending    int
		urgent     bool
	}{
		{"a lone task on an idle pool", 1, true, time.Time{}, 0, true},
		{"the first report in a while", 5, false, now.Add(-time.Second), 0, true},
		{"a report among many", 5, false, now, 0, false},
		{"the last task, nothing Ready", 1, true, now, 0, true},
		{"the last task, others queued", 1, true, now, 3, true},
		{"the last task held, more Ready", 1, false, now, 0, false},
		{"more queued while busy", 5, true, now, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &taskSource{kick: make(chan struct{}, 1), held: tc.held, drained: tc.drained, lastReport: tc.lastReport}
			for range tc.pending {
				s.pending = append(s.pending, api.TaskReport{})
			}
			s.since = now
			s.Report(api.TaskReport{TaskID: "t"})
			if s.urgent != tc.urgent {
				t.Errorf("urgent = %v, want %v (held %d before, drained %v, last report %v ago)",
					s.urgent, tc.urgent, tc.held, tc.drained, time.Since(tc.lastReport))
			}
		})
	}
}

// A report that lingers goes at once when a fetch finds nothing Ready and
// the pool holds nothing else: no company can come.
func TestEmptyFetchEndsTheLinger(t *testing.T) {
	var fetched []api.Task
	s := &taskSource{kick: make(chan struct{}, 1), held: 2, log: slog.New(slog.DiscardHandler),
		lastReport: time.Now(), call: func(_ context.Context, method string, req, resp any) error {
			resp.(*api.TasksFetched).Tasks = fetched
			return nil
		}}
	s.Report(api.TaskReport{TaskID: "t0"})
	s.Report(api.TaskReport{TaskID: "t1"})
	if s.urgent {
		t.Fatal("urgent after two reports in a row with the last fetch bringing tasks, want lingering")
	}
	fetched = []api.Task{{ID: "t2"}}
	s.Fetch(t.Context(), 1)
	if s.urgent {
		t.Fatal("urgent after a fetch that brought a task, want lingering")
	}
	s.Report(api.TaskReport{TaskID: "t2"})
	fetched = nil
	s.Fetch(t.Context(), 1)
	if !s.urgent {
		t.Error("lingering after a fetch found nothing with nothing held, want urgent")
	}
}

// BenchmarkLoneReport times one report of an otherwise idle pool from
// Report to the server's call: it should not wait out reportLinger.
func BenchmarkLoneReport(b *testing.B) {
	arrived := make(chan struct{}, 1)
	call := func(_ context.Context, method string, req, resp any) error {
		if method == api.MethodTasksFetch {
			resp.(*api.TasksFetched).Tasks = []api.Task{{ID: "t"}}
			return nil
		}
		arrived <- struct{}{}
		return nil
	}
	stopped := make(chan struct{})
	defer close(stopped)
	s := startTaskSource(call, stopped, slog.New(slog.DiscardHandler), "suite-1")
	defer s.close(context.Background())
	var total time.Duration
	for b.Loop() {
		s.Fetch(context.Background(), 1)
		time.Sleep(reportLinger) // idle between tasks
		start := time.Now()
		s.Report(api.TaskReport{TaskID: "t"})
		<-arrived
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/report")
}

// TestFetchesAndReportsSayWhatIsHeld: with a count of the tasks held
// unstarted and a server that takes it, fetches and reports carry it (and
// the suite); to a server that does not, neither says it (it would refuse
// the field).
func TestFetchesAndReportsSayWhatIsHeld(t *testing.T) {
	for _, takes := range []bool{true, false} {
		var mu sync.Mutex
		var fetched, reported []*int
		var reportSuite string
		call := func(_ context.Context, method string, req, resp any) error {
			mu.Lock()
			defer mu.Unlock()
			switch method {
			case api.MethodTasksFetch:
				fetched = append(fetched, req.(api.TasksFetch).Held)
				resp.(*api.TasksFetched).Remaining = -1
			case api.MethodTasksReport:
				r := req.(api.TasksReport)
				reported, reportSuite = append(reported, r.Held), r.SuiteID
			}
			return nil
		}
		stopped := make(chan struct{})
		s := startTaskSource(call, stopped, slog.New(slog.NewTextHandler(io.Discard, nil)), "suite-1")
		s.countUnstarted(func() (int, bool) { return 3, takes })
		s.Fetch(t.Context(), 1)
		s.Report(api.TaskReport{TaskID: "t0", Attempt: 1, Outcome: api.OutcomeSucceeded})
		closeSource(t, s)
		close(stopped)
		mu.Lock()
		if len(fetched) != 1 || len(reported) != 1 {
			t.Fatalf("%d fetches and %d reports, want one of each", len(fetched), len(reported))
		}
		for what, h := range map[string]*int{"fetch": fetched[0], "report": reported[0]} {
			switch {
			case takes && (h == nil || *h != 3):
				t.Errorf("the %s says held %v, want 3", what, h)
			case !takes && h != nil:
				t.Errorf("the %s to a server that does not take it says held %d", what, *h)
			}
		}
		if reportSuite != "suite-1" {
			t.Errorf("the report names suite %q, want suite-1", reportSuite)
		}
		mu.Unlock()
	}
}

// TestFetchWaitsOnlyWhereTheServerParks: a fetch lets the server hold it
// (wait_ms) only when the server's welcome said it parks fetches; older
// servers refuse fields they do not know.
func TestFetchWaitsOnlyWhereTheServerParks(t *testing.T) {
	var waits []int
	call := func(_ context.Context, method string, req, resp any) error {
		if method == api.MethodTasksFetch {
			waits = append(waits, req.(api.TasksFetch).WaitMS)
		}
		return nil
	}
	stopped := make(chan struct{})
	defer close(stopped)
	s := startTaskSource(call, stopped, slog.New(slog.DiscardHandler), "suite-1")
	var parks atomic.Bool
	for _, said := range []bool{false, true} {
		parks.Store(said)
		s.parks = parks.Load
		if _, _, _, err := s.Fetch(context.Background(), 4); err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{0, int(fetchWait / time.Millisecond)}; !slices.Equal(waits, want) {
		t.Errorf("wait_ms sent = %v, want %v (none to a server that does not park)", waits, want)
	}
}
