package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
)

// inProcessServer is `nodemgr server` run by run in this process.
type inProcessServer struct {
	addr   string
	stderr *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan int // the exit code, once run returns
}

// serveDataDir starts `nodemgr server` on dir, on a free loopback address.
// It does not wait for the server to come up.
func serveDataDir(t *testing.T, dir string) *inProcessServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	s := &inProcessServer{addr: addr, stderr: &syncbuf.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	var stdout syncbuf.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: s.stderr, rawStdout: &stdout, rawStderr: s.stderr,
		getenv: func(string) string { return "" }}
	go func() {
		s.done <- run(ctx, e, []string{"server", "--listen", addr, "--data-dir", dir, "--log-level", "warn"})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("server on %s did not stop within 30s", addr)
		}
	})
	return s
}

// waitUp waits until the server answers /healthz; it fails the test if the
// server exits first.
func (s *inProcessServer) waitUp(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("server exited %d before it answered, stderr:\n%s", code, s.stderr.String())
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := client.New("http://"+s.addr, "").Health(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on %s not up within 30s: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop cancels the server and returns its exit code.
func (s *inProcessServer) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.done:
		s.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("server on %s did not stop within 30s", s.addr)
		return -1
	}
}

// TestSecondServerOnDataDirIsRefused: a server started on the data dir
// (and so the SQLite store) of a running one is refused at once, with the
// first one's pid and what to do; the first keeps serving. Once the first
// has stopped, a server starts on the data dir again.
func TestSecondServerOnDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := serveDataDir(t, dir)
	first.waitUp(t)

	second := serveDataDir(t, dir)
	deadline := time.After(30 * time.Second)
	for refused := false; !refused; {
		select {
		case code := <-second.done:
			second.done <- code
			if code == 0 {
				t.Fatalf("second server on %s exited 0, want a refusal; stderr:\n%s", dir, second.stderr.String())
			}
			refused = true
		case <-deadline:
			t.Fatalf("second server on %s still runs after 30s, want a refusal", dir)
		case <-time.After(20 * time.Millisecond):
			if _, err := client.New("http://"+second.addr, "").Health(t.Context()); err == nil {
				t.Fatalf("second server on %s serves, want a refusal; stderr:\n%s", dir, second.stderr.String())
			}
		}
	}
	want := fmt.Sprintf("error: another nodemgr server (pid %d) uses data dir %s; stop it or choose another --data-dir\n", os.Getpid(), dir)
	if got := second.stderr.String(); got != want {
		t.Errorf("second server's stderr = %q, want %q", got, want)
	}
	if _, err := client.New("http://"+first.addr, "").Health(t.Context()); err != nil {
		t.Errorf("first server after the refusal: /healthz = %v, want it serving", err)
	}

	if code := first.stop(t); code != 0 {
		t.Fatalf("first server exited %d on cancel, want 0; stderr:\n%s", code, first.stderr.String())
	}
	third := serveDataDir(t, dir)
	third.waitUp(t)
	if code := third.stop(t); code != 0 {
		t.Errorf("server after the first stopped exited %d, want 0; stderr:\n%s", code, third.stderr.String())
	}
}
