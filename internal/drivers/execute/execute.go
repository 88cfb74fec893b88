// Package execute runs commands on nodes and copies files to and from
// them: the Executor interface and the registry drivers join (a Driver
// record each, from init; package drivers/all links them all). An executor
// only takes a machine that carries its capability (exec:local,
// exec:docker, exec:ssh ...); anything else is refused with a clear error.
package execute

import (
	"context"
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
