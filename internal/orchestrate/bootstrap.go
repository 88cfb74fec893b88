package orchestrate

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/execute"
	"github.com/nodemgr/nodemgr/internal/store"
)

// BootstrapConfig says how an agent is put onto a pool machine.
type BootstrapConfig struct {
	// ServerURL is the server's URL as the machines reach it.
	ServerURL string
	// Binaries are static nodemgr binaries, one per architecture; the one
	// whose ELF machine matches the machine's `uname -m` is delivered.
	Binaries []string
	// StageDir is where the server stages each machine's files; default
	// the system's temporary directory.
	StageDir string
}

// On the machine: the binary, its config and its log live in AgentDir,
// its state in AgentDataDir.
const (
	AgentDir     = "/opt/nodemgr"
	AgentDataDir = "/var/lib/nodemgr"
	execTimeout  = 30 * time.Second
)

// Binary is a nodemgr binary the server can deliver.
type Binary struct {
	Path string
	Arch string // as uname -m says it: x86_64, aarch64 ...
}

// CheckBinary reads an agent binary's architecture and refuses one that
// is not a static Linux executable: a minimal image has no dynamic loader
// and C library for it.
func CheckBinary(path string) (Binary, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Binary{}, errdefs.Field("agent_binary", "%s is not a Linux executable nodemgr can deliver (%v); build one with CGO_ENABLED=0 go build ./cmd/nodemgr", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return Binary{}, errdefs.Field("agent_binary", "%s is dynamically linked, and machines from minimal images have no loader for it; build a static one with CGO_ENABLED=0 go build ./cmd/nodemgr and pass it with --agent-binary", path)
		}
	}
	arch := map[elf.Machine]string{elf.EM_X86_64: "x86_64", elf.EM_AARCH64: "aarch64", elf.EM_386: "i686",
		elf.EM_ARM: "armv7l", elf.EM_RISCV: "riscv64", elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x"}[f.Machine]
	if arch == "" {
		return Binary{}, errdefs.Field("agent_binary", "%s is for %s, which nodemgr does not deliver to", path, f.Machine)
	}
	return Binary{Path: path, Arch: arch}, nil
}

// bootstrap delivers the agent onto a machine through its executor and
// starts it, supervised: the binary, a config with a single-use join token
// bound to the deployment, and a start script, copied in one tree, then
// one command that checks the machine's arch and starts the agent in the
// background, restarting it if it crashes until it stops cleanly.
func (o *Orchestrator) bootstrap(ctx context.Context, spec api.PoolSpec, d store.Deployment) (copied, started time.Duration, err error) {
	ex, err := o.cluster.Executor(d.Machine())
	if err != nil {
		return 0, 0, err
	}
	bin, err := o.pickBinary(ctx, ex, d)
	if err != nil {
		return 0, 0, err
	}
	ttl := time.Duration(spec.BootstrapTimeout)
	if ttl == 0 {
		ttl = DefaultBootstrapTimeout
	}
	token, err := o.cluster.JoinToken(ctx, d.ID, spec.Groups, ttl)
	if err != nil {
		return 0, 0, fmt.Errorf("join token: %w", err)
	}
	stage, err := os.MkdirTemp(o.cfg.Bootstrap.StageDir, "nodemgr-bootstrap-")
	if err != nil {
		return 0, 0, fmt.Errorf("stage the agent's files: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := stageFiles(stage, bin, o.agentConfig(spec, d, token)); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := ex.CopyTo(ctx, d.Machine(), stage, AgentDir); err != nil {
		return 0, 0, fmt.Errorf("copy the agent to the machine: %w", err)
	}
	copied = time.Since(t0)
	var out bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: []string{"/bin/sh", AgentDir + "/start.sh"},
		Stdout: &out, Stderr: &out, Timeout: execTimeout})
	started = time.Since(t0) - copied
	if err != nil {
		return copied, started, fmt.Errorf("start the agent: %w", err)
	}
	if code != 0 {
		return copied, started, fmt.Errorf("start the agent: %s/start.sh exited %d: %s", AgentDir, code, strings.TrimSpace(lastBytes(out.String(), 500)))
	}
	return copied, started, nil
}

// pickBinary chooses the binary for the machine's architecture. With one
// binary there is nothing to choose: start.sh checks the arch on the
// machine, which saves a round trip.
func (o *Orchestrator) pickBinary(ctx context.Context, ex execute.Executor, d store.Deployment) (Binary, error) {
	var bins []Binary
	for _, p := range o.cfg.Bootstrap.Binaries {
		b, err := CheckBinary(p)
		if err != nil {
			return Binary{}, err
		}
		bins = append(bins, b)
	}
	switch len(bins) {
	case 0:
		return Binary{}, errdefs.Field("agent_binary", "the server knows no agent binary to deliver; pass --agent-binary")
	case 1:
		return bins[0], nil
	}
	var out bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: []string{"uname", "-m"}, Stdout: &out, Timeout: execTimeout})
	if err != nil || code != 0 {
		return Binary{}, fmt.Errorf("ask the machine its architecture (uname -m): exit %d, %v", code, err)
	}
	arch := strings.TrimSpace(out.String())
	var have []string
	for _, b := range bins {
		if b.Arch == arch {
			return b, nil
		}
		have = append(have, b.Arch)
	}
	return Binary{}, errdefs.Field("agent_binary", "the machine is %s and the server has agent binaries for %v only; pass one for %s with --agent-binary", arch, have, arch)
}

// agentConfig is the agent's config file for a machine.
func (o *Orchestrator) agentConfig(spec api.PoolSpec, d store.Deployment, token string) []byte {
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelPool] = spec.Name
	o.mu.Lock()
	server := o.cfg.Bootstrap.ServerURL
	o.mu.Unlock()
	cfg := map[string]any{
		"server":     server,
		"data_dir":   AgentDataDir,
		"join_token": token,
		"name":       d.Name,
		"labels":     labels,
	}
	if len(spec.Tags) > 0 {
		cfg["tags"] = spec.Tags
	}
	if len(spec.Groups) > 0 {
		cfg["groups"] = spec.Groups
	}
	b, _ := yaml.Marshal(cfg) // maps of strings always encode
	return append([]byte("# Written by nodemgr's orchestrator for deployment "+d.ID+"; the join token works once.\n"), b...)
}

// startScript checks the machine's arch and starts the agent in the
// background under a loop that restarts it after a crash and ends when it
// exits 0 (a graceful shutdown).
func startScript(arch string) string {
	return `#!/bin/sh
# Written by nodemgr's orchestrator: starts the agent, restarting it after
# a crash, until it stops cleanly.
set -e
dir=` + AgentDir + `
if command -v uname >/dev/null 2>&1; then
  have=$(uname -m)
  if [ "$have" != "` + arch + `" ]; then
    echo "this machine is $have and the agent binary is for ` + arch + `; give the server one for $have with --agent-binary" >&2
    exit 3
  fi
fi
chmod 0700 "$dir"
chmod 0600 "$dir/agent.yaml"
# Fail now, with the reason, if the binary cannot run here at all.
"$dir/nodemgr" --version >/dev/null
mkdir -p ` + AgentDataDir + `
# No nohup in minimal images: the loop ignores SIGHUP itself, and
# without a terminal there is none to send it anyway.
sh -c 'trap "" HUP; while :; do "$0/nodemgr" agent --config "$0/agent.yaml" && exit 0; echo "nodemgr agent exited $?; restarting in 1s"; sleep 1; done' "$dir" >>"$dir/agent.log" 2>&1 </dev/null &
`
}

// stageFiles writes the tree copied onto the machine.
func stageFiles(dir string, bin Binary, config []byte) error {
	if err := linkOrCopy(bin.Path, filepath.Join(dir, "nodemgr")); err != nil {
		return fmt.Errorf("stage the agent binary %s: %w", bin.Path, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), config, 0o600); err != nil {
		return fmt.Errorf("stage the agent config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "start.sh"), []byte(startScript(bin.Arch)), 0o755); err != nil {
		return fmt.Errorf("stage the start script: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// agentLog is the end of a machine's agent log, for a failure's reason.
func (o *Orchestrator) agentLog(ctx context.Context, d store.Deployment) string {
	ex, err := o.cluster.Executor(d.Machine())
	if err != nil {
		return ""
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: []string{"tail", "-n", "5", AgentDir + "/agent.log"},
		Stdout: &out, Timeout: 5 * time.Second}); err != nil || code != 0 {
		return ""
	}
	return strings.Join(strings.Fields(lastBytes(out.String(), 600)), " ")
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + strings.ToValidUTF8(s[len(s)-n:], "")
}
