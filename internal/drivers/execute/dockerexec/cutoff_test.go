package dockerexec

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// slowStart is an engine whose start request (attach) is slow: the
// engine starts the command at once, the answer comes after delay, and,
// like the real client when its ctx ends during the handshake, it
// reports ctx's error instead of the connection.
type slowStart struct {
	engine
	delay time.Duration
}

func (s slowStart) ExecAttach(ctx context.Context, id string, opts client.ExecAttachOptions) (client.ExecAttachResult, error) {
	res, err := s.engine.ExecAttach(context.WithoutCancel(ctx), id, opts)
	if err != nil {
		return res, err
	}
	time.Sleep(s.delay)
	if ctx.Err() != nil {
		res.Close()
		return client.ExecAttachResult{}, ctx.Err()
	}
	return res, nil
}

// TestCutOffDuringStart checks that a command whose cut-off comes while
// its start request is under way (a busy engine) is killed all the same:
// the CI once saw such a command outlive its timeout.
func TestCutOffDuringStart(t *testing.T) {
	c := dockertest.Client(t)
	img := dockertest.EnsureImage(t, c)
	p, err := docker.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dep, err := p.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: dockertest.Labels(t, c), Extra: map[string]any{"image": img}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	real, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	slow := &Docker{engine: slowStart{engine: real.engine, delay: 500 * time.Millisecond}}

	cmd := execute.Command{Argv: []string{"sh", "-c", "echo $$ > /tmp/pid; exec sleep 300"}, Timeout: 200 * time.Millisecond}
	if code, err := slow.Exec(ctx, dep, cmd); code != -1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec = %d, %v; want -1, deadline exceeded", code, err)
	}
	var out strings.Builder
	if code, err := real.Exec(ctx, dep, execute.Command{Argv: []string{"cat", "/tmp/pid"}, Stdout: &out}); code != 0 || err != nil {
		t.Fatalf("reading the PID: %d, %v", code, err)
	}
	pid := strings.TrimSpace(out.String())
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, err := real.Exec(ctx, dep, execute.Command{Argv: []string{"sh", "-c", `read -r l < /proc/$1/stat && case "${l##*) }" in Z*) exit 1;; esac`, "sh", pid}, Stderr: os.Stderr})
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			return // gone, or a zombie
		}
		if time.Now().After(deadline) {
			real.Exec(ctx, dep, execute.Command{Argv: []string{"kill", "-KILL", pid}})
			t.Fatalf("process %s outlived the cut-off", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
