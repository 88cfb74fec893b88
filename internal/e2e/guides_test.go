package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The guides under docs/ each carry a worked example: the ```sh test
// blocks of a guide, run in order as one bash script (set -euo pipefail)
// in a fresh directory, against `nodemgr dev --no-demo --tag linux` as
// the guide tells its reader to start it, with NODEMGR_ADDR and
// NODEMGR_TOKEN set as dev prints them and the binary under test first on
// PATH. A guide whose example stops working fails here.

var testBlockRE = regexp.MustCompile("(?ms)^```sh test\n(.*?)^```")

// guideScript is a guide's test blocks, joined.
func guideScript(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range testBlockRE.FindAllSubmatch(b, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return strings.Join(blocks, "\n")
}

func TestGuidesWorkedExamples(t *testing.T) {
	guides, err := filepath.Glob("../../docs/from-*.md")
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guides in docs/: %v", err)
	}
	for _, guide := range guides {
		t.Run(strings.TrimSuffix(filepath.Base(guide), ".md"), func(t *testing.T) {
			script := guideScript(t, guide)
			if script == "" {
				t.Fatalf("%s has no ```sh test block: each guide's worked example runs here", guide)
			}
			runGuide(t, script)
		})
	}
}

// runGuide starts a dev server and agent and runs script against them.
func runGuide(t *testing.T, script string) {
	addr, data := freeAddr(t), t.TempDir()
	dev := start(t, "dev", "dev", "--no-demo", "--tag", "linux", "--name", "dev", "--listen", addr, "--data-dir", data,
		"--heartbeat-interval", heartbeat.String())
	var token string
	waitFor(t, 30*time.Second, "dev's admin token and agent", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(data, "admin-token"))
		token = strings.TrimSpace(string(b))
		return err == nil && token != "" && strings.Contains(dev.output(), "nodemgr dev is running"), dev.output()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"),
		"NODEMGR_ADDR=http://"+addr, "NODEMGR_TOKEN="+token, "NODEMGR_TOKEN_FILE=", "GORACE=atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the worked example failed after %s: %v\n--- its output ---\n%s", time.Since(start).Round(time.Millisecond), err, out.String())
	}
	t.Logf("the worked example ran in %s", time.Since(start).Round(time.Millisecond))
}
