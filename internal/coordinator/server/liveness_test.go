package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// fakeAgent connects to the server at url as the node with credential
// cred and says hello as an idle one-core machine.
func fakeAgent(t *testing.T, url, cred string) *websocket.Conn {
	t.Helper()
	c, _ := helloAt(t, url, cred, api.Hello{State: api.AgentIdle, Hardware: api.Hardware{Cores: 1}})
	return c
}

// helloAt connects to the server at url as the node with credential cred,
// says hello h and returns the connection (closed at the end of the test
// at the latest) and the welcome.
func helloAt(t *testing.T, url, cred string, h api.Hello) (*websocket.Conn, api.Welcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/v1/agent/connect",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() }) // an open one would hold the test server's Close
	body, _ := json.Marshal(h)
	f, _ := json.Marshal(api.Frame{V: 1, Type: api.FrameRequest, ID: 1, Method: api.MethodHello, Body: body})
	if err := c.Write(ctx, websocket.MessageText, f); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read the welcome: %v", err)
		}
		var r api.Frame
		json.Unmarshal(b, &r)
		if r.Type != api.FrameResponse || r.ID != 1 {
			continue
		}
		if r.Error != nil {
			t.Fatalf("hello refused: %+v", *r.Error)
		}
		var w api.Welcome
		if err := json.Unmarshal(r.Body, &w); err != nil {
			t.Fatal(err)
		}
		return c, w
	}
}

// serve runs s (its loops included) on a loopback port until the test
// ends, and returns its URL.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	<-s.ready // the handler may serve other listeners from here on
	return "http://" + ln.Addr().String()
}

// A connection that ends without a goodbye starts the check at once: the
// node is suspect, and offline once the reconnect grace is over — not
// after the heartbeat timeout (an hour here).
func TestLostConnectionIsCheckedAtOnce(t *testing.T) {
	s, st, admin := newServer(t, "", Config{HeartbeatInterval: 10 * time.Minute, OfflineAfter: time.Hour,
		ReconnectGrace: 300 * time.Millisecond})
	url := serve(t, s)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	id, cred := ts.nodeNamed(t, "lost")
	c := fakeAgent(t, url, cred)
	c.CloseNow() // the agent died: no goodbye

	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		n, err := st.GetNode(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		last = n.Status + ": " + n.StatusReason
		if n.Status == api.StatusOffline {
			if !strings.Contains(n.StatusReason, "connection lost") {
				t.Errorf("offline reason %q, want it to say the connection was lost", n.StatusReason)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("node still %s after the reconnect grace", last)
}

// After a restart, the server's start counts as every node's last
// heartbeat: an agent that is still backing off from the outage (here it
// comes back after half the offline timeout, five confirm timeouts after
// the start) finds its node online, not declared offline with its tasks
// requeued.
func TestRestartCountsAsAHeartbeat(t *testing.T) {
	s, st, admin := newServer(t, "", Config{HeartbeatInterval: 200 * time.Millisecond, OfflineAfter: time.Second,
		ConfirmTimeout: 100 * time.Millisecond})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: s, http: hs, admin: admin}
	id, cred := ts.nodeNamed(t, "sleeper")
	// Its last heartbeat is long gone: the server was down for an hour.
	if err := st.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: id, At: time.Now().Add(-time.Hour), AgentState: api.AgentIdle}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetNodeStatus(t.Context(), id, api.StatusOnline, ""); err != nil {
		t.Fatal(err)
	}
	url := serve(t, s)
	time.Sleep(500 * time.Millisecond) // the agent's backoff
	c := fakeAgent(t, url, cred)
	defer c.CloseNow()
	if got := gathered(t, s, "nodemgr_nodes_marked_offline_total"); got != 0 {
		n, _ := st.GetNode(t.Context(), id)
		t.Fatalf("%v nodes marked offline while the agent was backing off after the restart (%s: %s)", got, n.Status, n.StatusReason)
	}
}

// gathered is the value of the server's metric name (a counter or gauge
// without labels), as /metrics would show it.
func gathered(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	families, err := s.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) != 1 {
			continue
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
