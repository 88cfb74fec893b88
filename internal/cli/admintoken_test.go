package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/syncbuf"
)

// TestServerTightensAdminTokenFile: an admin-token file others may read,
// left by an earlier install, is made 0600 when the server opens its
// store, with a warning; a private one is left alone, quietly.
func TestServerTightensAdminTokenFile(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{
		{0o644, true},
		{0o640, true},
		{0o600, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "admin-token")
			if err := os.WriteFile(path, []byte("nmu_x\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			f := serverFlags{dataDir: dir}
			st, lock, err := f.openStore(t.Context(), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatalf("openStore = %v", err)
			}
			st.Close()
			lock.Release()
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("admin-token of mode %s after the server opened its store: %v, %v; want 0600", tc.mode, fi.Mode(), err)
			}
			if got := strings.Contains(logs.String(), "admin-token file was readable by other users"); got != tc.warn {
				t.Errorf("admin-token of mode %s: logs %q, want a warning %v", tc.mode, logs.String(), tc.warn)
			}
		})
	}
}

// TestServerKeepsAdminTokenOutOfNonTerminalOutput: under systemd the
// server's stdout is the journal, so on first start and on
// --reset-admin-token it says where the token is (the 0600 file) and never
// prints the token itself.
func TestServerKeepsAdminTokenOutOfNonTerminalOutput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"first start", nil},
		{"reset", []string{"--reset-admin-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr syncbuf.Buffer
			e := &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, rawStdout: &stdout, rawStderr: &stderr,
				getenv: func(string) string { return "" }}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan int, 1)
			args := append([]string{"server", "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-level", "debug"}, tc.args...)
			go func() { done <- run(ctx, e, args) }()
			file := filepath.Join(dir, "admin-token")
			want := "Its API token is in " + file + " (mode 0600)"
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(stdout.String(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("server stdout = %q after 30s, want it to hold %q; stderr:\n%s", stdout.String(), want, stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("server exited %d on cancel, want 0; stderr:\n%s", code, stderr.String())
			}
			token, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			secret := strings.TrimSpace(string(token))
			if secret == "" {
				t.Fatalf("%s is empty", file)
			}
			for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
				if strings.Contains(out, secret) {
					t.Errorf("server %s holds the admin token:\n%s", name, out)
				}
			}
		})
	}
}
