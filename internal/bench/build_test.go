package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// nodemgrBinary builds the nodemgr binary once for all the harness tests.
func nodemgrBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the nodemgr binary; skipped with -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodemgr-bench-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "nodemgr")
		build := exec.Command("go", "build", "-o", builtBin, "github.com/nodemgr/nodemgr/cmd/nodemgr")
		// Static, so the pool bench can deliver it into busybox machines.
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stderr = os.Stderr
		buildErr = build.Run()
	})
	if buildErr != nil {
		t.Fatalf("build nodemgr: %v", buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}
