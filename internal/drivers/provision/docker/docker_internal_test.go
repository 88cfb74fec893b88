package docker

import (
	"context"
	"errors"
	"testing"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// cutOffCreate is the real engine, except that ContainerCreate reports the
// caller's context as done after the engine has made the container: the
// race a cancelled Provision can lose.
type cutOffCreate struct {
	engine
	cancel context.CancelFunc
}

func (c cutOffCreate) ContainerCreate(ctx context.Context, opts client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	if _, err := c.engine.ContainerCreate(context.WithoutCancel(ctx), opts); err != nil {
		return client.ContainerCreateResult{}, err
	}
	c.cancel()
	return client.ContainerCreateResult{}, ctx.Err()
}

func TestProvisionCutOffDuringCreate(t *testing.T) {
	c := dockertest.Client(t)
	img := dockertest.EnsureImage(t, c)
	labels := dockertest.Labels(t, c)
	d, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.engine = cutOffCreate{engine: d.engine, cancel: cancel}

	_, err = d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Provision = %v, want context.Canceled", err)
	}
	if left := dockertest.Containers(t, c, labels); len(left) != 0 {
		t.Errorf("a cut-off create left %v", left)
	}
}
