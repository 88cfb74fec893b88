package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// runBinary runs the nodemgr binary with env and returns stderr and the
// exit code, failing the test when it takes longer than within.
func runBinary(t *testing.T, env []string, within time.Duration, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), "NODEMGR_TOKEN=", "NODEMGR_ADDR=", "GORACE=atexit_sleep_ms=0"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(within):
		cmd.Process.Kill()
		<-done
		t.Fatalf("nodemgr %s still ran after %s; output:\n%s", strings.Join(args, " "), within, stderr.String())
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// TestNoTokenInClear drives the audit's two leaks with the real binary:
// `nodemgr whoami --addr http://10.77.3.1:P` with the admin token, and an
// agent whose server is plain http:// beyond loopback. Both stop before
// they dial: the address is TEST-NET (192.0.2.0/24), which nothing
// answers, so only a refusal that comes first ends them at once with this
// message.
func TestNoTokenInClear(t *testing.T) {
	const addr = "http://192.0.2.1:7070"
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("nmu_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs\n"), 0o600)
	stderr, code := runBinary(t, []string{"NODEMGR_TOKEN_FILE=" + tokenFile}, 20*time.Second, "whoami", "--addr", addr)
	if code != 1 || !strings.Contains(stderr, "refusing to send a token in clear text to "+addr) || !strings.Contains(stderr, "--insecure-http") {
		t.Errorf("whoami --addr %s = exit %d, %q; want a refusal that names --insecure-http", addr, code, stderr)
	}

	joinFile := filepath.Join(t.TempDir(), "join-token")
	os.WriteFile(joinFile, []byte("nmj_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrs\n"), 0o600)
	stderr, code = runBinary(t, nil, 20*time.Second, "agent", "--server", addr, "--data-dir", t.TempDir(), "--join-token-file", joinFile, "--name", "leaky")
	if code != 1 || !strings.Contains(stderr, "server: refusing to send a token in clear text to "+addr) || !strings.Contains(stderr, "insecure_http: true") {
		t.Errorf("agent --server %s = exit %d, %q; want a refusal naming server and insecure_http", addr, code, stderr)
	}
}

// TestLocalAPIOverTLS: an agent whose local API listens beyond loopback
// serves it over HTTPS with its own CA, whose fingerprint the server
// shows with the node; a client that pins it gets through with the token,
// plain HTTP does not.
func TestLocalAPIOverTLS(t *testing.T) {
	s := startServer(t)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	const token = "local-api-secret-0123456789"
	startOnline(t, s, "tls-local", "--local-api-listen", "0.0.0.0:"+port, "--local-api-token", token)
	var fp string
	waitFor(t, 20*time.Second, "the node's local API fingerprint", func() (bool, string) {
		n, err := s.client().Node(context.Background(), "tls-local")
		if err == nil && n.Presence != nil {
			fp = n.Presence.LocalAPI.CAFingerprint
		}
		return strings.HasPrefix(fp, "sha256:"), fmt.Sprint(fp, err)
	})
	show, _, code := s.run(t, "node", "show", "tls-local")
	if code != 0 || !strings.Contains(show, "(https, CA "+fp+"; token)") {
		t.Errorf("node show tls-local = exit %d:\n%s\nwant the local API's CA fingerprint", code, show)
	}

	url := "https://127.0.0.1:" + port + "/v1/status"
	pinned := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsca.PinnedConfig(fp, "127.0.0.1", nil)}}
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer " + token, http.StatusOK},
		{"bearer " + token, http.StatusOK},
		{"", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest("GET", url, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := pinned.Do(req)
		if err != nil {
			t.Fatalf("GET %s pinned to %s: %v", url, fp, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with %q = %d, want %d", url, strings.Split(tc.auth, " ")[0], resp.StatusCode, tc.want)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/v1/status")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the local API beyond loopback = %d, want it refused", resp.StatusCode)
		}
	}
	if _, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}).Get(url); err == nil {
		t.Errorf("a client without the agent's CA was served")
	}
}
