package cli

import (
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/execute/rsync"
)

// TestRsyncRelayDispatch checks that nodemgr rsync-relay is the rsync
// executor's relay, ahead of the command line's parsing (its arguments
// are rsync's): without a socket it fails as ssh does, with 255, where an
// unknown command would be a usage error (2).
func TestRsyncRelayDispatch(t *testing.T) {
	if code := Main([]string{rsync.RelayCommand}); code != 255 {
		t.Errorf("nodemgr %s = exit %d, want 255 (the relay's usage)", rsync.RelayCommand, code)
	}
	if code := Main([]string{rsync.RelayCommand, t.TempDir() + "/no.sock", "nodemgr-target", "rsync", "--server", "-s"}); code != 255 {
		t.Errorf("nodemgr %s with no socket = exit %d, want 255", rsync.RelayCommand, code)
	}
}
