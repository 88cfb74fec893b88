package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Verbs: a container can do them all; hibernate is the engine's pause,
// which keeps memory but no CPU.
func (d *Docker) Verbs() []string {
	return []string{provision.VerbStart, provision.VerbStop, provision.VerbHibernate, provision.VerbReboot, provision.VerbTerminate}
}

// Start starts a stopped container and unpauses a hibernated one; a
// running one is left alone.
func (d *Docker) Start(ctx context.Context, dep provision.Deployment) error {
	insp, err := d.lookup(ctx, dep)
	if err != nil {
		return fmt.Errorf("start %s: %w", dep.Name, err)
	}
	switch insp.State.Status {
	case container.StateRunning, container.StateRestarting:
		return nil
	case container.StatePaused:
		if _, err = d.engine.ContainerUnpause(ctx, insp.ID, client.ContainerUnpauseOptions{}); err == nil {
			err = d.settle(ctx, dep, container.StateRunning)
		}
	case container.StateRemoving, container.StateDead:
		return fmt.Errorf("start %s: container %.12s is %s: %w", dep.Name, insp.ID, insp.State.Status, errdefs.ErrConflict)
	default:
		_, err = d.engine.ContainerStart(ctx, insp.ID, client.ContainerStartOptions{})
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", dep.Name, dockerengine.Classify(err))
	}
	return nil
}

// Stop stops the container: SIGTERM, then SIGKILL after the grace period.
// A stopped container stays stopped.
func (d *Docker) Stop(ctx context.Context, dep provision.Deployment) error {
	id, err := resourceID(dep)
	if err != nil {
		return err
	}
	if _, err := d.engine.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: d.stopTimeout}); err != nil {
		return fmt.Errorf("stop %s: %w", dep.Name, dockerengine.Classify(err))
	}
	return nil
}

// Hibernate pauses a running container (its processes are frozen, their
// memory kept). Only a running or paused container can hibernate.
func (d *Docker) Hibernate(ctx context.Context, dep provision.Deployment) error {
	insp, err := d.lookup(ctx, dep)
	if err != nil {
		return fmt.Errorf("hibernate %s: %w", dep.Name, err)
	}
	switch insp.State.Status {
	case container.StatePaused:
		return nil
	case container.StateRunning:
	default:
		return fmt.Errorf("hibernate %s: container %.12s is %s, not running: %w", dep.Name, insp.ID, insp.State.Status, errdefs.ErrConflict)
	}
	if _, err := d.engine.ContainerPause(ctx, insp.ID, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("hibernate %s: %w", dep.Name, dockerengine.Classify(err))
	}
	if err := d.settle(ctx, dep, container.StatePaused); err != nil {
		return fmt.Errorf("hibernate %s: %w", dep.Name, err)
	}
	return nil
}

// settle waits until the engine shows the container in status want: it
// records a pause or an unpause from containerd's event a moment after the
// call returns, and a verb should return once its state can be read back.
func (d *Docker) settle(ctx context.Context, dep provision.Deployment, want container.ContainerState) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		insp, err := d.lookup(ctx, dep)
		if err != nil {
			return err
		}
		if insp.State.Status == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %.12s is still %s, not %s: %w", insp.ID, insp.State.Status, want, errdefs.ErrUnavailable)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Reboot restarts a running or paused container (provision.Do refuses a
// stopped one, as EC2 does).
func (d *Docker) Reboot(ctx context.Context, dep provision.Deployment) error {
	id, err := resourceID(dep)
	if err != nil {
		return err
	}
	if _, err := d.engine.ContainerRestart(ctx, id, client.ContainerRestartOptions{Timeout: d.stopTimeout}); err != nil {
		return fmt.Errorf("reboot %s: %w", dep.Name, dockerengine.Classify(err))
	}
	return nil
}

// Terminate removes the container, as Destroy does.
func (d *Docker) Terminate(ctx context.Context, dep provision.Deployment) error {
	return d.Destroy(ctx, dep)
}

// State maps the engine's container state onto EC2's:
//
//	created, restarting → pending      running → running
//	paused → hibernated                removing → shutting-down
//	exited, dead → stopped             gone → terminated
func (d *Docker) State(ctx context.Context, dep provision.Deployment) (string, error) {
	insp, err := d.lookup(ctx, dep)
	if errdefs.IsNotFound(err) {
		return provision.StateTerminated, nil
	}
	if err != nil {
		return "", fmt.Errorf("state of %s: %w", dep.Name, err)
	}
	return stateOf(insp.State.Status), nil
}

func stateOf(s container.ContainerState) string {
	switch s {
	case container.StateCreated, container.StateRestarting:
		return provision.StatePending
	case container.StateRunning:
		return provision.StateRunning
	case container.StatePaused:
		return provision.StateHibernated
	case container.StateRemoving:
		return provision.StateShuttingDown
	case container.StateExited, container.StateDead:
		return provision.StateStopped
	}
	return provision.StatePending
}

// lookup inspects the deployment's container; a missing one is an
// errdefs.ErrNotFound.
func (d *Docker) lookup(ctx context.Context, dep provision.Deployment) (container.InspectResponse, error) {
	id, err := resourceID(dep)
	if err != nil {
		return container.InspectResponse{}, err
	}
	return dockerengine.Inspect(ctx, d.engine, id)
}
