// Package sftp is the "sftp" executor: it copies files and trees to and
// from machines with the SFTP protocol (github.com/pkg/sftp), for
// deployments carrying copy:sftp, over the ssh executor's connections and
// settings (see package ssh: address, user, keys, known_hosts, jump
// host). It needs no shell or tar on the machine for copies, only sshd's
// sftp subsystem.
//
// Exec is the ssh executor's: a deployment needs exec:ssh as well for
// commands, and is refused without it.
//
// Copies follow the executors' rule: dst names the copy, a dst ending in
// "/" means into it, missing parents are made (0755), a tree merges into
// an existing directory; modes, modification times and symbolic links
// (as links, never followed) are kept, and what lands on the machine
// belongs to the login user. On the machine each file is written under a
// temporary name beside its place and renamed over it, and a directory of
// the tree is never written through a link (a link in its way is
// replaced). From the machine the tree is unpacked locally through
// internal/base/archive, which refuses anything that would land outside dst;
// before that, the SFTP client keeps only the last element of each name
// the server lists (../x lands as x, inside the copy), and a name that is
// still not one plain element is refused. A file onto a directory, or a tree onto anything
// but a directory, is errdefs.ErrConflict, found before anything is
// written.
package sftp

import (
	"context"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"github.com/pkg/sftp"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Capability is what a deployment must offer for this executor.
const Capability = records.CapSFTP

// SFTP copies files to and from machines over SFTP.
type SFTP struct {
	ssh *ssh.SSH
	own bool // ssh is ours to close
}

// New returns an sftp executor with connections of its own, made with the
// ssh executor's settings (see ssh.New).
func New(settings map[string]string) (*SFTP, error) {
	s, err := ssh.New(settings)
	if err != nil {
		return nil, fmt.Errorf("sftp executor: %w", err)
	}
	return &SFTP{ssh: s, own: true}, nil
}

// NewWith returns an sftp executor that shares s's connections and
// settings; closing it leaves s open.
func NewWith(s *ssh.SSH) *SFTP { return &SFTP{ssh: s} }

// Name is "sftp".
func (f *SFTP) Name() string { return "sftp" }

// Capability is "copy:sftp".
func (f *SFTP) Capability() string { return Capability }

// Close closes the connections New made.
func (f *SFTP) Close() error {
	if f.own {
		return f.ssh.Close()
	}
	return nil
}

// Exec runs cmd with the ssh executor: d must carry exec:ssh too.
func (f *SFTP) Exec(ctx context.Context, d provision.Deployment, cmd execute.Command) (int, error) {
	if err := execute.Check(f, d); err != nil {
		return -1, err
	}
	return f.ssh.Exec(ctx, d, cmd)
}

// session opens an SFTP session to d; end closes it. ctx ending closes it
// too, failing what it was doing.
func (f *SFTP) session(ctx context.Context, d provision.Deployment) (*sftp.Client, func(), error) {
	if err := execute.Check(f, d); err != nil {
		return nil, nil, err
	}
	c, release, err := f.ssh.Client(ctx, d)
	if err != nil {
		return nil, nil, err
	}
	sc, err := sftp.NewClient(c, sftp.UseConcurrentWrites(true))
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("start sftp on %s: %w", d.Name, classify(err))
	}
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	return sc, func() {
		stop()
		sc.Close()
		release()
	}, nil
}

var _ execute.Executor = (*SFTP)(nil)
