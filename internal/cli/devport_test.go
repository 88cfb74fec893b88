package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
)

// TestDevStopsWhenItsPortIsTaken: nodemgr dev on a port another process
// holds exits with the listen error, as nodemgr server does, instead of
// waiting for ever for a listener that never starts (issue 31, item 1).
func TestDevStopsWhenItsPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runArgs(t, "dev", "--no-demo", "--listen", taken.Addr().String(),
			"--data-dir", filepath.Join(t.TempDir(), "nodemgr-dev"))
		done <- result{code, stderr}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "address already in use") || !strings.Contains(r.stderr, "--listen") {
			t.Errorf("dev on a taken port = exit %d, stderr %q; want exit 1 saying the address is in use and to choose another --listen", r.code, r.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev on a taken port did not stop within a minute; it waits for a listener that never starts")
	}
}

// TestDevBannerIsWhole: dev's banner (where the state is, the exports,
// the demo suite to watch) reaches the terminal in one piece: the log line
// of the demo suite's creation used to land in its middle.
func TestDevBannerIsWhole(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dev's agent runs the demo suite as an unprivileged user it makes: root only (CI runs as root)")
	}
	term := &syncbuf.Buffer{} // stdout and stderr on one terminal
	e := &env{stdin: strings.NewReader(""), stdout: term, stderr: term, rawStdout: term, rawStderr: term,
		getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "nodemgr-dev")})
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(term.String(), "Press Ctrl-C") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop within a minute of its context ending")
	}
	out := term.String()
	start, end := strings.Index(out, "nodemgr dev is running"), strings.Index(out, "Press Ctrl-C")
	if start < 0 || end < start {
		t.Fatalf("no banner in dev's output:\n%s", out)
	}
	banner := out[start:end]
	if strings.Contains(banner, "level=") || !strings.Contains(banner, "nodemgr suite watch") {
		t.Errorf("the banner is broken up or lacks the demo suite:\n%s", banner)
	}
}
