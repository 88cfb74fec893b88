// Package dockerengine is what the docker provider, the docker executor
// and the node's containers share about talking to a Docker engine: how
// a client is made from a DOCKER_HOST style address, which errdefs class
// an engine error belongs to, and how a container is inspected.
package dockerengine

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Connect returns a client for the engine at host (DOCKER_HOST style;
// "" for $DOCKER_HOST, else the local socket). It does not contact the
// engine; a client it cannot make is errdefs.ErrInvalid.
func Connect(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, Class(err, errdefs.ErrInvalid)
	}
	return c, nil
}

// Classify gives an engine error the errdefs class that matches it,
// keeping the engine's message.
func Classify(err error) error {
	var class error
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		class = errdefs.ErrNotFound
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err), cerrdefs.IsFailedPrecondition(err):
		class = errdefs.ErrConflict
	case cerrdefs.IsInvalidArgument(err):
		class = errdefs.ErrInvalid
	case cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err):
		class = errdefs.ErrPermission
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		class = errdefs.ErrUnavailable
	default:
		return err
	}
	return Class(err, class)
}

// Class returns err, with its message, as also belonging to the errdefs
// class class.
func Class(err, class error) error { return errdefs.Class(err, class) }

// Inspector is the engine call Inspect makes.
type Inspector interface {
	ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error)
}

// Inspect returns the container id, with its state; a container that is
// gone is an errdefs.ErrNotFound.
func Inspect(ctx context.Context, engine Inspector, id string) (container.InspectResponse, error) {
	res, err := engine.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return container.InspectResponse{}, errdefs.NotFound("container %.12s", id)
		}
		return container.InspectResponse{}, fmt.Errorf("inspect container %.12s: %w", id, Classify(err))
	}
	if res.Container.State == nil {
		return container.InspectResponse{}, fmt.Errorf("inspect container %.12s: the engine reported no state", id)
	}
	return res.Container, nil
}
