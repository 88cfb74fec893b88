package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// servedServer runs a Server with Serve on a loopback port, as nodemgr
// server does, so the connection limits apply.
func servedServer(t *testing.T, cfg Config) (*Server, string, string) {
	t.Helper()
	s, _, admin := newServer(t, "", cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(t.Context(), ln) }()
	t.Cleanup(func() { <-done })
	return s, ln.Addr().String(), admin
}

// closedByServer reports whether the server closed c within wait.
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// TestUnauthenticatedConnectionsAreBounded: connections that never
// authenticate can neither pile up past the cap nor sit idle, while an
// authenticated keep-alive connection stays.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	s, addr, admin := servedServer(t, Config{MaxUnauthConns: 5, UnauthIdle: 300 * time.Millisecond, IdleTimeout: time.Minute})

	// One authenticated keep-alive connection.
	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	fmt.Fprintf(authed, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", admin)
	resp, err := http.ReadResponse(bufio.NewReader(authed), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("whoami on a raw connection = %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)

	// Twenty silent connections: never more than five held.
	var silent []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(100 * time.Millisecond)
	if n := s.guard.Unauthenticated(); n > 5 {
		t.Errorf("unauthenticated connections held = %d, want at most 5", n)
	}
	// They are all gone once idle past UnauthIdle.
	for i, c := range silent {
		if !closedByServer(c, 2*time.Second) {
			t.Errorf("silent connection %d still open after the idle limit", i)
		}
	}
	if n := s.guard.Unauthenticated(); n != 0 {
		t.Errorf("unauthenticated connections after the idle limit = %d, want 0", n)
	}
	// The authenticated one outlives them.
	if closedByServer(authed, 200*time.Millisecond) {
		t.Errorf("the authenticated keep-alive connection was closed")
	}
}
