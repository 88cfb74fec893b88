package tlsca

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, created, err := LoadOrCreate(t.TempDir())
	if err != nil || !created {
		t.Fatalf("LoadOrCreate = %v, created %v; want a new CA", err, created)
	}
	return ca
}

func TestLoadOrCreate(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreate(dir)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate(empty dir) = %v, created %v; want a new CA", err, created)
	}
	if !ca.Cert.IsCA || ca.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA certificate: IsCA %v, key %v; want an ECDSA CA", ca.Cert.IsCA, ca.Cert.PublicKeyAlgorithm)
	}
	for name, want := range map[string]os.FileMode{KeyFile: 0o600, CertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want mode %v", name, err, fi.Mode().Perm(), want)
		}
	}
	again, created, err := LoadOrCreate(dir)
	if err != nil || created {
		t.Fatalf("LoadOrCreate(dir with a CA) = %v, created %v; want the same CA loaded", err, created)
	}
	if again.Fingerprint() != ca.Fingerprint() {
		t.Errorf("reloaded CA fingerprint %s, want %s", again.Fingerprint(), ca.Fingerprint())
	}

	// Half a CA is not silently replaced: agents pinned the old one.
	os.Remove(filepath.Join(dir, KeyFile))
	if _, _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "restore it") {
		t.Errorf("LoadOrCreate(cert without key) = %v, want an error that says to restore the key", err)
	}
}

// The fingerprint is the SHA-256 of the SubjectPublicKeyInfo, as kubeadm
// computes its discovery hash.
func TestFingerprint(t *testing.T) {
	ca := newCA(t)
	spki, err := x509.MarshalPKIXPublicKey(ca.Cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	if want := "sha256:" + hex.EncodeToString(sum[:]); ca.Fingerprint() != want {
		t.Errorf("Fingerprint = %s, want %s", ca.Fingerprint(), want)
	}
}

func TestParseFingerprint(t *testing.T) {
	good := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		in, want string
		ok       bool
	}{
		{good, good, true},
		{strings.ToUpper(good), good, true},
		{" " + good + "\n", good, true},
		{strings.Repeat("ab", 32), "", false},
		{"sha256:" + strings.Repeat("ab", 31), "", false},
		{"sha256:" + strings.Repeat("zz", 32), "", false},
		{"md5:" + strings.Repeat("ab", 16), "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, err := ParseFingerprint("ca", tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseFingerprint(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "ca:") {
			t.Errorf("ParseFingerprint(%q) error %q does not name the field", tc.in, err)
		}
	}
}

func TestVerifyPinned(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	leaf := func(c *CA, hosts ...string) []*x509.Certificate {
		t.Helper()
		cert, err := c.Issue(hosts)
		if err != nil {
			t.Fatal(err)
		}
		var chain []*x509.Certificate
		for _, der := range cert.Certificate {
			x, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, x)
		}
		return chain
	}
	good := leaf(ca, "nodemgr.example", "10.0.0.5")
	// An impostor: its own certificate, with the pinned CA's
	// certificate (which is public) tacked on.
	impostor := append(leaf(other, "nodemgr.example")[:1], ca.Cert)
	tests := []struct {
		name   string
		chain  []*x509.Certificate
		host   string
		errHas string
		pinErr bool
	}{
		{"by name", good, "nodemgr.example", "", false},
		{"by address", good, "10.0.0.5", "", false},
		{"another CA", leaf(other, "nodemgr.example"), "nodemgr.example", "does not hold the CA the join token pins", true},
		{"impostor showing the pinned CA", impostor, "nodemgr.example", "verify the server's certificate against the pinned CA", false},
		{"host not in the certificate", good, "elsewhere.example", "--tls-san", false},
		{"no certificate", nil, "nodemgr.example", "no certificate", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VerifyPinned(tc.chain, ca.Fingerprint(), tc.host)
			if tc.errHas == "" {
				if err != nil || got == nil || Fingerprint(got) != ca.Fingerprint() {
					t.Fatalf("VerifyPinned = %v, %v; want the CA", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("VerifyPinned = %v, want an error with %q", err, tc.errHas)
			}
			var pe *PinError
			if errors.As(err, &pe) != tc.pinErr {
				t.Errorf("VerifyPinned error %T, PinError %v; want PinError %v", err, !tc.pinErr, tc.pinErr)
			}
		})
	}
}

// A client pinning the CA talks to a server with a certificate from it,
// and learns the CA; a client that knows the CA as a root does too; a
// client with neither is refused.
func TestHandshake(t *testing.T) {
	ca := newCA(t)
	cfg, err := ca.ServerConfig(Hosts("127.0.0.1:0", nil))
	if err != nil {
		t.Fatal(err)
	}
	// Not httptest's StartTLS: it would put its own certificate first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
		ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, cfg))
	defer srv.Close()
	url := "https://" + ln.Addr().String()

	get := func(tc *tls.Config) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var pinned *x509.Certificate
	if err := get(PinnedConfig(ca.Fingerprint(), "127.0.0.1", func(c *x509.Certificate) { pinned = c })); err != nil {
		t.Fatalf("GET with the pinned CA = %v, want ok", err)
	}
	if pinned == nil || Fingerprint(pinned) != ca.Fingerprint() {
		t.Errorf("pinned CA %v, want the server's CA", pinned)
	}
	if err := get(&tls.Config{RootCAs: Pool(pinned)}); err != nil {
		t.Errorf("GET with the CA as root = %v, want ok", err)
	}
	if err := get(&tls.Config{}); err == nil || !strings.Contains(Hint(err, "--ca-cert"), "--ca-cert") {
		t.Errorf("GET with system roots = %v, want an unknown authority error whose hint names --ca-cert", err)
	}
	if err := get(&tls.Config{RootCAs: Pool(pinned), ServerName: "elsewhere.example"}); err == nil || !strings.Contains(Hint(err, "--ca-cert"), "--tls-san") {
		t.Errorf("GET by a name the certificate lacks = %v, want a hint at --tls-san", err)
	}
	wrong := "sha256:" + strings.Repeat("0", 64)
	if err := get(PinnedConfig(wrong, "127.0.0.1", nil)); err == nil || !strings.Contains(err.Error(), wrong) {
		t.Errorf("GET with a wrong pin = %v, want an error naming the pin", err)
	}
}

func TestHosts(t *testing.T) {
	hosts := Hosts("0.0.0.0:7070", []string{"nat.example", "localhost"})
	host, _ := os.Hostname()
	for _, want := range []string{"localhost", "127.0.0.1", host, "nat.example"} {
		if !slices.Contains(hosts, want) {
			t.Errorf("Hosts = %q, lacks %q", hosts, want)
		}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil && (ip.IsUnspecified() || ip.IsLinkLocalUnicast()) {
			t.Errorf("Hosts = %q, has %s, which no one dials", hosts, h)
		}
	}
	if n := len(hosts); n != len(slices.Compact(slices.Sorted(slices.Values(hosts)))) {
		t.Errorf("Hosts = %q, has duplicates", hosts)
	}
	if hosts := Hosts("10.1.2.3:7070", nil); hosts[0] != "10.1.2.3" || net.ParseIP(hosts[0]) == nil {
		t.Errorf("Hosts(10.1.2.3:7070) = %q, want the listen address first", hosts)
	}
}
