package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestSuiteWatchSaysWhyItWaits: suite watch on a suite that waits prints
// the server's one-line reason, once while it stays the same (a bar that
// does not move said nothing of why; issue 31 item 10).
func TestSuiteWatchSaysWhyItWaits(t *testing.T) {
	const why = "no online node has the tag gpu"
	var polls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := api.Suite{ID: "s-1", SuiteSpec: api.SuiteSpec{Name: "render"}, State: api.SuiteOpen, Counts: api.TaskCounts{Ready: 3}, WaitingReason: why}
		if polls.Add(1) > 3 {
			s.State, s.WaitingReason, s.Counts = api.SuiteComplete, "", api.TaskCounts{Finished: 3}
		}
		json.NewEncoder(w).Encode(s)
	}))
	defer srv.Close()
	code, out, stderr := runEnv(t, map[string]string{"NODEMGR_ADDR": srv.URL, "NODEMGR_TOKEN": "nmu_test"},
		"suite", "watch", "s-1", "--every", "1ms")
	if code != 0 {
		t.Fatalf("suite watch = exit %d: %s", code, stderr)
	}
	if n := strings.Count(out, "waiting: "+why); n != 1 {
		t.Errorf("suite watch printed the reason %d times, want once:\n%s", n, out)
	}
}
