package container_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	ctypes "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

// BenchmarkDeployToRunning measures a deploy through the Manager, from
// the call to a RUNNING container (validation, port booking, record on
// disk, create, start, inspect), against the engine's own create + start
// of the same container (what `docker run -d -p` asks the engine for), in
// one run: compare the two sub-benchmarks' ns/op. Removing the containers
// is not timed.
//
//	go test -run x -bench DeployToRunning -benchtime 20x ./internal/node/container/
func BenchmarkDeployToRunning(b *testing.B) {
	eng := dockertest.Client(b)
	image := dockertest.EnsureImage(b, eng)
	labels := dockertest.Labels(b, eng)
	ctx := context.Background()
	cmd := []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"}

	b.Run("engine-create-start", func(b *testing.B) {
		port, _ := network.PortFrom(8080, network.TCP)
		for b.Loop() {
			res, err := eng.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config: &ctypes.Config{Image: image, Cmd: cmd, Labels: labels, ExposedPorts: network.PortSet{port: {}}},
				HostConfig: &ctypes.HostConfig{
					PortBindings: network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}},
					Resources:    ctypes.Resources{NanoCPUs: 5e8, Memory: 64 << 20, MemorySwap: 64 << 20},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := eng.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := eng.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})

	b.Run("manager-deploy", func(b *testing.B) {
		m, err := container.New(container.Config{Engine: eng, StateDir: b.TempDir(), Ports: newMemPorts(),
			HostIP: "127.0.0.1", UsageInterval: time.Hour, StopGrace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go m.Run(rctx)
		i := 0
		for b.Loop() {
			i++
			job := api.ContainerJob{ID: fmt.Sprintf("bench-%d-%d", os.Getpid(), i),
				Name: "bench", Image: image, Command: cmd, Labels: labels, CPUs: 0.5, MemoryMB: 64,
				Ports: []api.ContainerPort{{Container: 8080}}}
			c, err := m.Deploy(ctx, job)
			if err != nil || c.Status != api.ContainerRunning {
				b.Fatalf("Deploy = %+v, %v; want RUNNING", c, err)
			}
			b.StopTimer()
			if _, err := m.Delete(ctx, job.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
