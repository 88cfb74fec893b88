package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestHTTPEdges: the answers at the edge of the API that the audit found
// wrong.
func TestHTTPEdges(t *testing.T) {
	ts := newTestServer(t)

	t.Run("wrong method is 405 with Allow", func(t *testing.T) {
		resp, _ := ts.send(t, ts.admin, "PUT", "/v1/suites", "", nil)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, POST" {
			t.Errorf("PUT /v1/suites = %d, Allow %q; want 405, Allow \"GET, POST\"", resp.StatusCode, resp.Header.Get("Allow"))
		}
		if code, _ := ts.call(t, ts.admin, "GET", "/v1/nosuch", nil, nil); code != http.StatusNotFound {
			t.Errorf("GET /v1/nosuch = %d, want 404", code)
		}
		if code, _ := ts.call(t, ts.admin, "DELETE", "/v1/nodes/n1/resources", nil, nil); code != http.StatusMethodNotAllowed {
			t.Errorf("POST on a GET-only pattern with wildcards = %d, want 405", code)
		}
	})

	t.Run("NUL in a copy path is 400", func(t *testing.T) {
		code, body := ts.call(t, ts.admin, "GET", "/v1/deployments/d1/files?path=/etc/pass%00wd", nil, nil)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field": "path"`) {
			t.Errorf("copy from a path with NUL = %d %s, want 400 naming path", code, body)
		}
	})

	t.Run("integers past int64 are not wrapped", func(t *testing.T) {
		body := `{"name": "big", "worker_schedule": {"worker_count": 9223372036854775808}}`
		resp, b := ts.send(t, ts.admin, "POST", "/v1/suites", "", strings.NewReader(body))
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(b, "-9223372036854775808") || !strings.Contains(b, "worker_count") {
			t.Errorf("worker_count 2^63 = %d %s, want 400 naming worker_count, no negative number", resp.StatusCode, b)
		}
	})

	t.Run("oversized body is 413", func(t *testing.T) {
		big := `{"name": "` + strings.Repeat("x", maxBody) + `"}`
		resp, _ := ts.send(t, ts.admin, "POST", "/v1/suites", "", strings.NewReader(big))
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("POST /v1/suites of %d bytes = %d, want 413", len(big), resp.StatusCode)
		}
	})
}
