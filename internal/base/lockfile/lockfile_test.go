package lockfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

const helperEnv = "LOCKFILE_TEST_HELPER_PATH"

// TestHelperProcess is not a test: run as a child by TestHeldByOtherProcess,
// it takes the lock, says so on stdout, and holds it until stdin closes or
// it is killed.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process for TestHeldByOtherProcess")
	}
	if _, err := Acquire(path, "nodemgr agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin) // the parent going away ends us too
	os.Exit(0)
}

func skipUnlessLinux(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("lockfile is not supported on %s", runtime.GOOS)
	}
}

func TestAcquireRelease(t *testing.T) {
	skipUnlessLinux(t)
	path := filepath.Join(t.TempDir(), "agent.lock")

	l, err := Acquire(path, "nodemgr agent")
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
	// Private, or a sealed data dir would find its own lock open.
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode = %v, want 0600", fi.Mode().Perm())
	}

	// A second open file description conflicts, even in this process.
	_, err = Acquire(path, "nodemgr agent")
	var held *HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path || held.Holder != "nodemgr agent" {
		t.Fatalf("second Acquire(%q) = %v, want HeldError{%q, %d, %q}", path, err, path, os.Getpid(), "nodemgr agent")
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("second Acquire(%q) = %v, want an errdefs.ErrConflict", path, err)
	}

	if err := l.Release(); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release() = %v, want nil", err)
	}
	l2, err := Acquire(path, "nodemgr agent")
	if err != nil {
		t.Fatalf("Acquire(%q) after Release = %v", path, err)
	}
	if err := l2.Release(); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

func TestAcquireMissingDir(t *testing.T) {
	skipUnlessLinux(t)
	path := filepath.Join(t.TempDir(), "missing", "agent.lock")
	_, err := Acquire(path, "nodemgr agent")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Acquire(%q) = %v, want ErrNotExist", path, err)
	}
}

func TestHeldErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  HeldError
		want string
	}{
		{
			name: "pid known",
			err:  HeldError{Path: "/x/agent.lock", PID: 1234, Holder: "nodemgr agent"},
			want: "another nodemgr agent (pid 1234) uses data dir /x; stop it or choose another --data-dir",
		},
		{
			name: "pid unknown",
			err:  HeldError{Path: "/x/server.lock", Holder: "nodemgr server"},
			want: "another nodemgr server (pid unknown) uses data dir /x; stop it or choose another --data-dir",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHeldByOtherProcess checks the property the agent relies on: a lock
// held by a live process is refused with its PID, and one held by a killed
// process is free again.
func TestHeldByOtherProcess(t *testing.T) {
	skipUnlessLinux(t)
	path := filepath.Join(t.TempDir(), "agent.lock")

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})

	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "locked\n" {
			err = fmt.Errorf("helper said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("helper did not take the lock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not take the lock within 10s")
	}

	_, err = Acquire(path, "nodemgr agent")
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Acquire(%q) while child holds it = %v, want *HeldError", path, err)
	}
	if held.PID != cmd.Process.Pid {
		t.Errorf("HeldError.PID = %d, want child's %d", held.PID, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// The kernel drops the lock once the child is gone; poll rather than
	// assume when that is.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := Acquire(path, "nodemgr agent")
		if err == nil {
			l.Release()
			return
		}
		if !errors.As(err, &held) {
			t.Fatalf("Acquire(%q) after kill = %v", path, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q) still fails 10s after SIGKILL: %v", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
