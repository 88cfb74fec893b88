package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// metricsServer is a server on a SQLite store with a few nodes, suites and
// tasks, and its admin token.
func metricsServer(t *testing.T) (*Server, store.Store, string) {
	t.Helper()
	s, st, admin := newServer(t, "", Config{})
	now := time.Now().UTC()
	for id, status := range map[string]string{"n-a": api.StatusOnline, "n-b": api.StatusOnline, "n-c": api.StatusSuspect} {
		n := store.Node{ID: id, Name: id, MachineID: "m-" + id, DataDir: "/d", Status: status, RegisteredAt: now}
		if _, err := st.CreateNode(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"s-1", "s-2"} {
		su := store.Suite{ID: id, Spec: api.SuiteSpec{Name: id, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
			State: api.SuiteOpen, Owner: "admin", CreatedAt: now}
		if err := st.CreateSuite(t.Context(), su); err != nil {
			t.Fatal(err)
		}
	}
	tasks := make([]store.Task, 6)
	for i := range tasks {
		tasks[i] = store.Task{ID: "k-" + string(rune('a'+i)), Spec: api.TaskSpec{Argv: []string{"true"}}}
	}
	if err := st.AddTasks(t.Context(), "s-1", tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateSuite(t.Context(), "s-2", func(su *store.Suite) error { su.State = api.SuiteCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	return s, st, admin
}

// scrape gets /metrics as an admin would.
func scrape(t *testing.T, h http.Handler, token string) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestMetricsShowWhatOperatorsGraph drives dispatch through an agent's
// handler (claims, reports of each outcome, a return) and checks the
// series a scrape shows: nodes by status, suites and tasks by state, the
// queue, the dispatch counters.
func TestMetricsShowWhatOperatorsGraph(t *testing.T) {
	s, _, admin := metricsServer(t)
	h := &agentHandler{s: s, sess: hub.NewSession("n-a", nil, nil)}
	fetched, err := h.tasksFetch(t.Context(), mustJSON(t, api.TasksFetch{SuiteID: "s-1", Max: 4}))
	if err != nil {
		t.Fatal(err)
	}
	claimed := fetched.(api.TasksFetched).Tasks
	report := func(i int, outcome string) api.TaskReport {
		return api.TaskReport{TaskID: claimed[i].ID, Attempt: claimed[i].Attempt, Outcome: outcome}
	}
	reports := api.TasksReport{Reports: []api.TaskReport{report(0, api.OutcomeSucceeded), report(1, api.OutcomeSucceeded),
		report(2, api.OutcomeFailed)}}
	if _, err := h.tasksReport(t.Context(), mustJSON(t, reports)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tasksReturn(t.Context(), mustJSON(t, api.TasksReturn{TaskIDs: []string{claimed[3].ID}})); err != nil {
		t.Fatal(err)
	}

	scrape(t, s.Handler(), admin) // the request counters need one scrape to show it
	const want = `
# HELP nodemgr_nodes Nodes by status.
# TYPE nodemgr_nodes gauge
nodemgr_nodes{status="offline"} 0
nodemgr_nodes{status="online"} 2
nodemgr_nodes{status="suspect"} 1
# HELP nodemgr_suites Task suites by state.
# TYPE nodemgr_suites gauge
nodemgr_suites{state="cancelled"} 1
nodemgr_suites{state="closed"} 0
nodemgr_suites{state="complete"} 0
nodemgr_suites{state="open"} 1
# HELP nodemgr_tasks Tasks by state; finished, failed and cancelled count how tasks ended.
# TYPE nodemgr_tasks gauge
nodemgr_tasks{state="cancelled"} 0
nodemgr_tasks{state="failed"} 0
nodemgr_tasks{state="finished"} 2
nodemgr_tasks{state="ready"} 4
nodemgr_tasks{state="running"} 0
# HELP nodemgr_task_queue_depth Tasks Ready and waiting for an agent to claim them.
# TYPE nodemgr_task_queue_depth gauge
nodemgr_task_queue_depth 4
# HELP nodemgr_tasks_claimed_total Tasks agents claimed to run (dispatch).
# TYPE nodemgr_tasks_claimed_total counter
nodemgr_tasks_claimed_total 4
# HELP nodemgr_tasks_returned_total Claimed tasks agents gave back unstarted.
# TYPE nodemgr_tasks_returned_total counter
nodemgr_tasks_returned_total 1
# HELP nodemgr_task_reports_total Task attempt reports received from agents, by outcome (succeeded, failed, stopped); repeats included.
# TYPE nodemgr_task_reports_total counter
nodemgr_task_reports_total{outcome="failed"} 1
nodemgr_task_reports_total{outcome="stopped"} 0
nodemgr_task_reports_total{outcome="succeeded"} 2
# HELP nodemgr_task_attempts_finished_total Task attempt reports applied (first commit wins).
# TYPE nodemgr_task_attempts_finished_total counter
nodemgr_task_attempts_finished_total 3
# HELP nodemgr_http_requests_total HTTP requests by route and status code.
# TYPE nodemgr_http_requests_total counter
nodemgr_http_requests_total{code="200",route="GET /metrics"} 1
`
	// The failed task went back to Ready (one failure does not give it up).
	err = testutil.GatherAndCompare(s.metrics.registry, strings.NewReader(want),
		"nodemgr_nodes", "nodemgr_suites", "nodemgr_tasks", "nodemgr_task_queue_depth",
		"nodemgr_tasks_claimed_total", "nodemgr_tasks_returned_total", "nodemgr_task_reports_total",
		"nodemgr_task_attempts_finished_total", "nodemgr_http_requests_total")
	if err != nil {
		t.Error(err)
	}
}

// TestMetricsStoreCountsAreCached checks that scrapes within the TTL do not
// ask the store again, and that one after it does.
func TestMetricsStoreCountsAreCached(t *testing.T) {
	s, st, admin := metricsServer(t)
	online := func(n int) string { return fmt.Sprintf(`nodemgr_nodes{status="online"} %d`, n) }
	if body := scrape(t, s.Handler(), admin); !strings.Contains(body, online(2)) {
		t.Fatalf("first scrape has no %s:\n%s", online(2), grepLines(body, "nodemgr_nodes"))
	}
	n := store.Node{ID: "n-d", Name: "n-d", MachineID: "m-d", DataDir: "/d", Status: api.StatusOnline}
	if _, err := st.CreateNode(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, s.Handler(), admin); !strings.Contains(body, online(2)) {
		t.Errorf("a scrape within the TTL asked the store again:\n%s", grepLines(body, "nodemgr_nodes"))
	}
	s.metrics.stats.Expire()
	if body := scrape(t, s.Handler(), admin); !strings.Contains(body, online(3)) {
		t.Errorf("a scrape after the TTL did not see the new node:\n%s", grepLines(body, "nodemgr_nodes"))
	}
}

// TestLongLivedRoutesStayOutOfTheLatencyHistogram checks that the agent
// WebSocket, which lasts as long as the agent is connected, is counted but
// not timed, while other routes are both.
func TestLongLivedRoutesStayOutOfTheLatencyHistogram(t *testing.T) {
	s, _, admin := metricsServer(t)
	for _, path := range []string{"/v1/agent/connect", "/v1/whoami"} {
		req := httptest.NewRequest("GET", path, nil)
		s.Handler().ServeHTTP(httptest.NewRecorder(), req) // 401: no credential
	}
	body := scrape(t, s.Handler(), admin)
	for _, tc := range []struct {
		line string
		want bool
	}{
		{`nodemgr_http_requests_total{code="401",route="GET /v1/agent/connect"} 1`, true},
		{`nodemgr_http_request_duration_seconds_count{route="GET /v1/agent/connect"}`, false},
		{`nodemgr_http_requests_total{code="401",route="GET /v1/whoami"} 1`, true},
		{`nodemgr_http_request_duration_seconds_count{route="GET /v1/whoami"} 1`, true},
	} {
		if got := strings.Contains(body, tc.line); got != tc.want {
			t.Errorf("scrape has %s = %v, want %v", tc.line, got, tc.want)
		}
	}
}

// TestMetricsPassPromtool lints a scrape with client_golang's linter and,
// where it is installed (.ci/run installs it), `promtool check metrics`.
func TestMetricsPassPromtool(t *testing.T) {
	s, _, admin := metricsServer(t)
	h := &agentHandler{s: s, sess: hub.NewSession("n-a", nil, nil)}
	if _, err := h.tasksFetch(t.Context(), mustJSON(t, api.TasksFetch{SuiteID: "s-1", Max: 1})); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, s.Handler(), admin)
	problems, err := testutil.GatherAndLint(s.metrics.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus); client_golang's lint ran")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics = %v:\n%s", err, out)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func grepLines(body, substr string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestClientThatHangsUpIsNoServerError checks that a request whose client
// went away is dropped, not answered 500: it is no failure of the server's,
// and must not show as a 5xx in the metrics (users end `logs -f` with ^C).
func TestClientThatHangsUpIsNoServerError(t *testing.T) {
	s, _, admin := metricsServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := httptest.NewRequest("GET", "/v1/nodes", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+admin)
	rec := httptest.NewRecorder()
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("a request whose client hung up panicked with %v, want http.ErrAbortHandler (drop the connection)", p)
			}
		}()
		s.Handler().ServeHTTP(rec, req)
	}()
	if rec.Code == http.StatusInternalServerError {
		t.Errorf("a request whose client hung up was answered %d %s", rec.Code, rec.Body)
	}
	body := scrape(t, s.Handler(), admin)
	if want := `nodemgr_http_requests_total{code="499",route="GET /v1/nodes"} 1`; !strings.Contains(body, want) {
		t.Errorf("scrape has no %s:\n%s", want, grepLines(body, "GET /v1/nodes"))
	}
}
