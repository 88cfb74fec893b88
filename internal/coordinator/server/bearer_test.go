package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestBearerSchemeAnyCase: the audit's `Authorization: bearer …` answered
// 401. RFC 7235 makes the scheme case-insensitive; every reader of the
// header takes any case: the API, registration and the agents' WebSocket.
func TestBearerSchemeAnyCase(t *testing.T) {
	ts := newTestServer(t)
	_, cred := ts.nodeNamed(t, "n1")
	join := ts.joinToken(t)
	for _, tc := range []struct {
		scheme string
		ok     bool
	}{
		{"Bearer", true},
		{"bearer", true},
		{"BEARER", true},
		{"bEaReR", true},
		{"Basic", false},
		{"Bearer:", false},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			want := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[tc.ok]
			if code := ts.authCall(t, tc.scheme+" "+ts.admin, "GET", "/v1/whoami", ""); code != want {
				t.Errorf("GET /v1/whoami with %q = %d, want %d", tc.scheme, code, want)
			}
			body := `{"machine_id":"m-` + tc.scheme + `","data_dir":"/d","name":"r1","hardware":{"cores":1}}`
			if code := ts.authCall(t, tc.scheme+" "+join, "POST", "/v1/agent/register", body); code != want {
				t.Errorf("POST /v1/agent/register with %q = %d, want %d", tc.scheme, code, want)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/agent/connect",
				&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {tc.scheme + " " + cred}}})
			if c != nil {
				c.Close(websocket.StatusNormalClosure, "")
			}
			if tc.ok && err != nil {
				t.Errorf("connect with %q = %v, want it accepted", tc.scheme, err)
			}
			if !tc.ok && (resp == nil || resp.StatusCode != http.StatusUnauthorized) {
				t.Errorf("connect with %q = %v, want 401", tc.scheme, err)
			}
		})
	}
}

// authCall sends a request with Authorization exactly as given and returns
// the status.
func (ts *testServer) authCall(t *testing.T, authorization, method, path, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authorization)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
