package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
