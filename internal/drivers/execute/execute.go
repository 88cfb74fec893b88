// Package execute runs commands on nodes and copies files to and from
// them: the Executor interface and the registry drivers join (a Driver
// record each, from init; package drivers/all links them all). An executor
// only takes a machine that carries its capability (exec:local,
// exec:docker, exec:ssh ...); anything else is refused with a clear error.
package execute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// HostForgetter is the optional capability of an executor that keeps
// what it learnt of each machine (an SSH host key in known_hosts): once
// the machine is destroyed, ForgetHost drops it, so that another machine
// at the same address starts afresh.
type HostForgetter interface {
	ForgetHost(d provision.Deployment) error
}

// Command is what to run.
type Command struct {
	Argv    []string
	Env     []string // KEY=VALUE, added to the target's environment
	Dir     string   // working directory on the target; "" for its default
	Stdin   io.Reader
	Stdout  io.Writer // streamed as the command writes
	Stderr  io.Writer
	Timeout time.Duration // 0: none
}

// Bound refuses a command that names no program, and returns ctx bounded
// by the command's Timeout, if it has one, with the cancel to call when
// the command is done.
func (c Command) Bound(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if len(c.Argv) == 0 {
		return ctx, func() {}, errdefs.Field("argv", "is empty")
	}
	if c.Timeout > 0 {
		ctx, cancel := context.WithTimeout(ctx, c.Timeout)
		return ctx, cancel, nil
	}
	return ctx, func() {}, nil
}

// CutOff says why the command was cut off when ctx (Bound's) ended, its
// Timeout or ctx's own end, and passes other errors through.
func (c Command) CutOff(ctx context.Context, err error) error {
	switch {
	case ctx.Err() == nil:
		return err
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Timeout > 0:
		return fmt.Errorf("timed out after %v: %w", c.Timeout, context.DeadlineExceeded)
	}
	return ctx.Err()
}

// Executor runs commands on, and copies files to and from, deployments.
type Executor interface {
	Name() string
	// Capability is what a deployment must carry for this executor,
	// e.g. "exec:docker".
	Capability() string
	// Exec runs the command and returns its exit code. An error means it
	// could not be run (or was cut off by ctx or Timeout), not that it
	// exited non-zero.
	Exec(ctx context.Context, d provision.Deployment, cmd Command) (int, error)
	// CopyTo copies a local file or tree to dst on the target.
	CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error
	// CopyFrom copies a file or tree at src on the target to a local dst.
	CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error
}

// Check refuses a deployment that does not carry the executor's capability.
func Check(e Executor, d provision.Deployment) error {
	if slices.Contains(d.Executors, e.Capability()) {
		return nil
	}
	return fmt.Errorf("executor %s needs a node with %s; %s (provider %s) offers %v: %w",
		e.Name(), e.Capability(), d.Name, d.Provider, d.Executors, errdefs.ErrInvalid)
}
