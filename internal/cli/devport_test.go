package cli

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
