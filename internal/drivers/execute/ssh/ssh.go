// Package ssh is the "ssh" executor: it runs commands on machines over
// SSH (golang.org/x/crypto/ssh), for deployments carrying exec:ssh, and
// copies files and trees as tar streams over the same connection. The sftp
// and rsync executors reach machines through its connections and settings.
//
// # Where and how it connects
//
// The deployment's Address names the host (host, host:port, [v6]:port).
// The user, port, keys and jump host come from the executor's settings
// (New), and per deployment from its Extra, which wins: ssh_user,
// ssh_port (else a port in Address, else the port setting, else 22),
// ssh_identity_file and ssh_jump_host. Host keys are checked against the
// known_hosts setting (default ~/.ssh/known_hosts): a changed key is
// always refused, naming the file and line; an unknown host is refused
// unless accept_new_host_keys is set, which adds its first key to the
// file (trust on first use). Those two are the executor's alone: a
// template cannot relax host key checking. Keys come from identity_file
// (default: OpenSSH's ~/.ssh/id_ed25519, id_ecdsa, id_rsa that exist)
// and from the agent at $SSH_AUTH_SOCK when it is set. A jump host
// ([user@]host[:port], ProxyJump style, one hop) is reached with the
// same keys and known_hosts.
//
// One connection per target (address, user, keys) is kept and shared by
// every command and copy, the sftp and rsync executors' included (up to
// 10 channels at once, OpenSSH's default MaxSessions, then another
// connection); a broken one is dropped and dialed again, an idle one
// closed after 5 minutes, and those to a destroyed machine closed by
// ForgetHost. The server makes one ssh executor and keeps it, so the
// connections outlive the requests that use them.
//
// # Commands
//
// The command line is argv quoted for a POSIX shell (Quote), run by
// /bin/sh from the user's login shell, which must be a POSIX one: sshd
// runs it with $SHELL -c. Command.Env is passed as env K=V ... (most sshd
// refuse SetEnv), Dir with cd. A small wrapper checks that Dir and the
// program exist first (errdefs.ErrNotFound otherwise), reports its PID,
// and execs the command: stdout and stderr stream apart as written, stdin
// is the command's, and a command killed by signal n exits 128+n. sshd
// makes the command a session and process group leader; when Timeout or
// ctx cuts it off, a second channel sends the group SIGTERM, then SIGKILL
// to what is left after 2 seconds, so nothing it started stays running.
// Output a background process holds open after the command exits is
// waited for 2 seconds at most.
//
// # Copies
//
// CopyTo and CopyFrom follow the executors' rule: dst names the copy, a
// dst ending in "/" means into it, missing parents are made (0755), a
// tree merges into an existing directory; modes, modification times and
// symbolic links (as links) are kept, and what lands on the machine
// belongs to the login user. The copy travels as a tar stream over an
// exec channel (internal/base/archive writes it and, coming back, unpacks it
// refusing entries that would land outside dst), so the machine needs
// tar. Paths on the machine are slash paths; relative ones are under the
// login directory.
package ssh

import (
	"context"
	"errors"
	"fmt"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/records"

	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Capability is what a deployment must offer for this executor.
const Capability = records.CapSSH

// SSH runs commands on, and copies files to and from, machines over SSH.
// It is safe for concurrent use.
type SSH struct {
	cfg  config
	pool *pool
}

// New returns an ssh executor. settings, all optional:
//
//   - user: who to log in as (default: the user nodemgr runs as)
//   - port: default 22
//   - identity_file: private key files, comma-separated (default:
//     ~/.ssh/id_ed25519, id_ecdsa, id_rsa, those that exist)
//   - known_hosts: default ~/.ssh/known_hosts
//   - accept_new_host_keys: true to add an unknown host's key to
//     known_hosts on first connection (default false: refused)
//   - jump_host: [user@]host[:port] to connect through
//   - connect_timeout: Go duration, default 15s
//
// A deployment's Extra ssh_user, ssh_port, ssh_identity_file and
// ssh_jump_host win over these. New reads the keys it is given but
// contacts no machine.
func New(settings map[string]string) (*SSH, error) {
	cfg, err := parseSettings(settings)
	if err != nil {
		return nil, fmt.Errorf("ssh executor: %w", err)
	}
	keys := &keyCache{}
	if len(cfg.identities) > 0 {
		if _, err := keys.signers(cfg.identities); err != nil {
			return nil, fmt.Errorf("ssh executor: %w", err)
		}
	}
	return &SSH{cfg: cfg, pool: &pool{keys: keys}}, nil
}

// Name is "ssh".
func (e *SSH) Name() string { return "ssh" }

// Capability is "exec:ssh".
func (e *SSH) Capability() string { return Capability }

// Close closes the executor's connections.
func (e *SSH) Close() error {
	e.pool.close()
	return nil
}

// Client returns the executor's connection to d, with room reserved for
// one channel (an SFTP session, say) until release is called. It does
// not check d's capabilities: that is the caller's to do.
func (e *SSH) Client(ctx context.Context, d provision.Deployment) (client *ssh.Client, release func(), err error) {
	t, err := e.Target(d)
	if err != nil {
		return nil, nil, err
	}
	c, err := e.pool.acquire(ctx, t)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	return c.client, func() { e.pool.release(c) }, nil
}

// channel opens a session channel to t on a pooled connection; release
// gives its room back.
func (e *SSH) channel(ctx context.Context, t Target) (ssh.Channel, <-chan *ssh.Request, func(), error) {
	for attempt := 0; ; attempt++ {
		c, err := e.pool.acquire(ctx, t)
		if err != nil {
			return nil, nil, nil, err
		}
		// A connection that does not answer in time is taken for dead.
		octx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
		ch, reqs, err := openChannel(octx, c.client)
		cancel()
		if err == nil {
			return ch, reqs, func() { e.pool.release(c) }, nil
		}
		var oe *ssh.OpenChannelError
		switch {
		case ctx.Err() != nil:
			e.pool.release(c)
			return nil, nil, nil, ctx.Err()
		case errors.As(err, &oe) && oe.Reason == ssh.Prohibited && attempt < 3:
			// The server's MaxSessions is lower than ours.
			e.pool.full(c)
			e.pool.release(c)
			continue
		case errors.As(err, &oe):
			e.pool.release(c)
			return nil, nil, nil, errdefs.Class(fmt.Errorf("open a session on %s: %w", t.Addr(), err), errdefs.ErrUnavailable)
		case attempt < 3:
			// The connection died since it was last used (each of
			// those kept may have): drop it and try the next, or dial.
			e.pool.release(c)
			e.pool.broken(c)
			continue
		}
		e.pool.release(c)
		return nil, nil, nil, errdefs.Class(fmt.Errorf("open a session on %s: %w", t.Addr(), err), errdefs.ErrUnavailable)
	}
}

// openChannel opens a session channel, giving up when ctx ends.
func openChannel(ctx context.Context, c *ssh.Client) (ssh.Channel, <-chan *ssh.Request, error) {
	type result struct {
		ch   ssh.Channel
		reqs <-chan *ssh.Request
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ch, reqs, err := c.OpenChannel("session", nil)
		done <- result{ch, reqs, err}
	}()
	select {
	case r := <-done:
		return r.ch, r.reqs, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				go ssh.DiscardRequests(r.reqs)
				r.ch.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
}

var _ execute.Executor = (*SSH)(nil)
