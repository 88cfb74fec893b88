// Package e2e drives the real nodemgr binary: it is built once, then servers
// and agents run as separate processes, and the tests watch them through
// the API and the CLI. Waits poll with deadlines; nothing sleeps blindly.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
)

var binary string // the nodemgr binary under test

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodemgr-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "nodemgr")
	build := exec.Command("go", "build", "-race", "-o", binary, "github.com/nodemgr/nodemgr/cmd/nodemgr")
	if os.Getenv("NODEMGR_E2E_NORACE") != "" {
		build = exec.Command("go", "build", "-o", binary, "github.com/nodemgr/nodemgr/cmd/nodemgr")
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build nodemgr:", err)
		os.Exit(1)
	}
	code := pgtest.Run(m) // stops the PostgreSQL server the tests started, if any
	ec2test.StopMoto()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Short timings so the tests run in seconds, not minutes.
const (
	heartbeat      = 200 * time.Millisecond
	offlineAfter   = 1 * time.Second
	confirmWait    = 500 * time.Millisecond
	reconnectGrace = 1 * time.Second
	retryBackoff   = 100 * time.Millisecond
	idleSuiteGrace = 1 * time.Second
)

// proc is a nodemgr process with its output captured.
type proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, []string{"NODEMGR_TOKEN=", "NODEMGR_ADDR="}, args...)
}

// startEnv is start with env added to the process's environment.
func startEnv(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	// GORACE: race-built processes otherwise sleep 1 s when they exit.
	cmd.Env = append(append(os.Environ(), env...), "GORACE=atexit_sleep_ms=0")
	return startCmd(t, name, cmd)
}

// startCmd starts cmd, its output captured, and kills it when the test
// ends, showing its output if the test failed.
func startCmd(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			// A failed test may be a process that hangs: SIGQUIT makes a
			// Go process print every goroutine's stack as it exits, so the
			// output shows where it waited.
			p.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	if p.cmd.ProcessState == nil {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// server is a running `nodemgr server`.
type server struct {
	*proc
	addr    string
	dataDir string
	token   string
	args    []string
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	return startServerWith(t, func(string) []string { return extra })
}

// startServerWith starts a server whose extra flags depend on the address
// it listens on.
func startServerWith(t testing.TB, flags func(listen string) []string) *server {
	t.Helper()
	s := &server{addr: freeAddr(t), dataDir: t.TempDir()}
	listen := s.addr
	extra := flags(listen)
	if checksSchemas(extra) {
		// Clients reach the server through a proxy that checks every
		// answer against the OpenAPI document (schemacheck_test.go).
		s.addr = startSchemaProxy(t, listen)
	}
	s.args = append([]string{"server", "--listen", listen, "--data-dir", s.dataDir,
		"--heartbeat-interval", heartbeat.String(), "--offline-after", offlineAfter.String(),
		"--confirm-timeout", confirmWait.String(), "--reconnect-grace", reconnectGrace.String(),
		"--retry-backoff", retryBackoff.String(), "--idle-suite-grace", idleSuiteGrace.String()}, extra...)
	s.restart(t)
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin-token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	s.token = strings.TrimSpace(string(b))
	return s
}

// restart starts the server process (again) on the same address and data dir.
func (s *server) restart(t testing.TB) {
	t.Helper()
	s.proc = start(t, "server", s.args...)
	waitFor(t, 20*time.Second, "server healthy", func() (bool, string) {
		_, err := client.New(s.addr, "").Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
}

func (s *server) url() string { return "http://" + s.addr }

func (s *server) client() *client.Client { return client.New(s.addr, s.token) }

func (s *server) joinToken(t *testing.T, groups ...string) string {
	t.Helper()
	tk, err := s.client().CreateJoinToken(context.Background(), api.CreateTokenRequest{Groups: groups})
	if err != nil {
		t.Fatalf("create join token: %v", err)
	}
	return tk.Secret
}

// agent is a running `nodemgr agent`.
type agent struct {
	*proc
	dataDir string
	args    []string
}

func startAgent(t *testing.T, s *server, name string, extra ...string) *agent {
	t.Helper()
	a := &agent{dataDir: passable(t, t.TempDir())}
	a.args = append([]string{"agent", "--server", s.url(), "--data-dir", a.dataDir, "--name", name,
		"--join-token", s.joinToken(t), "--reconnect-min", "100ms", "--reconnect-max", "500ms"}, extra...)
	a.proc = start(t, "agent "+name, a.args...)
	return a
}

// restart starts the agent again on the same data dir.
func (a *agent) restart(t *testing.T) {
	t.Helper()
	a.proc = start(t, a.name, a.args...)
}

// run runs a CLI command against s and returns stdout, stderr and the exit code.
// startCLI starts a CLI command against s that runs until stopped (logs
// -f), its output captured.
func (s *server) startCLI(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, strings.Join(args[:2], " "), []string{"NODEMGR_ADDR=" + s.url(), "NODEMGR_TOKEN=" + s.token}, args...)
}

func (s *server) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return s.runIn(t, "", args...)
}

// runWith runs a CLI command against s from dir ("": the test's own),
// with stdin as its standard input ("": none), and returns stdout,
// stderr and the exit code.
func (s *server) runWith(t *testing.T, dir, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return s.runBinary(t, binary, dir, stdin, args...)
}

// runBinary is runWith with another nodemgr binary (a client build).
func (s *server) runBinary(t *testing.T, bin, dir, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODEMGR_ADDR="+s.url(), "NODEMGR_TOKEN="+s.token, "GORACE=atexit_sleep_ms=0")
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// nodeByName finds a node in the server's list.
func nodeByName(t *testing.T, s *server, name string) (api.Node, bool) {
	t.Helper()
	nodes, err := s.client().Nodes(context.Background(), "")
	if err != nil {
		return api.Node{}, false
	}
	for _, n := range nodes {
		if n.Name == name {
			return n, true
		}
	}
	return api.Node{}, false
}

// waitStatus waits until the named node has the status.
// startOnline starts an agent (see startAgent) and waits, up to 20s, for
// its node to be online.
func startOnline(t *testing.T, s *server, name string, extra ...string) (*agent, api.Node) {
	t.Helper()
	a := startAgent(t, s, name, extra...)
	return a, waitStatus(t, s, name, api.StatusOnline, 20*time.Second)
}

// waitStatus waits for the node to have status. Online means connected
// too: registration makes a node online a moment before its agent's
// session opens, and what goes to the agent needs the session.
func waitStatus(t *testing.T, s *server, name, status string, timeout time.Duration) api.Node {
	t.Helper()
	var got api.Node
	waitFor(t, timeout, fmt.Sprintf("node %s %s", name, status), func() (bool, string) {
		n, ok := nodeByName(t, s, name)
		got = n
		return ok && n.Status == status && (status != api.StatusOnline || n.Connected),
			fmt.Sprintf("found=%v status=%q connected=%v reason=%q", ok, n.Status, n.Connected, n.StatusReason)
	})
	return got
}

// outputLines returns lines of a process's output containing substr.
func grep(out, substr string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			lines = append(lines, sc.Text())
		}
	}
	return lines
}
