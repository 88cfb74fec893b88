package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// An explicit count of 0 is refused, not taken for one machine; only a
// request without count means one.
func TestProvisionCount(t *testing.T) {
	ts := newTestServer(t)
	for _, tc := range []struct {
		body string
		want string // the field the 400 names
	}{
		{`{"template": "web", "provider": "docker", "count": 0}`, "count"},
		{`{"template": "web", "provider": "docker", "count": -1}`, "count"},
		{`{"template": "web", "provider": "docker", "count": 101}`, "count"},
		{`{"provider": "docker"}`, "template"}, // count left out: one, so the next check speaks
	} {
		code, body := ts.call(t, ts.admin, "POST", "/v1/deployments", json.RawMessage(tc.body), nil)
		if code != http.StatusBadRequest || !strings.Contains(body, `"`+tc.want) {
			t.Errorf("POST /v1/deployments %s = %d %s, want 400 naming %s", tc.body, code, body, tc.want)
		}
	}
}
