package agent

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
	"github.com/nodemgr/nodemgr/internal/base/tlsca/tlscatest"
)

// tlsServer serves HTTPS on 127.0.0.1 with a certificate from a fresh CA
// and returns its URL and the CA.
func tlsServer(t *testing.T) (string, *tlsca.CA) {
	t.Helper()
	return tlscatest.Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Authorization"))
	}))
}

func testAgent(t *testing.T, cfg Config) (*Agent, error) {
	t.Helper()
	a := &Agent{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return a, a.setupTransport()
}

// get asks the server through the agent's client and returns what the
// server saw in Authorization.
func get(a *Agent, url string) (string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+a.cfg.JoinToken)
	resp, err := a.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

// An agent whose join token pins the server's CA verifies the server by
// it, keeps the CA for its next starts and sends the secret without the
// pin; a pin of another CA refuses the server before anything is sent.
func TestJoinTokenPinsTheServer(t *testing.T) {
	url, ca := tlsServer(t)
	_, other := tlsServer(t)
	dir := t.TempDir()
	const secret = "nmj_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs"

	a, err := testAgent(t, Config{Server: url, DataDir: dir, JoinToken: secret + "." + other.Fingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(a, url)
	var pe *tlsca.PinError
	if !errors.As(err, &pe) || !isTLSTrouble(err) {
		t.Fatalf("GET with a join token pinning another CA = %v, want a pin error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, serverCAFile)); err == nil {
		t.Errorf("a refused CA was kept")
	}

	a, err = testAgent(t, Config{Server: url, DataDir: dir, JoinToken: secret + "." + strings.ToUpper(ca.Fingerprint())})
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.JoinToken != secret {
		t.Errorf("join token after setup = %q, want the secret alone", a.cfg.JoinToken)
	}
	if got, err := get(a, url); err != nil || got != "Bearer "+secret {
		t.Fatalf("GET with the right pin = %q, %v; want the secret alone sent", got, err)
	}
	certs, err := tlsca.LoadCerts(filepath.Join(dir, serverCAFile))
	if err != nil || tlsca.Fingerprint(certs[0]) != ca.Fingerprint() {
		t.Fatalf("kept CA: %v; want the server's", err)
	}

	// The next start needs no join token: the kept CA is a root.
	a, err = testAgent(t, Config{Server: url, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := a.http.Transport.(*http.Transport).TLSClientConfig; cfg.InsecureSkipVerify || cfg.RootCAs == nil {
		t.Errorf("TLS config with a kept CA: %+v, want it as the root", cfg)
	}
	if _, err := get(a, url); err != nil {
		t.Errorf("GET with the kept CA = %v", err)
	}

	// Without pin, kept CA or server_ca: the system's roots, which do
	// not know the server's CA.
	a, err = testAgent(t, Config{Server: url, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(a, url); err == nil || !strings.Contains(tlsTrouble(err), "--server-ca") {
		t.Errorf("GET with the system's roots = %v, want an unknown authority that points at --server-ca", err)
	}

	// server_ca given: trusted as it is.
	a, err = testAgent(t, Config{Server: url, DataDir: t.TempDir(), ServerCA: writeCA(t, ca)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(a, url); err != nil {
		t.Errorf("GET with server_ca = %v", err)
	}
}

func writeCA(t *testing.T, ca *tlsca.CA) string {
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSetupTransportRefuses(t *testing.T) {
	_, ca := tlsServer(t)
	_, other := tlsServer(t)
	const secret = "nmj_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs"
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"a pin over http", Config{Server: "http://10.0.0.1:7070", JoinToken: secret + "." + ca.Fingerprint()}, "server"},
		{"server_ca over http", Config{Server: "http://10.0.0.1:7070", ServerCA: writeCA(t, ca)}, "server"},
		{"a malformed pin", Config{Server: "https://10.0.0.1:7070", JoinToken: secret + ".sha256:beef"}, "join_token"},
		{"server_ca not the pinned CA", Config{Server: "https://10.0.0.1:7070", JoinToken: secret + "." + ca.Fingerprint(), ServerCA: writeCA(t, other)}, "server_ca"},
		{"server_ca missing", Config{Server: "https://10.0.0.1:7070", ServerCA: "/nonexistent/ca.crt"}, "server_ca"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			_, err := testAgent(t, tc.cfg)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("setupTransport(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
			}
		})
	}
}

// Registration fails for good, saying why, when the agent cannot trust
// the server or speaks plain HTTP to an HTTPS one.
func TestRegisterRefusesAnUntrustedServer(t *testing.T) {
	url, _ := tlsServer(t)
	_, other := tlsServer(t)
	const secret = "nmj_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs"
	tests := []struct {
		name   string
		cfg    Config
		errHas string
	}{
		{"plain HTTP", Config{Server: "http://" + strings.TrimPrefix(url, "https://"), JoinToken: secret}, "the server speaks HTTPS: use an https:// URL"},
		{"another CA pinned", Config{Server: url, JoinToken: secret + "." + other.Fingerprint()}, "does not hold the CA the join token pins"},
		{"no CA known", Config{Server: url, JoinToken: secret}, "--server-ca"},
		{"server_ca of another server", Config{Server: url, JoinToken: secret, ServerCA: writeCA(t, other)}, "signed by a CA this side does not trust"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			a, err := testAgent(t, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = a.ensureRegistered(t.Context())
			var fatal *fatalError
			if !errors.As(err, &fatal) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("ensureRegistered = %v, want a fatal error with %q", err, tc.errHas)
			}
		})
	}
}
