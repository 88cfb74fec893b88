// Package dockerengine is what the docker provider and the docker
// executor share about talking to a Docker engine: how a client is made
// from a DOCKER_HOST style address, and which errdefs class an engine
// error belongs to.
package dockerengine

import (
	cerrdefs "github.com/containerd/errdefs"
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
