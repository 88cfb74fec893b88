// Package rsync is the "rsync" executor: it copies files and trees to and
// from machines with the system's rsync over OpenSSH's ssh, for
// deployments carrying copy:rsync, so that a copy onto a tree that is
// already there sends only what changed (rsync's quick check: size and
// modification time). Exec is the ssh executor's: a deployment needs
// exec:ssh as well for commands, and is refused without it.
//
// Where and how it connects is the ssh executor's business (see package
// ssh: address, user, port, keys, known_hosts and trust on first use,
// jump host, the deployment's Extra winning over settings). From that the
// executor writes an ssh_config of its own, read instead of the user's
// and the system's, and runs rsync -rlpt -s --stats -e "ssh -F CONFIG":
// known_hosts is checked (StrictHostKeyChecking yes, or accept-new), keys
// are those named (else OpenSSH's defaults) and the agent's, the jump
// host is a ProxyJump that reads the same file. Ownership is not copied
// (-rlpt, not -a): what lands on the machine belongs to the login user,
// and what comes back to the caller.
//
// Copies follow the executors' rule: dst names the copy, a dst ending in
// "/" means into it, missing parents are made (0755), a tree merges into
// an existing directory; modes, modification times and symbolic links
// (as links, never followed) are kept. Before rsync runs, a command over
// the ssh executor's connection checks the machine's side: a missing
// source is errdefs.ErrNotFound; a file onto a directory, or a tree onto
// anything but a directory, errdefs.ErrConflict, before anything is
// written. rsync writes each file under a temporary name and renames it
// into place, and does not write through a link where the tree has a
// directory (without --keep-dirlinks it replaces the link); as receiver
// it checks the names the sender lists (rsync 3.2.5 or later), and
// CopyFrom gives it absolute local paths only, so none is taken for a
// remote one.
//
// Needs rsync and ssh (OpenSSH's client) on this host, and rsync on the
// machine.
package rsync

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Capability is what a deployment must offer for this executor.
const Capability = "copy:rsync"

// Rsync copies files to and from machines with rsync over ssh.
type Rsync struct {
	ssh    *ssh.SSH
	own    bool   // ssh is ours to close
	rsync  string // the rsync program
	sshBin string // OpenSSH's client
	cfg    *configs
}

// New returns an rsync executor with connections of its own (for its
// checks), made with the ssh executor's settings (see ssh.New).
func New(settings map[string]string) (*Rsync, error) {
	s, err := ssh.New(settings)
	if err != nil {
		return nil, fmt.Errorf("rsync executor: %w", err)
	}
	r, err := NewWith(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	r.own = true
	return r, nil
}

// NewWith returns an rsync executor that uses s's settings, and its
// connections for checks and commands; closing it leaves s open. It
// fails when rsync or ssh is not installed here.
func NewWith(s *ssh.SSH) (*Rsync, error) {
	r := &Rsync{ssh: s, cfg: &configs{}}
	var err error
	if r.rsync, err = exec.LookPath("rsync"); err != nil {
		return nil, fmt.Errorf("rsync executor: rsync is not installed on this host (apt-get install rsync): %w", errdefs.ErrInvalid)
	}
	if r.sshBin, err = exec.LookPath("ssh"); err != nil {
		return nil, fmt.Errorf("rsync executor: ssh, OpenSSH's client, is not installed on this host (apt-get install openssh-client): %w", errdefs.ErrInvalid)
	}
	return r, nil
}

// Name is "rsync".
func (r *Rsync) Name() string { return "rsync" }

// Capability is "copy:rsync".
func (r *Rsync) Capability() string { return Capability }

// Close removes the ssh configurations written and closes the
// connections New made.
func (r *Rsync) Close() error {
	r.cfg.close()
	if r.own {
		return r.ssh.Close()
	}
	return nil
}

// Exec runs cmd with the ssh executor: d must carry exec:ssh too.
func (r *Rsync) Exec(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	if err := execute.Check(r, d); err != nil {
		return -1, err
	}
	return r.ssh.Exec(ctx, d, cmd)
}

var _ execute.Executor = (*Rsync)(nil)
