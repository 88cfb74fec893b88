// Package sshtest gives tests a real OpenSSH server to work against: the
// system's sshd, started once per test binary on 127.0.0.1 as the user
// the tests run as, with throwaway host and client keys, a known_hosts
// file and its own configuration in a temporary directory. Nothing of the
// system's ssh configuration is read or touched, and sessions get an
// empty HOME, so the user's shell start-up files do not run.
//
// A package's tests use it as
//
//	func TestMain(m *testing.M) { os.Exit(sshtest.Main(m)) }
//
//	func TestX(t *testing.T) { srv := sshtest.Shared(t); ... }
//
// When sshd (or a tool named to Need) is missing, or sshd will not let
// the user in (sshd without PAM refuses an account whose password is
// locked), the test is skipped, unless NODEMGR_REQUIRE_SSH=1, as CI sets,
// in which case it fails.
package sshtest

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
	sshexec "github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// SSHD is the server binary; sshd refuses to start by a relative path.
const SSHD = "/usr/sbin/sshd"

// EnvVar is the variable every session on the server has in its
// environment, KEY=VALUE, set by the server's configuration.
const EnvVar = "NODEMGR_SSHTEST_OUTER=outer"

// Server is a running sshd.
type Server struct {
	Addr       string        // 127.0.0.1:PORT
	User       string        // who the tests run as: the only user the server lets in
	Identity   string        // the private key file the server accepts for User
	KnownHosts string        // a known_hosts file that holds HostKey for Addr
	HostKey    ssh.PublicKey // the server's host key
	Dir        string        // the server's directory: keys, configuration, log

	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
}

var (
	once    sync.Once
	shared  *Server
	initErr error
	missing string // why the server cannot run here, when it cannot
)

// Main runs the package's tests and then stops the server if one was
// started. Call it from TestMain.
//
// A test binary run as rsync's remote shell (the rsync executor runs its
// own program with rsync.RelayCommand, which is nodemgr's in production)
// is the relay instead, and runs no tests.
func Main(m *testing.M) int {
	if len(os.Args) > 1 && os.Args[1] == rsync.RelayCommand {
		return rsync.RelayMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	}
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	return code
}

// Shared returns the package's server, starting it on first use. It
// skips t (or fails it, with NODEMGR_REQUIRE_SSH=1) when sshd is not
// installed, and fails it when the server does not start.
func Shared(t testing.TB) *Server {
	t.Helper()
	once.Do(func() {
		if _, err := os.Stat(SSHD); err != nil {
			missing = fmt.Sprintf("no OpenSSH server at %s (apt-get install openssh-server): %v", SSHD, err)
			return
		}
		shared, initErr = start()
		var refused *loginRefused
		if errors.As(initErr, &refused) {
			missing, initErr = refused.Error(), nil
		}
	})
	if missing != "" {
		unavailable(t, "%s", missing)
	}
	if initErr != nil {
		t.Fatalf("start sshd: %v", initErr)
	}
	return shared
}

// Need returns the path of the program name, skipping t (or failing it,
// with NODEMGR_REQUIRE_SSH=1) when it is not installed.
func Need(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, "%s is not installed: %v", name, err)
	}
	return p
}

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("NODEMGR_REQUIRE_SSH") == "1" {
		t.Fatalf("%s (NODEMGR_REQUIRE_SSH=1)", msg)
	}
	t.Skipf("%s; set NODEMGR_REQUIRE_SSH=1 to fail instead", msg)
}

// Deployment is a deployment whose address is the server, carrying
// executors.
func (s *Server) Deployment(name string, executors ...string) provision.Deployment {
	return provision.Deployment{ID: "d-" + name, Provider: "sshtest", Name: name, State: provision.StateRunning,
		Address: s.Addr, Executors: executors}
}

// Executor makes an executor of the shared server with newExec, from the
// server's settings with settings over them, closed when t ends, and a
// deployment of the server that carries capabilities.
func Executor[E interface{ Close() error }](t testing.TB, newExec func(settings map[string]string) (E, error), settings map[string]string, capabilities ...string) (E, provision.Deployment, *Server) {
	t.Helper()
	srv := Shared(t)
	s := srv.Settings()
	maps.Copy(s, settings)
	e, err := newExec(s)
	if err != nil {
		t.Fatalf("new executor: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, srv.Deployment("node", capabilities...), srv
}

// CopyOnly checks an executor that copies over ssh's connections (sftp,
// rsync) on d, a deployment of the server that carries only its copy
// capability: commands are refused, for want of exec:ssh, and copies
// work.
func CopyOnly(t *testing.T, e execute.Executor, d provision.Deployment) {
	t.Helper()
	d.Executors = []string{e.Capability()}
	code, err := e.Exec(context.Background(), d, execute.Command{Argv: []string{"true"}})
	if code != -1 || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), sshexec.Capability) {
		t.Errorf("Exec on a %s-only deployment = %d, %v; want -1 and invalid naming %s", e.Capability(), code, err, sshexec.Capability)
	}
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.CopyTo(ctx, d, src, filepath.Join(t.TempDir(), "copied")); err != nil {
		t.Errorf("CopyTo on a %s-only deployment = %v", e.Capability(), err)
	}
}

// Target is the conformance suite's target of e on d, a deployment of
// the server.
func (s *Server) Target(e execute.Executor, d provision.Deployment) executetest.Target {
	return executetest.Target{Executor: e, Deployment: d, User: s.User, Env: EnvVar}
}

// Settings are the ssh executor's settings that reach the server: its
// user, key and known_hosts file.
func (s *Server) Settings() map[string]string {
	return map[string]string{"user": s.User, "identity_file": s.Identity, "known_hosts": s.KnownHosts}
}

// KnownHostsLine is a known_hosts line that gives the server's host key
// for addr (host:port), such as a proxy in front of it.
func (s *Server) KnownHostsLine(addr string) string {
	return knownhosts.Line([]string{knownhosts.Normalize(addr)}, s.HostKey)
}

// KnownHostsFile writes a known_hosts file under t's temporary directory
// that gives the server's host key for each of addrs (host:port: its own,
// a proxy's in front of it), and returns its path: the known_hosts
// setting of an executor that trusts those addresses and no others.
func (s *Server) KnownHostsFile(t testing.TB, addrs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, addr := range addrs {
		b.WriteString(s.KnownHostsLine(addr) + "\n")
	}
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Log is what the server has logged so far.
func (s *Server) Log() string { return s.log.String() }

func start() (*Server, error) {
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "nodemgr-sshtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{User: u.Username, Dir: dir, log: &syncbuf.Buffer{}}
	hostKey, err := writeKey(filepath.Join(dir, "host_ed25519"))
	if err != nil {
		return nil, err
	}
	s.HostKey = hostKey
	s.Identity = filepath.Join(dir, "id_ed25519")
	clientKey, err := writeKey(s.Identity)
	if err != nil {
		return nil, err
	}
	// Sessions get an empty home, so that the user's own shell start-up
	// files (~/.bashrc) stay out of the tests and their timings.
	if err := os.Mkdir(filepath.Join(dir, "home"), 0o700); err != nil {
		return nil, err
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, ssh.MarshalAuthorizedKey(clientKey), 0o600); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// sshd run by root insists on its privilege separation
		// directory, which its service unit would have made.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, err
		}
	}
	// The free port found may be taken before sshd binds it: try again.
	for range 3 {
		if err = s.run(auth); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := s.login(); err != nil {
		s.stop()
		return nil, &loginRefused{user: s.User, err: err, log: s.log.String()}
	}
	return s, nil
}

// loginRefused is a server that runs but will not let the user in: sshd
// without PAM refuses an account whose password is locked, for one.
type loginRefused struct {
	user string
	err  error
	log  string
}

func (e *loginRefused) Error() string {
	return fmt.Sprintf("sshd runs but refuses %s (%v): %s", e.user, e.err, strings.TrimSpace(e.log))
}

// login checks that the user gets in and can run a command.
func (s *Server) login() error {
	b, err := os.ReadFile(s.Identity)
	if err != nil {
		return err
	}
	key, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return err
	}
	c, err := ssh.Dial("tcp", s.Addr, &ssh.ClientConfig{User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(s.HostKey), Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	return sess.Run("true")
}

func (s *Server) run(auth string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Addr = l.Addr().String()
	l.Close()
	s.KnownHosts = filepath.Join(s.Dir, "known_hosts")
	if err := os.WriteFile(s.KnownHosts, []byte(s.KnownHostsLine(s.Addr)+"\n"), 0o600); err != nil {
		return err
	}
	conf := filepath.Join(s.Dir, "sshd_config")
	body := fmt.Sprintf(`ListenAddress %s
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowUsers %s
AllowTcpForwarding yes
MaxSessions 64
MaxStartups 64
Subsystem sftp internal-sftp
SetEnv %s HOME=%s
LogLevel INFO
`, s.Addr, filepath.Join(s.Dir, "host_ed25519"), auth, s.User, EnvVar, filepath.Join(s.Dir, "home"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return err
	}
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", conf)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// The server must not outlive a test binary that dies.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if banner(s.Addr) {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("sshd exited: %s", strings.TrimSpace(s.log.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("sshd did not answer on %s within 10s: %s", s.Addr, strings.TrimSpace(s.log.String()))
		}
	}
}

// banner reports whether an SSH server answers at addr.
func banner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-")
}

func (s *Server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		// Its group holds the session processes it started.
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	os.RemoveAll(s.Dir)
}

// writeKey makes an ed25519 key, writes its private half to path in
// OpenSSH's format and returns its public half.
func writeKey(path string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(pub)
}
