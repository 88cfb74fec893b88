package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestGetSuiteWaitsForAChange: a GET with ?wait= and the ETag of the
// answer it has comes back as soon as the suite changes (here: a task
// submitted), with a new ETag; with no change, 304 once the wait is over;
// a wait that is not a duration within a minute is refused, naming it.
func TestGetSuiteWaitsForAChange(t *testing.T) {
	ts := newTestServer(t)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "w", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	get := func(query, etag string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", ts.http.URL+"/v1/suites/"+su.ID+query, nil)
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := ts.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	first, _ := get("", "")
	etag := first.Header.Get("ETag")
	if first.StatusCode != http.StatusOK || etag == "" {
		t.Fatalf("GET = %d with ETag %q, want 200 with one", first.StatusCode, etag)
	}

	start := time.Now()
	if resp, _ := get("?wait=300ms", etag); resp.StatusCode != http.StatusNotModified || time.Since(start) < 300*time.Millisecond {
		t.Errorf("GET ?wait=300ms of an unchanged suite = %d after %s, want 304 after the wait", resp.StatusCode, time.Since(start))
	}

	go func() {
		time.Sleep(200 * time.Millisecond)
		ts.call(t, ts.admin, "POST", "/v1/suites/"+su.ID+"/tasks", api.SubmitTasks{Tasks: []api.TaskSpec{{Argv: []string{"true"}}}}, nil)
	}()
	start = time.Now()
	resp, body := get("?wait=30s", etag)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag || !strings.Contains(body, `"ready": 1`) {
		t.Errorf("GET ?wait=30s across a submit = %d, ETag %q (was %q), body %s; want 200, a new ETag, 1 ready", resp.StatusCode, resp.Header.Get("ETag"), etag, body)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the waiting GET came back %s after the submit, want at once", waited)
	}

	if resp, body := get("?wait=2h", etag); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "wait") {
		t.Errorf("GET ?wait=2h = %d %s, want 400 naming wait", resp.StatusCode, body)
	}
}
