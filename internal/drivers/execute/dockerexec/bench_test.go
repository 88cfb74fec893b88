package dockerexec_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/dockerexec"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// BenchmarkProvisionRunTrue measures a whole nodemgr round, provision a
// container, exec true in it, destroy it, against the engine doing the
// least that runs true in a fresh container (docker run --rm IMAGE true:
// create, start, wait, remove), through the same engine, in one run. It
// logs the ratio.
func BenchmarkProvisionRunTrue(b *testing.B) {
	c := dockertest.Client(b)
	img := dockertest.EnsureImage(b, c)
	labels := dockertest.Labels(b, c)
	p, err := docker.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	e, err := dockerexec.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()

	perOp := map[string]time.Duration{}
	b.Run("nodemgr", func(b *testing.B) {
		for b.Loop() {
			d, err := p.Provision(ctx, provision.Spec{Name: dockertest.Name(b), Labels: labels, Extra: map[string]any{"image": img}})
			if err != nil {
				b.Fatalf("Provision: %v", err)
			}
			if code, err := e.Exec(ctx, d, execute.Command{Argv: []string{"true"}}); err != nil || code != 0 {
				b.Fatalf("Exec(true) = %d, %v", code, err)
			}
			if err := p.Destroy(ctx, d); err != nil {
				b.Fatalf("Destroy: %v", err)
			}
		}
		perOp["nodemgr"] = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			res, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
				Name:   dockertest.Name(b),
				Config: &container.Config{Image: img, Cmd: []string{"true"}, Labels: labels},
			})
			if err != nil {
				b.Fatalf("create: %v", err)
			}
			if _, err := c.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
				b.Fatalf("start: %v", err)
			}
			w := c.ContainerWait(ctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
			select {
			case r := <-w.Result:
				if r.StatusCode != 0 {
					b.Fatalf("true exited %d", r.StatusCode)
				}
			case err := <-w.Error:
				b.Fatalf("wait: %v", err)
			}
			if _, err := c.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				b.Fatalf("remove: %v", err)
			}
		}
		perOp["engine"] = b.Elapsed() / time.Duration(b.N)
	})
	if perOp["engine"] > 0 && perOp["nodemgr"] > 0 {
		b.Logf("provision+exec+destroy %v, engine run --rm %v: ratio %.2f",
			perOp["nodemgr"], perOp["engine"], float64(perOp["nodemgr"])/float64(perOp["engine"]))
	}
}

// BenchmarkExecTrue measures one exec of true in a running container.
func BenchmarkExecTrue(b *testing.B) {
	e, d := node(b, "")
	ctx := context.Background()
	for b.Loop() {
		if code, err := e.Exec(ctx, d, execute.Command{Argv: []string{"true"}}); err != nil || code != 0 {
			b.Fatalf("Exec(true) = %d, %v", code, err)
		}
	}
}
