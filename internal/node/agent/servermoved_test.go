package agent

import (
	"log/slog"
	"testing"
)

// TestServerMoved: saved state made with another server URL is dropped (a
// credential is good only where it was issued), unless the agent is told
// the coordinator is the same one at a new address, as nodemgr dev is when
// it runs again with another --listen: then the node keeps its identity
// and the new URL is saved (it used to register afresh, and the server
// refused the takeover with a 409).
func TestServerMoved(t *testing.T) {
	for _, same := range []bool{false, true} {
		dir := t.TempDir()
		old := state{NodeID: "n-1", Server: "http://127.0.0.1:7181", Credential: "nmn_saved"}
		if err := old.save(dir); err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{Server: "http://127.0.0.1:7182", DataDir: dir, OnboardShare: -1, SameCoordinator: same},
			slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		kept := a.st
		a.Close()
		saved, err := loadState(dir)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case same && (kept.NodeID != "n-1" || kept.Credential != "nmn_saved" || saved.Server != "http://127.0.0.1:7182"):
			t.Errorf("same coordinator at a new URL: state %+v, saved %+v; want node n-1 kept and the new URL saved", kept, saved)
		case !same && kept.NodeID != "":
			t.Errorf("another server: state %+v, want it dropped (register afresh)", kept)
		}
	}
}
