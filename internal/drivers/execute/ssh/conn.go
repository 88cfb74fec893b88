package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

const (
	// sessionsPerConn is how many channels the executor opens at once
	// on one connection: OpenSSH's default MaxSessions. A server that
	// allows fewer refuses the next, and another connection is made.
	sessionsPerConn = 10
	// idleClose is how long a connection with no channel open is kept.
	idleClose = 5 * time.Minute
	// keepAlive is how often a kept connection is checked; one that does
	// not answer within keepAliveWait is closed, so that a connection a
	// NAT or a reboot cut silently is dialed again, not waited on.
	keepAlive     = 30 * time.Second
	keepAliveWait = 15 * time.Second
)

// conn is one SSH connection in the pool.
type conn struct {
	key    string
	client *ssh.Client
	jump   *ssh.Client // the connection it goes through, or nil

	// Guarded by pool.mu.
	sessions int
	limit    int
	dead     bool
	idle     *time.Timer
}

func (c *conn) close() {
	c.client.Close()
	if c.jump != nil {
		c.jump.Close()
	}
}

// pool keeps connections by target and hands out room for one channel
// on one of them, dialing when none has room.
type pool struct {
	keys *keyCache

	mu      sync.Mutex
	conns   map[string][]*conn
	dialing map[string]*sync.Mutex
	closed  bool
	dials   int
}

// acquire returns a connection to t with room for one more channel,
// reserved until release.
func (p *pool) acquire(ctx context.Context, t Target) (*conn, error) {
	key := t.key()
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("ssh executor is closed: %w", errdefs.ErrUnavailable)
		}
		if c := p.pick(key); c != nil {
			p.mu.Unlock()
			return c, nil
		}
		if p.dialing == nil {
			p.dialing = map[string]*sync.Mutex{}
		}
		dm := p.dialing[key]
		if dm == nil {
			dm = &sync.Mutex{}
			p.dialing[key] = dm
		}
		p.mu.Unlock()

		// One dial per target at a time: callers that arrive together
		// share the first connection rather than each making one.
		dm.Lock()
		p.mu.Lock()
		if c := p.pick(key); c != nil {
			p.mu.Unlock()
			dm.Unlock()
			return c, nil
		}
		p.mu.Unlock()
		c, err := p.dial(ctx, t)
		if err != nil {
			dm.Unlock()
			return nil, err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			dm.Unlock()
			c.close()
			continue
		}
		p.dials++
		if p.conns == nil {
			p.conns = map[string][]*conn{}
		}
		p.conns[key] = append(p.conns[key], c)
		c.sessions++
		p.mu.Unlock()
		dm.Unlock()
		go p.watch(c)
		return c, nil
	}
}

// pick reserves a channel on a live connection for key with room.
func (p *pool) pick(key string) *conn {
	for _, c := range p.conns[key] {
		if !c.dead && c.sessions < c.limit {
			c.sessions++
			if c.idle != nil {
				c.idle.Stop()
				c.idle = nil
			}
			return c
		}
	}
	return nil
}

// release gives back the channel acquire reserved.
func (p *pool) release(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.sessions--
	if c.sessions == 0 && !c.dead && !p.closed {
		c.idle = time.AfterFunc(idleClose, func() {
			p.mu.Lock()
			idle := c.sessions == 0 && !c.dead
			if idle {
				p.dropLocked(c)
			}
			p.mu.Unlock()
			if idle {
				c.close()
			}
		})
	}
}

// full records that the server refused a channel on c: it takes no more
// than are open now.
func (p *pool) full(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.limit = max(1, c.sessions-1)
}

// broken drops c from the pool and closes it.
func (p *pool) broken(c *conn) {
	p.mu.Lock()
	p.dropLocked(c)
	p.mu.Unlock()
	c.close()
}

// watch drops c from the pool when its connection ends, and ends a
// connection that stops answering.
func (p *pool) watch(c *conn) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(keepAlive)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if !alive(c.client, keepAliveWait) {
					c.close()
					return
				}
			}
		}
	}()
	c.client.Wait()
	close(done)
	p.broken(c)
}

// alive reports whether the server answers a keepalive request within
// wait.
func alive(c *ssh.Client, wait time.Duration) bool {
	answered := make(chan error, 1)
	go func() {
		_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		answered <- err
	}()
	select {
	case err := <-answered:
		return err == nil
	case <-time.After(wait):
		return false
	}
}

func (p *pool) dropLocked(c *conn) {
	c.dead = true
	list := p.conns[c.key]
	for i, o := range list {
		if o == c {
			p.conns[c.key] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(p.conns[c.key]) == 0 {
		delete(p.conns, c.key)
	}
}

// forget closes the connections to key: channels open on them are cut.
func (p *pool) forget(key string) {
	p.mu.Lock()
	list := p.conns[key]
	for _, c := range slices.Clone(list) {
		p.dropLocked(c)
	}
	p.mu.Unlock()
	for _, c := range list {
		c.close()
	}
}

// close closes every connection.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	var all []*conn
	for _, list := range p.conns {
		for _, c := range list {
			c.dead = true
			all = append(all, c)
		}
	}
	p.conns = nil
	p.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

// dial connects to t, through its jump host if it has one.
func (p *pool) dial(ctx context.Context, t Target) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.ConnectTimeout)
	defer cancel()
	c := &conn{key: t.key(), limit: sessionsPerConn}
	var nc net.Conn
	var err error
	if t.Jump != nil {
		c.jump, err = p.handshake(ctx, *t.Jump, nil)
		if err != nil {
			return nil, fmt.Errorf("jump host %s: %w", t.Jump.Addr(), err)
		}
		nc, err = c.jump.DialContext(ctx, "tcp", t.Addr())
		if err != nil {
			c.jump.Close()
			return nil, fmt.Errorf("connect to %s through %s: %w", t.Addr(), t.Jump.Addr(), dialErr(ctx, err))
		}
	}
	c.client, err = p.handshake(ctx, t, nc)
	if err != nil {
		if c.jump != nil {
			c.jump.Close()
		}
		return nil, err
	}
	return c, nil
}

// handshake makes an SSH connection to t over nc, or over a TCP
// connection it dials when nc is nil.
func (p *pool) handshake(ctx context.Context, t Target, nc net.Conn) (*ssh.Client, error) {
	signers, err := p.keys.signers(t.IdentityFiles)
	if err != nil {
		return nil, err
	}
	auth := []ssh.AuthMethod{}
	if len(signers) > 0 {
		auth = append(auth, ssh.PublicKeys(signers...))
	}
	agentMethod, closeAgent := agentAuth()
	defer closeAgent()
	if agentMethod != nil {
		auth = append(auth, agentMethod)
	}
	if len(auth) == 0 {
		return nil, errdefs.Field("identity_file", "no key to log in to %s with: set identity_file (or the deployment's %s), or run an ssh-agent (SSH_AUTH_SOCK)", t.Addr(), ExtraIdentityFile)
	}
	addr := t.Addr()
	if nc == nil {
		var d net.Dialer
		if nc, err = d.DialContext(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("connect to %s: %w", addr, dialErr(ctx, err))
		}
	}
	cfg := &ssh.ClientConfig{
		Config:            ssh.Config{Ciphers: ciphers},
		User:              t.User,
		Auth:              auth,
		HostKeyCallback:   hostKeyCallback(t),
		HostKeyAlgorithms: hostKeyAlgorithms(t, addr),
		Timeout:           t.ConnectTimeout,
	}
	// The handshake knows no context: a deadline and a close bound it.
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			sc.Close()
		}
		return nil, fmt.Errorf("ssh %s@%s: %w", t.User, addr, handshakeErr(ctx, err))
	}
	nc.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

// ciphers are x/crypto/ssh's default ciphers with ChaCha20-Poly1305
// first, as OpenSSH's ssh and scp order them: a machine whose CPU has no
// AES instructions (QEMU TCG's, small ARM boards) decrypts it about
// twice as fast as AES-GCM, and pushing the agent to it is bound by that;
// with AES-NI both are far faster than the network.
var ciphers = []string{ssh.CipherChaCha20Poly1305, ssh.CipherAES128GCM, ssh.CipherAES256GCM,
	ssh.CipherAES128CTR, ssh.CipherAES192CTR, ssh.CipherAES256CTR}

// dialErr classes a failure to reach a host.
func dialErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", err, ctx.Err())
	}
	var oe *ssh.OpenChannelError
	if errors.As(err, &oe) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return errdefs.Class(err, errdefs.ErrUnavailable)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return errdefs.Class(err, errdefs.ErrNotFound)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errdefs.Class(err, errdefs.ErrUnavailable)
	}
	return err
}

// handshakeErr classes a failed SSH handshake.
func handshakeErr(ctx context.Context, err error) error {
	switch {
	case err == nil, ctx.Err() != nil:
		// Most often the connect timeout, on a machine whose sshd answers
		// but is slow to finish the key exchange (just booted, loaded, or
		// without AES instructions): worth trying again, like a refused
		// port.
		return errdefs.Class(fmt.Errorf("handshake cut off: %w", ctx.Err()), errdefs.ErrUnavailable)
	case errors.Is(err, errdefs.ErrPermission), errors.Is(err, errdefs.ErrInvalid):
		// The host key check's own verdict.
		return err
	case strings.Contains(err.Error(), "unable to authenticate"):
		return errdefs.Class(fmt.Errorf("%w (no key offered was accepted: check the user and identity_file)", err), errdefs.ErrPermission)
	}
	return errdefs.Class(err, errdefs.ErrUnavailable)
}
