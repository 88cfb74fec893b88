package server

import (
	"net/http"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestFiltersTakeAnyCase: list filters take a state or status in any case,
// as people type them (issue 31 item 12), and still refuse what is none.
func TestFiltersTakeAnyCase(t *testing.T) {
	ts := newTestServer(t)
	var su api.Suite
	ts.mustCall(t, http.StatusCreated, ts.admin, "POST", "/v1/suites", api.SuiteSpec{Name: "s", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}, &su)
	var suites api.SuiteList
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites?state=open", nil, &suites)
	if len(suites.Suites) != 1 || suites.Suites[0].ID != su.ID {
		t.Errorf("GET /v1/suites?state=open = %d suites, want the Open one", len(suites.Suites))
	}
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/suites/s/tasks?state=READY", nil, nil)
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes?status=Online", nil, nil)
	ts.mustCall(t, http.StatusBadRequest, ts.admin, "GET", "/v1/suites?state=shut", nil, nil)
}
