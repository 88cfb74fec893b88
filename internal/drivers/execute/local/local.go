// Package local is the "local" executor: it runs commands on, and copies
// files within, the host nodemgr runs on, for deployments carrying
// exec:local (those of the local provider). Like that provider it is
// insecure and meant for testing: commands run with nodemgr's privileges.
//
// Exec runs argv with os/exec in a process group of its own, with
// nodemgr's environment less its own NODEMGR_* settings (which hold its
// secrets) plus Command.Env; when Timeout or ctx ends it, the
// whole group is killed. A command killed by a signal reports 128+signal,
// as a shell would. Output still held open by a background process when
// the command exits is waited for only briefly.
//
// CopyTo and CopyFrom both copy a local file or tree (cp -a in Go: modes,
// modification times, symbolic links kept as links; ownership is not
// changed). dst names the copy itself; a dst ending in a separator means
// "into", making dst/base(src). Missing parents are made (mode 0755);
// copying a tree onto an existing directory merges into it. Writes go
// through an os.Root on dst, so nothing lands outside it.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// hostEnv is the environment of the host as a login there would see it:
// nodemgr's, without nodemgr's own settings, some of which are secrets
// (NODEMGR_TOKEN, NODEMGR_JOIN_TOKEN, ...).
func hostEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "NODEMGR_") })
}

// Capability is what a deployment must offer for this executor.
const Capability = records.CapLocal

// outputWait bounds how long Exec waits for output after the command has
// exited: only a process it left behind can still hold the pipes then.
const outputWait = 2 * time.Second

// Local runs commands on this host.
type Local struct{}

// New returns the local executor.
func New() *Local { return &Local{} }

// Name is "local".
func (l *Local) Name() string { return "local" }

// Capability is "exec:local".
func (l *Local) Capability() string { return Capability }

// Exec runs cmd and returns its exit code (128+n for a command killed by
// signal n). An error means it could not be started, or was cut off by ctx
// or cmd.Timeout; the exit code is then -1.
func (l *Local) Exec(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	if err := execute.Check(l, d); err != nil {
		return -1, err
	}
	ctx, cancel, err := cmd.Bound(ctx)
	if err != nil {
		return -1, err
	}
	defer cancel()
	if err := checkDir(cmd.Dir); err != nil {
		return -1, fmt.Errorf("exec %s: %w", cmd.Argv[0], err)
	}
	c := exec.CommandContext(ctx, cmd.Argv[0], cmd.Argv[1:]...)
	c.Env = append(hostEnv(), cmd.Env...)
	c.Dir = cmd.Dir
	c.Stdin, c.Stdout, c.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	c.WaitDelay = outputWait
	ownGroup(c)

	err = c.Run()
	switch {
	case err == nil:
		return 0, nil
	case ctx.Err() != nil && c.ProcessState != nil && !exitedOnItsOwn(c.ProcessState):
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && cmd.Timeout > 0 {
			return -1, fmt.Errorf("exec %s: timed out after %v: %w", cmd.Argv[0], cmd.Timeout, context.DeadlineExceeded)
		}
		return -1, fmt.Errorf("exec %s: %w", cmd.Argv[0], ctx.Err())
	case c.ProcessState != nil:
		// It ran: a non-zero exit, or output held open past outputWait.
		return exitCode(c.ProcessState), nil
	case ctx.Err() != nil:
		return -1, fmt.Errorf("exec %s: %w", cmd.Argv[0], ctx.Err())
	}
	return -1, fmt.Errorf("exec %s: %w", cmd.Argv[0], classify(err))
}

// CopyTo copies the file or tree src to dst on this host.
func (l *Local) CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error {
	if err := execute.Check(l, d); err != nil {
		return err
	}
	if err := copyTree(ctx, src, dst); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// CopyFrom copies the file or tree src to dst on this host: the same as
// CopyTo, the node being this host.
func (l *Local) CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error {
	return l.CopyTo(ctx, d, src, dst)
}

// classify classes an error from the local system.
func classify(err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return errdefs.Class(err, errdefs.ErrNotFound)
	case errors.Is(err, syscall.ENOEXEC):
		return errdefs.Class(fmt.Errorf("%w (not a program or script this machine can run)", err), errdefs.ErrInvalid)
	}
	return errdefs.FromOS(err)
}

// checkDir refuses a working directory that is not there before the start
// does: the kernel's chdir failure reads as if the program were missing
// ("fork/exec /usr/bin/true: no such file or directory").
func checkDir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Class(errdefs.Field("workdir", "%s does not exist on the machine; create it first or choose another", dir), errdefs.ErrNotFound)
	case err != nil:
		return errdefs.FromOS(fmt.Errorf("workdir: %w", err))
	case !fi.IsDir():
		return errdefs.Field("workdir", "%s is not a directory", dir)
	}
	return nil
}

var _ execute.Executor = (*Local)(nil)
