// Package rsync is the "rsync" executor: it copies files and trees to and
// from machines with the system's rsync, for deployments carrying
// copy:rsync, so that a copy onto a tree that is already there sends only
// what changed (rsync's quick check: size and modification time). Exec is
// the ssh executor's: a deployment needs exec:ssh as well for commands,
// and is refused without it.
//
// rsync goes over the ssh executor's kept connection to the machine, as
// OpenSSH's ssh does over a ControlMaster: its remote shell (-e) is
// nodemgr's own binary as a relay (relay.go), which hands the remote
// command to the executor through a private unix socket. So where and how
// it connects is the ssh executor's business (see package ssh: address,
// user, port, keys, known_hosts and trust on first use, pinned host keys,
// jump host, the deployment's Extra winning over settings), a copy makes
// no connection of its own, and OpenSSH's client is not used. rsync runs
// as rsync -rlpt -s --stats. Ownership is not copied (-rlpt, not -a):
// what lands on the machine belongs to the login user, and what comes
// back to the caller.
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
// Needs rsync on this host and on the machine, and the binary this
// process runs (os.Executable) to answer RelayCommand: nodemgr's main
// does, and so do test binaries through sshtest.Main.
package rsync

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Capability is what a deployment must offer for this executor.
const Capability = records.CapRsync

// Rsync copies files to and from machines with rsync over the ssh
// executor's connections.
type Rsync struct {
	ssh   *ssh.SSH
	own   bool   // ssh is ours to close
	rsync string // the rsync program
	rsh   string // rsync -e: this binary as the relay

	mu  sync.Mutex
	tmp string // private directory of the relay sockets, once made
	seq int    // names the next socket
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

// NewWith returns an rsync executor that goes over s's connections;
// closing it leaves s open. It fails when rsync is not installed here.
func NewWith(s *ssh.SSH) (*Rsync, error) {
	r := &Rsync{ssh: s}
	var err error
	if r.rsync, err = exec.LookPath("rsync"); err != nil {
		return nil, fmt.Errorf("rsync executor: rsync is not installed on this host (apt-get install rsync): %w", errdefs.ErrInvalid)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("rsync executor: this program's path, for rsync's remote shell: %w", err)
	}
	// rsync splits -e on blanks and takes quotes, but no backslash.
	if strings.ContainsAny(self, `'"`) {
		return nil, fmt.Errorf("rsync executor: the path of this program, %s, has a quote, which rsync -e cannot carry: %w", self, errdefs.ErrInvalid)
	}
	r.rsh = "'" + self + "' " + RelayCommand
	return r, nil
}

// Name is "rsync".
func (r *Rsync) Name() string { return "rsync" }

// Capability is "copy:rsync".
func (r *Rsync) Capability() string { return Capability }

// Close removes the relay's directory and closes the connections New
// made.
func (r *Rsync) Close() error {
	r.mu.Lock()
	if r.tmp != "" {
		os.RemoveAll(r.tmp)
		r.tmp = ""
	}
	r.mu.Unlock()
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
