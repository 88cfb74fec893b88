package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// The guides under docs/ (from-*.md and operations.md) each carry a worked example: the ```sh test
// blocks of a guide, run in order as one bash script (set -euo pipefail)
// in a fresh directory, against `nodemgr dev --no-demo --tag linux` as
// the guide tells its reader to start it, with NODEMGR_ADDR and
// NODEMGR_TOKEN set as dev prints them and the binary under test first on
// PATH. A guide whose example stops working fails here.

var (
	testBlockRE = regexp.MustCompile("(?ms)^```sh test\n(.*?)^```")
	needsRE     = regexp.MustCompile(`<!-- guide-test-needs: ([a-z ]+) -->`)
)

// guideNeeds provides what a guide's example needs, as environment
// variables for its script, or skips the test (fails it where CI requires
// the engine). docker says the example makes containers.
func guideNeeds(t *testing.T, text string) (env []string, docker bool) {
	t.Helper()
	m := needsRE.FindStringSubmatch(text)
	if m == nil {
		return nil, false
	}
	for _, need := range strings.Fields(m[1]) {
		switch need {
		case "docker":
			eng := dockertest.Client(t)
			env, docker = append(env, "IMAGE="+dockertest.EnsureImage(t, eng)), true
		case "busybox":
			if _, err := exec.LookPath("busybox"); err != nil {
				t.Skip("busybox is not installed (Debian's busybox-static)")
			}
		default:
			t.Fatalf("guide-test-needs: unknown need %q; want docker or busybox", need)
		}
	}
	return env, docker
}

// deleteContainers removes the containers a failed example left behind.
func deleteContainers(t *testing.T, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.Containers(ctx, "", false)
	if err != nil {
		t.Logf("list the example's containers: %v", err)
		return
	}
	for _, ct := range list {
		if _, err := c.DeleteContainer(ctx, ct.Job.ID); err != nil {
			t.Logf("delete container %s: %v", ct.Job.ID, err)
		}
	}
}

// guideScript is a guide's text and its test blocks, joined.
func guideScript(t *testing.T, path string) (text, script string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range testBlockRE.FindAllSubmatch(b, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return string(b), strings.Join(blocks, "\n")
}

func TestGuidesWorkedExamples(t *testing.T) {
	guides, err := filepath.Glob("../../docs/from-*.md")
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guides in docs/: %v", err)
	}
	guides = append(guides, "../../docs/operations.md")
	for _, guide := range guides {
		t.Run(strings.TrimSuffix(filepath.Base(guide), ".md"), func(t *testing.T) {
			text, script := guideScript(t, guide)
			if script == "" {
				t.Fatalf("%s has no ```sh test block: each guide's worked example runs here", guide)
			}
			runGuide(t, text, script)
		})
	}
}

// runGuide starts a dev server and agent and runs script against them.
func runGuide(t *testing.T, text, script string) {
	addr, data := freeAddr(t), passable(t, t.TempDir())
	needs, docker := guideNeeds(t, text)
	dev := start(t, "dev", "dev", "--no-demo", "--tag", "linux", "--name", "dev", "--listen", addr, "--data-dir", data,
		"--heartbeat-interval", heartbeat.String())
	var token string
	waitFor(t, 30*time.Second, "dev's admin token", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(data, "admin-token"))
		token = strings.TrimSpace(string(b))
		return err == nil && token != "", dev.output()
	})
	c := client.New(addr, token)
	waitFor(t, 30*time.Second, "dev's agent online", func() (bool, string) {
		n, err := c.Node(context.Background(), "dev")
		return err == nil && n.Status == "online", fmt.Sprint(n.Status, err)
	})
	if docker {
		// After dev's cleanup, so that it runs first, while dev runs.
		t.Cleanup(func() { deleteContainers(t, c) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = passable(t, t.TempDir()) // a guide's agents run services as other users
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"),
		"NODEMGR_ADDR=http://"+addr, "NODEMGR_TOKEN="+token, "NODEMGR_TOKEN_FILE=", "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, needs...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the worked example failed after %s: %v\n--- its output ---\n%s", time.Since(start).Round(time.Millisecond), err, out.String())
	}
	t.Logf("the worked example ran in %s", time.Since(start).Round(time.Millisecond))
}
