package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// tlsServer is a `nodemgr server` speaking HTTPS, and the CA its clients
// trust it by.
type tlsServer struct {
	*proc
	addr, dataDir, token string
	caFile               string // PEM of the CA that signed the server's certificate
}

func (s *tlsServer) url() string { return "https://" + s.addr }

// client trusts the server's CA.
func (s *tlsServer) client(t *testing.T) *client.Client {
	t.Helper()
	certs, err := tlsca.LoadCerts(s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	return client.New(s.url(), s.token, client.WithRootCAs(tlsca.Pool(certs...)))
}

// startTLSServer starts a server on 127.0.0.1 with args (TLS flags) and
// waits until it answers over HTTPS. caFile is the CA to trust it by; ""
// means the CA the server makes in its data dir.
func startTLSServer(t *testing.T, caFile string, args ...string) *tlsServer {
	t.Helper()
	s := &tlsServer{addr: freeAddr(t), dataDir: t.TempDir(), caFile: caFile}
	if s.caFile == "" {
		s.caFile = filepath.Join(s.dataDir, "ca.crt")
	}
	s.proc = start(t, "server", append([]string{"server", "--listen", s.addr, "--data-dir", s.dataDir,
		"--heartbeat-interval", heartbeat.String(), "--offline-after", offlineAfter.String(),
		"--confirm-timeout", confirmWait.String()}, args...)...)
	waitFor(t, 20*time.Second, "server healthy over HTTPS", func() (bool, string) {
		if s.exited() {
			t.Fatalf("server exited: %s", s.output())
		}
		if _, err := os.Stat(s.caFile); err != nil {
			return false, err.Error()
		}
		_, err := s.client(t).Health(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin-token"))
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	s.token = strings.TrimSpace(string(b))
	return s
}

func (s *tlsServer) joinToken(t *testing.T) api.Token {
	t.Helper()
	tk, err := s.client(t).CreateJoinToken(context.Background(), api.CreateTokenRequest{})
	if err != nil {
		t.Fatalf("create join token: %v", err)
	}
	return tk
}

// waitOnline waits until the server lists the node as online.
func (s *tlsServer) waitOnline(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, "node "+name+" online", func() (bool, string) {
		nodes, err := s.client(t).Nodes(context.Background(), "")
		for _, n := range nodes {
			if n.Name == name {
				return n.Status == api.StatusOnline, n.Status
			}
		}
		return false, fmt.Sprint("not listed ", err)
	})
}

// runTask runs one task through the server and waits for its result.
func (s *tlsServer) runTask(t *testing.T, suite string, argv ...string) api.Task {
	t.Helper()
	ctx := context.Background()
	c := s.client(t)
	if _, err := c.CreateSuite(ctx, api.SuiteSpec{Name: suite, WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}}); err != nil {
		t.Fatalf("create suite: %v", err)
	}
	ids, err := c.SubmitTasks(ctx, suite, []api.TaskSpec{{Argv: argv}})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	var tk api.Task
	waitFor(t, 60*time.Second, "task finished", func() (bool, string) {
		tk, err = c.Task(ctx, ids[0])
		return err == nil && tk.State == api.TaskFinished, fmt.Sprint(tk.State, err)
	})
	return tk
}

func writeFile0600(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(body+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A server with --tls-auto on 127.0.0.1 makes a CA and prints its
// fingerprint; its join tokens carry it; an agent given such a token (in
// a file) pins the CA, registers, runs a task, and after a restart with
// no join token at all still trusts the server by the CA it kept.
func TestTLSAgentPinsTheServersCA(t *testing.T) {
	s := startTLSServer(t, "", "--tls-auto")
	certs, err := tlsca.LoadCerts(s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	fp := tlsca.Fingerprint(certs[0])
	waitFor(t, 5*time.Second, "fingerprint printed", func() (bool, string) {
		return strings.Contains(s.output(), fp) && strings.Contains(s.output(), "export NODEMGR_CA_CERT="+s.caFile), s.output()
	})
	tk := s.joinToken(t)
	if tk.CAFingerprint != fp || !strings.HasSuffix(tk.Secret, "."+fp) {
		t.Fatalf("join token %q (ca_fingerprint %q) does not carry the CA's fingerprint %s", tk.Secret, tk.CAFingerprint, fp)
	}

	dataDir := passable(t, t.TempDir()) // its tasks run as another user, who must pass
	args := []string{"agent", "--server", s.url(), "--data-dir", dataDir, "--name", "pinned",
		"--reconnect-min", "100ms", "--reconnect-max", "500ms"}
	a := start(t, "agent pinned", append(args, "--join-token-file", writeFile0600(t, tk.Secret))...)
	s.waitOnline(t, "pinned")
	if got := s.runTask(t, "over-tls", "echo", "hello over TLS"); got.Result == nil || got.Result.Stdout != "hello over TLS\n" {
		t.Fatalf("task result %+v, want its output", got.Result)
	}
	if !strings.Contains(a.output(), "pinned the server's CA") {
		t.Errorf("agent output does not say it pinned the CA:\n%s", a.output())
	}
	if strings.Contains(a.output(), "warning: --join-token") {
		t.Errorf("agent warned about a join token given in a file")
	}
	kept, err := tlsca.LoadCerts(filepath.Join(dataDir, "server-ca.crt"))
	if err != nil || tlsca.Fingerprint(kept[0]) != fp {
		t.Fatalf("agent's kept CA: %v; want the server's", err)
	}

	// Restart with its credential and the kept CA only.
	a.signal(syscall.SIGTERM)
	a.wait(20 * time.Second)
	b := start(t, "agent pinned again", args...)
	waitFor(t, 30*time.Second, "agent reconnected", func() (bool, string) {
		return strings.Contains(b.output(), "connected"), b.output()
	})
	s.waitOnline(t, "pinned")
	s.runTask(t, "over-tls-again", "true")
}

// An agent whose join token pins another CA refuses the server before it
// sends the secret, says why, and stops.
func TestTLSAgentRefusesAnotherCA(t *testing.T) {
	s := startTLSServer(t, "", "--tls-auto")
	other, _, err := tlsca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	secret, _, _ := strings.Cut(s.joinToken(t).Secret, ".")
	a := start(t, "agent impostor", "agent", "--server", s.url(), "--data-dir", t.TempDir(), "--name", "impostor",
		"--join-token-file", writeFile0600(t, secret+"."+other.Fingerprint()))
	if code := a.wait(30 * time.Second); code == 0 {
		t.Fatalf("agent with a join token pinning another CA exited 0, want an error:\n%s", a.output())
	}
	for _, want := range []string{"does not hold the CA the join token pins", other.Fingerprint(), "create a new join token"} {
		if !strings.Contains(a.output(), want) {
			t.Errorf("agent output lacks %q:\n%s", want, a.output())
		}
	}
	nodes, err := s.client(t).Nodes(context.Background(), "")
	if err != nil || len(nodes) != 0 {
		t.Errorf("nodes = %v, %v; want none registered", nodes, err)
	}
}

// The CLI verifies the server by --ca-cert or NODEMGR_CA_CERT; without it
// the server is refused with an error that says what to pass, and plain
// HTTP to it is told to use https.
func TestTLSClientNeedsTheCA(t *testing.T) {
	s := startTLSServer(t, "", "--tls-auto")
	cli := func(env ...string) (string, int) {
		cmd := exec.Command(binary, "node", "ls")
		cmd.Env = append(os.Environ(), append([]string{"NODEMGR_TOKEN=" + s.token, "NODEMGR_CA_CERT=", "GORACE=atexit_sleep_ms=0"}, env...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	tokenFile := writeFile0600(t, s.token)
	tests := []struct {
		name string
		env  []string
		code int
		want string
	}{
		{"no CA", []string{"NODEMGR_ADDR=" + s.url()}, 1, "pass the server's CA with --ca-cert"},
		{"plain HTTP", []string{"NODEMGR_ADDR=http://" + s.addr}, 1, "the server speaks HTTPS"},
		{"CA from the environment", []string{"NODEMGR_ADDR=" + s.url(), "NODEMGR_CA_CERT=" + s.caFile}, 0, ""},
		{"token from a file", []string{"NODEMGR_ADDR=" + s.url(), "NODEMGR_CA_CERT=" + s.caFile, "NODEMGR_TOKEN=", "NODEMGR_TOKEN_FILE=" + tokenFile}, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := cli(tc.env...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("node ls = %d %q, want %d with %q", code, out, tc.code, tc.want)
			}
		})
	}
}

// A server with a certificate it was given serves it; an agent trusting
// the certificate's CA with --server-ca registers and connects; join
// tokens carry no fingerprint then.
func TestTLSGivenCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := tlsca.LoadOrCreate(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue([]string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	caFile := filepath.Join(dir, "ca", "ca.crt")

	s := startTLSServer(t, caFile, "--tls-cert", certFile, "--tls-key", keyFile)
	if _, err := os.Stat(filepath.Join(s.dataDir, "ca.crt")); err == nil {
		t.Errorf("a server with a given certificate made a CA of its own")
	}
	tk := s.joinToken(t)
	if tk.CAFingerprint != "" || strings.Contains(tk.Secret, ".") {
		t.Errorf("join token %q carries a fingerprint %q; a given certificate has none to pin", tk.Secret, tk.CAFingerprint)
	}
	start(t, "agent given", "agent", "--server", s.url(), "--server-ca", caFile, "--data-dir", t.TempDir(),
		"--name", "given", "--join-token-file", writeFile0600(t, tk.Secret))
	s.waitOnline(t, "given")
}
