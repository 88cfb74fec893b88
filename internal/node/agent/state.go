package agent

import (
	"github.com/nodemgr/nodemgr/internal/base/atomicfile"

	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// state is what the agent keeps on disk between runs, in <data>/agent.json,
// mode 0600: its identity, its credential, and how far it has handled the
// server's notifications.
type state struct {
	NodeID            string            `json:"node_id,omitempty"`
	Server            string            `json:"server,omitempty"`
	Credential        string            `json:"credential,omitempty"`
	CredentialIssued  time.Time         `json:"credential_issued,omitempty"`
	CredentialExpires time.Time         `json:"credential_expires,omitempty"`
	LastSeq           uint64            `json:"last_seq"`
	Tags              []string          `json:"tags,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Groups            []string          `json:"groups,omitempty"`
}

func statePath(dataDir string) string { return filepath.Join(dataDir, "agent.json") }

func loadState(dataDir string) (state, error) {
	var st state
	b, err := os.ReadFile(statePath(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read agent state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("agent state %s is corrupt (%v): move it away to register afresh", statePath(dataDir), err)
	}
	return st, nil
}

// save writes the state atomically: a crash leaves the old or the new file.
func (st state) save(dataDir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(statePath(dataDir), b); err != nil {
		return fmt.Errorf("save agent state: %w", err)
	}
	return nil
}

// serverMoved handles saved state made with another server URL. A
// credential is only good at the coordinator that issued it (any of its
// replicas), so the agent registers afresh, unless it is told the
// coordinator is the same one at a new address (nodemgr dev on another
// --listen): then it keeps its identity and notes the new URL.
func (a *Agent) serverMoved() error {
	if a.cfg.SameCoordinator {
		a.log.Info("the coordinator's address changed since last run; keeping this node's identity", "was", a.st.Server, "now", a.cfg.Servers[0])
		a.st.Server = a.cfg.Servers[0]
		return a.st.save(a.cfg.DataDir)
	}
	a.log.Warn("server changed since last run; registering afresh", "was", a.st.Server, "now", a.cfg.Server)
	a.st = state{}
	forgetServerCA(a.cfg.DataDir)
	return nil
}
