package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// TestStandaloneStopsOnShutdown: a standalone agent has no server to say
// goodbye to; SIGTERM (Shutdown, as stopOnSignals calls it) must end it,
// or systemctl stop waits for its timeout and kills it.
func TestStandaloneStopsOnShutdown(t *testing.T) {
	for _, mode := range []string{api.ShutdownGraceful, api.ShutdownForce} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			a, err := New(Config{Standalone: true, DataDir: dir, OnboardShare: -1}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			done := make(chan error, 1)
			go func() { done <- a.Run(context.Background()) }()
			sock := filepath.Join(dir, "agent.sock")
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(sock); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no local API socket %s after 10s", sock)
				}
			}
			a.Shutdown(mode)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run after Shutdown(%s) = %v, want nil", mode, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("a standalone agent still runs 10s after Shutdown(%s)", mode)
			}
		})
	}
}
