package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// startTLSServer runs a server with cfg over a fresh store in dir, on
// 127.0.0.1, and returns it with its admin token.
func startTLSServer(t *testing.T, dir string, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	s, _, admin := newServer(t, dir, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return s, admin
}

// TestSelfMadeCA: with --tls-auto the server speaks HTTPS with a
// certificate from its own CA, kept across restarts, and its join tokens
// carry the CA's pin, which registration ignores.
func TestSelfMadeCA(t *testing.T) {
	dir := t.TempDir()
	s, admin := startTLSServer(t, dir, Config{TLSAuto: true})
	info := s.TLS()
	if !info.Enabled || info.CAFile != filepath.Join(dir, "ca.crt") || !info.CACreated {
		t.Fatalf("TLS() = %+v, want a CA made now in %s", info, dir)
	}
	if _, err := tlsca.ParseFingerprint("pin", info.CAFingerprint); err != nil {
		t.Fatalf("CA fingerprint: %v", err)
	}
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Errorf("URL() = %s, want https", s.URL())
	}

	certs, err := tlsca.LoadCerts(info.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlsca.Pool(certs...)}}}
	do := func(c *http.Client, token, method, path, body string) (int, string, error) {
		req, _ := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if _, _, err := do(&http.Client{}, admin, "GET", "/v1/whoami", ""); err == nil {
		t.Errorf("GET without the CA = nil error, want an unknown authority")
	}
	if code, body, err := do(trusting, admin, "GET", "/v1/whoami", ""); err != nil || code != http.StatusOK {
		t.Fatalf("GET with the CA = %d %s %v, want 200", code, body, err)
	}

	code, body, err := do(trusting, admin, "POST", "/v1/join-tokens", "{}")
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create join token = %d %s %v", code, body, err)
	}
	var tk api.Token
	decode(t, body, &tk)
	if tk.CAFingerprint != info.CAFingerprint || !strings.HasSuffix(tk.Secret, "."+info.CAFingerprint) {
		t.Fatalf("join token secret %q, ca_fingerprint %q; want both to carry %s", tk.Secret, tk.CAFingerprint, info.CAFingerprint)
	}
	reg := `{"machine_id":"m1","data_dir":"/d","name":"n1","hardware":{"cores":2,"memory_bytes":1073741824}}`
	if code, body, _ := do(trusting, tk.Secret, "POST", "/v1/agent/register", reg); code != http.StatusOK {
		t.Errorf("register with the whole join token = %d %s, want 200", code, body)
	}
	secret, _, _ := strings.Cut(tk.Secret, ".")
	reg = strings.Replace(reg, "m1", "m2", 1)
	if code, body, _ := do(trusting, secret, "POST", "/v1/agent/register", reg); code != http.StatusOK {
		t.Errorf("register with the join token's secret alone = %d %s, want 200", code, body)
	}
	// API tokens carry no pin.
	if code, body, _ = do(trusting, admin, "POST", "/v1/tokens", "{}"); code != http.StatusCreated || strings.Contains(body, "sha256:") {
		t.Errorf("create API token = %d %s, want no pin", code, body)
	}

	// The same CA at the next start, whose certificate the old root verifies.
	again, _ := startTLSServer(t, dir, Config{TLSAuto: true})
	if got := again.TLS(); got.CAFingerprint != info.CAFingerprint || got.CACreated {
		t.Errorf("after a restart TLS() = %+v, want the same CA %s, not a new one", got, info.CAFingerprint)
	}
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
}

func TestSetupTLS(t *testing.T) {
	dir := t.TempDir()
	ca, _, err := tlsca.LoadOrCreate(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	keyDER, _ := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)

	tests := []struct {
		name     string
		cfg      Config
		tls      string // describe()
		errField string
	}{
		{"loopback: plain HTTP", Config{Listen: "127.0.0.1:7070"}, "off", ""},
		{"localhost: plain HTTP", Config{Listen: "localhost:7070"}, "off", ""},
		{"ipv6 loopback: plain HTTP", Config{Listen: "[::1]:7070"}, "off", ""},
		{"all addresses: self-made CA", Config{Listen: ":7070"}, "self-made CA", ""},
		{"other address: self-made CA", Config{Listen: "0.0.0.0:7070"}, "self-made CA", ""},
		{"--tls-auto on loopback", Config{Listen: "127.0.0.1:7070", TLSAuto: true}, "self-made CA", ""},
		{"given certificate", Config{Listen: "0.0.0.0:7070", TLSCert: certFile, TLSKey: keyFile}, "given certificate", ""},
		{"certificate without key", Config{TLSCert: certFile}, "", "tls_cert"},
		{"certificate and --tls-auto", Config{TLSCert: certFile, TLSKey: keyFile, TLSAuto: true}, "", "tls_auto"},
		{"missing certificate file", Config{TLSCert: certFile + "x", TLSKey: keyFile}, "", "tls_cert"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = filepath.Join(dir, string(rune('a'+i)))
			got, err := setupTLS(tc.cfg)
			if tc.errField != "" {
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.errField {
					t.Fatalf("setupTLS(%+v) = %v, want an error naming %s", tc.cfg, err, tc.errField)
				}
				return
			}
			if err != nil || !strings.HasPrefix(got.Describe(), tc.tls) {
				t.Fatalf("setupTLS(%+v) = %s, %v; want %s", tc.cfg, got.Describe(), err, tc.tls)
			}
		})
	}
}

// A server on every address is reached at 127.0.0.1 from its own machine
// (nodemgr dev's agent does), a name its certificate carries.
func TestURLOfAWildcardListen(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := New(Config{DataDir: dir, Listen: "0.0.0.0:0"}, st, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	defer func() { cancel(); <-done }()
	if !strings.HasPrefix(s.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL() = %s, want https://127.0.0.1:PORT", s.URL())
	}
	certs, err := tlsca.LoadCerts(s.TLS().CAFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlsca.Pool(certs...)}}}
	resp, err := c.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatalf("GET %s/healthz = %v", s.URL(), err)
	}
	resp.Body.Close()
}

// TestAgentServerURLInClear: pool machines are told the server's URL, and
// send their join token and credential there. A plain http:// one beyond
// loopback is refused at start unless the operator accepts it, and then
// the machines' agents are told they may use it.
func TestAgentServerURLInClear(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"http://127.0.0.1:7070", false, true},
		{"https://10.0.0.5:7070", false, true},
		{"http://10.0.0.5:7070", false, false},
		{"http://10.0.0.5:7070", true, true},
	} {
		t.Run(fmt.Sprintf("%s insecure=%v", tc.url, tc.insecure), func(t *testing.T) {
			dir := t.TempDir()
			st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), log)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			s, err := New(Config{DataDir: dir, AgentServerURL: tc.url, AgentInsecureHTTP: tc.insecure}, st, log)
			if tc.ok != (err == nil) {
				t.Fatalf("New(agent server URL %s, insecure %v) = %v, want ok %v", tc.url, tc.insecure, err, tc.ok)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "--agent-insecure-http") || !strings.Contains(err.Error(), "agent_server_url") {
					t.Errorf("the refusal %q names neither the setting nor the way out", err)
				}
				return
			}
			s.Close()
		})
	}
}
