package agent

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// startLocalAPI runs a standalone agent whose local API also listens on
// listen, and waits until it answers on port at 127.0.0.1.
func startLocalAPI(t *testing.T, listen, token string) *Agent {
	t.Helper()
	a, err := New(Config{Standalone: true, DataDir: t.TempDir(), OnboardShare: -1, LocalAPIListen: listen, LocalAPIToken: token},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New(local_api_listen %s) = %v", listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; a.Close() })
	_, port, _ := net.SplitHostPort(listen)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("the local API does not listen on %s after 10s", listen)
		}
	}
}

// localGet asks GET /v1/status of the local API at url with auth as the
// Authorization header and returns the status code.
func localGet(t *testing.T, c *http.Client, url, auth string) (int, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/status", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestLocalAPIBeyondLoopbackSpeaksTLS: the audit found the TCP local API
// plain HTTP even off loopback, so its token crossed the network in clear.
// Beyond loopback (here 0.0.0.0, reached at 127.0.0.1) it speaks HTTPS with
// a certificate from the agent's own CA, which clients pin like the
// server's; on loopback it stays plain HTTP.
func TestLocalAPIBeyondLoopbackSpeaksTLS(t *testing.T) {
	const token = "local-api-secret-0123456789"
	port := freePort(t)
	a := startLocalAPI(t, "0.0.0.0:"+port, token)

	caFile := filepath.Join(a.cfg.DataDir, localAPICADir, tlsca.CertFile)
	certs, err := tlsca.LoadCerts(caFile)
	if err != nil {
		t.Fatalf("the local API's CA: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(a.cfg.DataDir, localAPICADir, tlsca.KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the local API's CA key: %v, %v; want mode 0600", fi, err)
	}
	fp := tlsca.Fingerprint(certs[0])
	if got := a.wl.currentPresence().LocalAPI.CAFingerprint; got != fp {
		t.Errorf("presence's local API CA fingerprint = %q, want %q", got, fp)
	}

	// Plain HTTP gets nowhere: Go's TLS server answers 400.
	if code, err := localGet(t, http.DefaultClient, "http://127.0.0.1:"+port, "Bearer "+token); err == nil && code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TCP local API beyond loopback = %d, want it refused", code)
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tlsca.Pool(certs...)}}}
	pinning := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsca.PinnedConfig(fp, "127.0.0.1", nil)}}
	for _, tc := range []struct {
		name   string
		client *http.Client
		auth   string
		want   int
	}{
		{"CA file, token", trusting, "Bearer " + token, http.StatusOK},
		{"pinned fingerprint, token", pinning, "Bearer " + token, http.StatusOK},
		{"scheme in lower case (RFC 7235)", trusting, "bearer " + token, http.StatusOK},
		{"no token", trusting, "", http.StatusUnauthorized},
		{"wrong token", trusting, "Bearer not-the-token-at-all", http.StatusUnauthorized},
	} {
		code, err := localGet(t, tc.client, "https://127.0.0.1:"+port, tc.auth)
		if err != nil || code != tc.want {
			t.Errorf("%s: GET https://127.0.0.1:%s/v1/status = %d, %v; want %d", tc.name, port, code, err, tc.want)
		}
	}
	// A client that trusts only the system's roots does not trust it.
	if _, err := localGet(t, &http.Client{}, "https://127.0.0.1:"+port, "Bearer "+token); err == nil {
		t.Errorf("a client without the agent's CA was served")
	}
}

// TestLocalAPIOnLoopbackStaysPlain: on loopback the token stays on the
// machine, as with the server, and no CA is made.
func TestLocalAPIOnLoopbackStaysPlain(t *testing.T) {
	const token = "local-api-secret-0123456789"
	port := freePort(t)
	a := startLocalAPI(t, "127.0.0.1:"+port, token)
	for _, auth := range []string{"Bearer " + token, "BEARER " + token} {
		if code, err := localGet(t, http.DefaultClient, "http://127.0.0.1:"+port, auth); err != nil || code != http.StatusOK {
			t.Errorf("plain HTTP to the TCP local API on loopback with %q = %d, %v; want 200", auth[:6], code, err)
		}
	}
	if _, err := os.Stat(filepath.Join(a.cfg.DataDir, localAPICADir)); !os.IsNotExist(err) {
		t.Errorf("a loopback local API made a CA: %v", err)
	}
	if fp := a.wl.currentPresence().LocalAPI.CAFingerprint; fp != "" {
		t.Errorf("presence's local API CA fingerprint = %q on loopback, want none", fp)
	}
}
