package dockerexec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/dockerexec"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// outerEnv is set in the environment of every test container.
const outerEnv = "NODEMGR_TEST_OUTER=outer"

// node provisions a container of the test image, running as user, for
// the test, and returns it with an executor.
func node(t testing.TB, user string) (*dockerexec.Docker, provision.Deployment) {
	t.Helper()
	c := dockertest.Client(t)
	img := dockertest.EnsureImage(t, c)
	p, err := docker.New(nil)
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	extra := map[string]any{"image": img, "env": []any{outerEnv}}
	if user != "" {
		extra["user"] = user
	}
	dep, err := p.Provision(context.Background(), provision.Spec{Name: dockertest.Name(t), Labels: dockertest.Labels(t, c), Extra: extra})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	e, err := dockerexec.New(nil)
	if err != nil {
		t.Fatalf("dockerexec.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dep
}

func TestConformance(t *testing.T) {
	executetest.Run(t, func(t *testing.T) executetest.Target {
		e, d := node(t, "nodemgr")
		return executetest.Target{Executor: e, Deployment: d, User: "nodemgr", Env: outerEnv}
	})
}

// TestErrors holds the failures the suite leaves out: a container that is
// gone and paths that are not absolute, which only a container has, and a
// parent that is a file, which the local executor reports unclassed.
func TestErrors(t *testing.T) {
	e, d := node(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	src := filepath.Join(dir, "agent")
	if err := os.WriteFile(src, []byte("binary"), 0o750); err != nil {
		t.Fatal(err)
	}
	gone := provision.Deployment{Name: "gone", ResourceID: "0123456789ab0123456789ab", Executors: d.Executors}
	executetest.CheckFailing(t, []executetest.Failing{
		{Name: "container gone", Do: func() error {
			_, err := e.Exec(ctx, gone, execute.Command{Argv: []string{"true"}})
			return err
		}, Class: errdefs.ErrNotFound},
		{Name: "relative dst", Do: func() error { return e.CopyTo(ctx, d, src, "opt/x") }, Class: errdefs.ErrInvalid},
		{Name: "relative src", Do: func() error { return e.CopyFrom(ctx, d, "etc/passwd", filepath.Join(dir, "x")) }, Class: errdefs.ErrInvalid},
		{Name: "parent is a file", Do: func() error { return e.CopyTo(ctx, d, src, "/etc/passwd/x") }, Class: errdefs.ErrConflict},
	})
}

func TestCapability(t *testing.T) {
	e, err := dockerexec.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Name() != "docker" || e.Capability() != "exec:docker" {
		t.Errorf("Name, Capability = %q, %q; want docker, exec:docker", e.Name(), e.Capability())
	}
	if err := execute.Check(e, provision.Deployment{Executors: []string{docker.CapExec, docker.CapCopy}}); err != nil {
		t.Errorf("Check(docker deployment) = %v", err)
	}
	if err := execute.Check(e, provision.Deployment{Executors: []string{"exec:local"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Check(local deployment) = %v, want invalid", err)
	}
	if _, err := dockerexec.New(map[string]string{"hots": "x"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New(unknown setting) = %v, want invalid", err)
	}
}
