package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// smallDisk mounts a tmpfs of size bytes in a temp dir and returns it; it
// is unmounted when the test ends. Without root (or mount), the test is
// skipped: it needs a real full disk.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as a full disk")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); this test needs a real full disk", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the disk is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, errdefs.ErrStorageFull) && !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("fill %s: %v", path, err)
			}
			return path
		}
	}
}

func (ts *testServer) healthz(t *testing.T) (int, string) {
	t.Helper()
	ts.Server.health = healthCheck{} // no cached answer
	return ts.call(t, "", "GET", "/healthz", nil, nil)
}

// TestFullDisk puts the server's data dir on a real disk, fills it, and
// checks that: writes answer 503 storage_full saying what to do, /healthz
// answers 503, an agent's report is refused (so the agent keeps it and
// retries) and reads still work; then, with space freed, that everything
// works again and nothing stored before was lost.
func TestFullDisk(t *testing.T) {
	dir := smallDisk(t, 4<<20)
	s, _, admin := newServer(t, dir, Config{})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}

	if code, body := ts.healthz(t); code != http.StatusOK {
		t.Fatalf("GET /healthz before = %d %s, want 200", code, body)
	}
	nodeID, _ := ts.nodeNamed(t, "n1")
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites", api.SuiteSpec{Name: "keep", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	batch := func(n, size int) api.SubmitTasks {
		var b api.SubmitTasks
		for range n {
			b.Tasks = append(b.Tasks, api.TaskSpec{Argv: []string{"echo", strings.Repeat("x", size)}})
		}
		return b
	}
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/keep/tasks", batch(3, 10), nil)
	h := &agentHandler{s: s, sess: hub.NewSession(nodeID, nil, nil)}
	fetched, err := h.tasksFetch(t.Context(), mustJSON(t, api.TasksFetch{SuiteID: su.ID, Max: 1}))
	if err != nil {
		t.Fatal(err)
	}
	claimed := fetched.(api.TasksFetched).Tasks[0]

	filler := fill(t, dir)
	// SQLite may still have room in its WAL: write until it has none.
	var code int
	var body string
	for range 50 {
		if code, body = ts.call(t, admin, "POST", "/v1/suites/keep/tasks", batch(16, 16<<10), nil); code != http.StatusCreated {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("submit tasks on a full disk = %d %s, want 503", code, body)
	}
	var eb api.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil {
		t.Fatal(err)
	}
	if eb.Error.Code != "storage_full" || !strings.Contains(eb.Error.Message, "disk is full: free space on the volume of DATA_DIR ("+dir+")") {
		t.Errorf("full disk error = %+v, want code storage_full and a message naming %s", eb.Error, dir)
	}
	if code, body := ts.healthz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage_full") {
		t.Errorf("GET /healthz on a full disk = %d %s, want 503 storage_full", code, body)
	}

	report := api.TasksReport{Reports: []api.TaskReport{{TaskID: claimed.ID, Attempt: claimed.Attempt, Outcome: api.OutcomeSucceeded}}}
	_, err = h.tasksReport(t.Context(), mustJSON(t, report))
	if !errors.Is(err, errdefs.ErrStorageFull) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("tasks.report on a full disk = %v, want storage full (the agent keeps the report and retries)", err)
	}
	var got api.Suite
	ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/suites/keep", nil, &got) // reads still work

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := ts.healthz(t); code != http.StatusOK {
		t.Errorf("GET /healthz after freeing space = %d %s, want 200", code, body)
	}
	res, err := h.tasksReport(t.Context(), mustJSON(t, report))
	if err != nil {
		t.Fatalf("tasks.report retried after freeing space = %v, want it applied", err)
	}
	if b, _ := json.Marshal(res); !strings.Contains(string(b), `"applied":1`) {
		t.Errorf("tasks.report retried = %s, want applied 1", b)
	}
	ts.mustCall(t, http.StatusCreated, admin, "POST", "/v1/suites/keep/tasks", batch(1, 10), nil)
	ts.mustCall(t, http.StatusOK, admin, "GET", "/v1/suites/keep", nil, &got)
	if got.Counts.Finished != 1 || got.Counts.Total() < 4 {
		t.Errorf("counts after the disk filled and emptied = %+v, want the 3 first tasks kept (1 finished) and the new one", got.Counts)
	}
}

// TestHealthIsCached: /healthz probes the store at most once per healthTTL.
func TestHealthIsCached(t *testing.T) {
	ts := newTestServer(t)
	probes := 0
	ts.backend = countingProber{ts.backend, &probes, nil}
	for range 20 {
		ts.mustCall(t, http.StatusOK, "", "GET", "/healthz", nil, nil)
	}
	if probes != 1 {
		t.Errorf("20 quick GET /healthz probed the store %d times, want 1", probes)
	}
}

// countingProber counts the store's health probes and can fail them.
type countingProber struct {
	store.Store
	n   *int
	err error
}

func (c countingProber) Probe(ctx context.Context) error {
	*c.n++
	if c.err != nil {
		return c.err
	}
	return c.Store.(prober).Probe(ctx)
}

// TestHealthFailsWithTheStore: a probe that fails is 503 with its reason,
// whatever the class of its error.
func TestHealthFailsWithTheStore(t *testing.T) {
	tests := []struct {
		err      error
		wantCode string
	}{
		{fmt.Errorf("probe store: %w", errdefs.ErrStorageFull), "storage_full"},
		{errors.New("probe store: disk I/O error"), "unavailable"},
	}
	for _, tc := range tests {
		ts := newTestServer(t)
		probes := 0
		ts.backend = countingProber{ts.backend, &probes, tc.err}
		code, body := ts.call(t, "", "GET", "/healthz", nil, nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"code": "`+tc.wantCode+`"`) {
			t.Errorf("GET /healthz with probe error %v = %d %s, want 503 %s", tc.err, code, body, tc.wantCode)
		}
	}
}
