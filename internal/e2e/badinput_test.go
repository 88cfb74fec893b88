package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
)

// call makes a raw HTTP request and returns status and decoded error body.
func call(t *testing.T, method, url, token, body string) (int, api.Error) {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, url, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error
}

func TestBadTokensAreRefused(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	short, err := s.client().CreateToken(ctx, api.CreateTokenRequest{Name: "brief", TTL: "300ms"})
	if err != nil {
		t.Fatal(err)
	}
	join := s.joinToken(t)
	waitFor(t, 5*time.Second, "the short token to expire", func() (bool, string) {
		return time.Now().After(*short.ExpiresAt), ""
	})

	tests := []struct {
		name, token, want string
	}{
		{"missing", "", "missing token"},
		{"unknown", "nmu_doesnotexist", "invalid token"},
		{"garbage", "hello", "wrong kind of token"},
		{"expired", short.Secret, "expired"},
		{"join token as API token", join, "wrong kind of token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, e := call(t, "GET", s.url()+"/v1/nodes", tc.token, "")
			if code != http.StatusUnauthorized || e.Code != "unauthenticated" || !strings.Contains(e.Message, tc.want) {
				t.Errorf("GET /v1/nodes with %s token = %d %+v; want 401 saying %q", tc.name, code, e, tc.want)
			}
		})
	}
	// Health needs no token.
	if code, _ := call(t, "GET", s.url()+"/healthz", "", ""); code != http.StatusOK {
		t.Errorf("GET /healthz = %d, want 200", code)
	}

	// An agent with a bad join token says so and exits.
	a := start(t, "agent", "agent", "--server", s.url(), "--data-dir", t.TempDir(), "--name", "intruder", "--join-token", "nmj_forged")
	if code := a.wait(10 * time.Second); code == 0 {
		t.Errorf("agent with a forged join token exited 0")
	}
	if !strings.Contains(a.output(), "invalid token") {
		t.Errorf("agent output %q does not explain the refusal", a.output())
	}
}

func TestMalformedRequestsNameTheField(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "target")
	join := s.joinToken(t)

	tests := []struct {
		name, method, path, token, body string
		status                          int
		field                           string
	}{
		{"malformed JSON", "PATCH", "/v1/nodes/target", s.token, `{"add_tags": [`, 400, "body"},
		{"unknown field", "PATCH", "/v1/nodes/target", s.token, `{"colour": "red"}`, 400, "colour"},
		{"wrong type", "PATCH", "/v1/nodes/target", s.token, `{"add_tags": "gpu"}`, 400, "add_tags"},
		{"bad tag", "PATCH", "/v1/nodes/target", s.token, `{"add_tags": ["ok", "not ok"]}`, 400, "add_tags[1]"},
		{"bad shutdown mode", "POST", "/v1/nodes/target/shutdown", s.token, `{"mode": "sideways"}`, 400, "mode"},
		{"negative cores", "POST", "/v1/agent/register", join,
			`{"machine_id": "m", "data_dir": "/x", "name": "n", "hardware": {"cores": -1}}`, 400, "hardware.cores"},
		{"relative data dir", "POST", "/v1/agent/register", join,
			`{"machine_id": "m", "data_dir": "x", "name": "n"}`, 400, "data_dir"},
		{"bad ttl", "POST", "/v1/tokens", s.token, `{"ttl": "forever"}`, 400, "ttl"},
		{"negative max uses", "POST", "/v1/join-tokens", s.token, `{"max_uses": -3}`, 400, "max_uses"},
		{"bad role", "POST", "/v1/users", s.token, `{"name": "bob", "groups": {"ml": "Owner"}}`, 400, "groups.ml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, e := call(t, tc.method, s.url()+tc.path, tc.token, tc.body)
			if code != tc.status || e.Field != tc.field || e.Message == "" {
				t.Errorf("%s %s %s = %d %+v; want %d naming field %q", tc.method, tc.path, tc.body, code, e, tc.status, tc.field)
			}
		})
	}
	// Nothing was half-applied: the node is as it was.
	n, _ := nodeByName(t, s, "target")
	if len(n.Tags) != 0 {
		t.Errorf("target tags = %v after rejected patches, want none", n.Tags)
	}
}

func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "innocent")

	// Register a node by hand to get a credential.
	body, _ := json.Marshal(api.RegisterRequest{MachineID: "m-rogue", DataDir: "/rogue", Name: "rogue"})
	req, _ := http.NewRequest("POST", s.url()+"/v1/agent/register", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.joinToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("register: %v %v", err, resp.Status)
	}
	var reg api.RegisterResponse
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()

	frames := []struct{ name, frame, reason string }{
		{"not JSON", `this is not json`, "malformed"},
		{"wrong version", `{"v": 99, "type": "req", "id": 1, "method": "hello"}`, "version"},
		{"unknown type", `{"v": 1, "type": "shout"}`, "type"},
	}
	for _, tc := range frames {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/agent/connect", &websocket.DialOptions{
				HTTPHeader: http.Header{"Authorization": {"Bearer " + reg.Credential}},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if err := c.Write(ctx, websocket.MessageText, []byte(tc.frame)); err != nil {
				t.Fatal(err)
			}
			_, _, err = c.Read(ctx)
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusProtocolError || !strings.Contains(strings.ToLower(ce.Reason), tc.reason) {
				t.Errorf("after %s the server answered %v; want a protocol-error close naming %q", tc.name, err, tc.reason)
			}
		})
	}
	if n, _ := nodeByName(t, s, "innocent"); n.Status != api.StatusOnline || !n.Connected {
		t.Errorf("innocent node is %s connected=%v after another connection misbehaved", n.Status, n.Connected)
	}
	if code, _ := call(t, "GET", s.url()+"/healthz", "", ""); code != 200 {
		t.Errorf("server unhealthy after bad frames: %d", code)
	}
}
