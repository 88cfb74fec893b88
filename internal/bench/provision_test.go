package bench

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestRunProvisionSmall runs the provisioning harness for two rounds and
// two machines at once on the real engine.
func TestRunProvisionSmall(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := RunProvision(ctx, ProvisionConfig{Binary: bin, Image: image, Runs: 2, Parallel: 2}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r.NodemgrP50 <= 0 || r.EngineP50 <= 0 || r.NodemgrP90 < r.NodemgrP50 || r.NodemgrBatch <= 0 || r.EngineBatch <= 0 {
		t.Errorf("implausible result %+v", r)
	}
}

// TestRunPoolSmall runs the pool cold-path harness for two rounds on the
// real engine.
func TestRunPoolSmall(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	bin := nodemgrBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := RunPool(ctx, PoolConfig{Binary: bin, Image: image, Runs: 2}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r.ColdP50 <= 0 || r.ByHandP50 <= 0 || r.ColdP90 < r.ColdP50 || r.ByHandP90 < r.ByHandP50 {
		t.Errorf("implausible result %+v", r)
	}
}
