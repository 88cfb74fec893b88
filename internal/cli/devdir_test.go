package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestClosedAbove: nodemgr dev finds the directory that keeps its tasks'
// unprivileged user from reaching its data dir (then its demo suite runs
// as the agent's own user, rather than fail for a newcomer).
func TestClosedAbove(t *testing.T) {
	base := t.TempDir()
	open, closed := filepath.Join(base, "open"), filepath.Join(base, "closed")
	for dir, mode := range map[string]os.FileMode{open: 0o755, closed: 0o700} {
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	for d := base; d != "/"; d = filepath.Dir(d) { // the test's own temp dirs may be closed
		if fi, err := os.Stat(d); err == nil {
			os.Chmod(d, fi.Mode().Perm()|0o001)
		}
	}
	if got := closedAbove(filepath.Join(open, "data", "nodemgr-dev")); got != "" {
		t.Errorf("closedAbove(under open) = %q, want \"\"", got)
	}
	if got := closedAbove(filepath.Join(closed, "data", "nodemgr-dev")); got != closed {
		t.Errorf("closedAbove(under closed) = %q, want %q", got, closed)
	}
}
