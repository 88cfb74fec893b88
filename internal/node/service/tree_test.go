//go:build linux

package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// forkingMain is a service whose main process starts the real server in a
// session of its own (setsid: out of the main process's group), records
// the server's pid, and dies with status 3 when told to.
const forkingMain = `#!/bin/sh
setsid "$NODEMGR_SOFTWARE_DIR/bin/svc" &
echo $! > "$NODEMGR_RUNTIME_DIR/child.pid"
while [ ! -e "$NODEMGR_RUNTIME_DIR/die" ]; do sleep 0.02; done
rm -f "$NODEMGR_RUNTIME_DIR/die"
exit 3
`

// TestCrashedServiceTreeIsKilled is item 3 of issue 13: when a service's
// main process dies, a helper that left its process group (and holds its
// port) is killed with it, so the restarted service binds the port; and
// a stop kills such helpers too, also after an agent restart.
func TestCrashedServiceTreeIsKilled(t *testing.T) {
	h := newHarness(t)
	if err := os.WriteFile(filepath.Join(h.tree, "bin", "forking"), []byte(forkingMain), 0o755); err != nil {
		t.Fatal(err)
	}
	s, stopAgent := h.supervisor()
	const coord = "a.fork.u.c"
	spec := h.spec(coord)
	spec.Command = []string{"bin/forking"}
	spec.StopGrace = 0 // default; the shell ignores nothing
	v := mustStart(t, s, spec)
	runtimeDir := filepath.Join(h.prefix, "runtime", "c", "u", "fork", "a")
	first := waitAnswer(t, v.Port)
	if first.PID != childPID(t, runtimeDir) {
		t.Fatalf("the port is answered by pid %d, want the setsid child", first.PID)
	}

	// The main process dies: the child goes with it, and the next run's
	// child gets the port.
	os.WriteFile(filepath.Join(runtimeDir, "die"), nil, 0o644)
	gone(t, first.PID)
	waitFor(t, 10*time.Second, "the restarted service to answer on its port", func() error {
		r, err := query(v.Port)
		if err != nil {
			return err
		}
		if r.PID == first.PID {
			return fmt.Errorf("still answered by the first run's child %d", r.PID)
		}
		return nil
	})
	got, _ := s.Get(coord)
	if got.Restarts != 1 || got.LastExit != "exit status 3" {
		t.Errorf("after the crash: restarts %d, last exit %q; want 1, exit status 3", got.Restarts, got.LastExit)
	}

	// A new agent adopts it; its stop kills the setsid child too.
	second := waitAnswer(t, v.Port)
	stopAgent()
	s2, _ := h.supervisor()
	waitState(t, s2, coord, "running")
	if _, err := s2.Stop(context.Background(), coord); err != nil {
		t.Fatal(err)
	}
	gone(t, second.PID)
	if _, err := query(v.Port); err == nil {
		t.Errorf("the port still answers after the stop")
	}
}

func childPID(t *testing.T, runtimeDir string) int {
	t.Helper()
	var pid int
	waitFor(t, 5*time.Second, "child.pid", func() error {
		b, err := os.ReadFile(filepath.Join(runtimeDir, "child.pid"))
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}
