package orchestrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/filecopy"
	"github.com/nodemgr/nodemgr/internal/base/hw"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// BootstrapConfig says how an agent is put onto a pool machine.
type BootstrapConfig struct {
	// ServerURL is the server's URL as the machines reach it.
	ServerURL string
	// InsecureHTTP lets their agents reach a plain http:// ServerURL
	// beyond loopback (the operator accepted it: --agent-insecure-http).
	InsecureHTTP bool
	// Binaries are static nodemgr binaries, one per architecture; the one
	// whose ELF machine matches the machine's `uname -m` is delivered.
	Binaries []string
	// BinaryDir holds more of them, named nodemgr-linux-GOARCH (what
	// the release tool builds); read at each bootstrap, so new builds
	// dropped in need no restart.
	BinaryDir string
	// Self is the server's own executable: delivered to a machine of its
	// arch that none of the above serves, if it is static.
	Self string
	// StageDir is where the server stages each machine's files; default
	// the system's temporary directory.
	StageDir string
	// ServerCA is the PEM file of the CA the server's certificate comes
	// from, when the server made its own: pull-bootstrapped machines get
	// it to fetch their agent over TLS.
	ServerCA string
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
	if err := notWorldWritable("agent_binary", path); err != nil {
		return Binary{}, err
	}
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
// background, restarting it if it crashes until it stops cleanly. A
// template user other than root reaches root through sudo (privilege.go).
func (o *Orchestrator) bootstrap(ctx context.Context, spec api.PoolSpec, d store.Deployment) (copied, started time.Duration, err error) {
	ex, err := o.cluster.Executor(d.Machine())
	if err != nil {
		return 0, 0, err
	}
	ttl := time.Duration(spec.BootstrapTimeout)
	if ttl == 0 {
		ttl = DefaultBootstrapTimeout
	}
	// Bind the token to this machine before it exists: its agent must
	// register with the machine id read here, through the executor,
	// which only the orchestrator drives (see Deployment.MachineID).
	idScript, idArg := machineIDScript(hw.SystemMachineIDFiles, AgentDataDir), newMachineID()
	who, err := awaitLogin(ctx, ex, d, ttl, idScript, idArg)
	if err != nil {
		return 0, 0, err
	}
	bin, err := o.pickBinary(ctx, ex, d)
	if err != nil {
		return 0, 0, err
	}
	id := who.machineID
	if id == "" { // not root: through sudo, in a round trip of its own
		if id, err = readMachineID(ctx, ex, d, idScript, idArg); err != nil {
			return 0, 0, err
		}
	}
	if _, err := o.store.UpdateDeployment(ctx, d.ID, func(cur *store.Deployment) error {
		cur.MachineID = id
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("record the machine's id: %w", err)
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
	art, err := o.cfg.Bootstrap.artifact(bin)
	if err != nil {
		return 0, 0, err
	}
	if err := stageFiles(stage, art, compressFor(ex), who.withTaskUser(o.agentConfig(spec, d, token, false))); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := deliver(ctx, ex, d, who, stage); err != nil {
		return 0, 0, fmt.Errorf("copy the agent to the machine: %w", err)
	}
	copied = time.Since(t0)
	var out bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: asRoot("/bin/sh", AgentDir+"/start.sh"),
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

// awaitLogin waits, up to within, until the machine's executor can run a
// command, and returns who it runs as (checkLogin, whose command is the
// probe): a cloud machine's SSH server answers tens of seconds after its
// provider says it runs, and until then the port refuses or times out
// (errdefs.ErrUnavailable). Any other failure is returned at once.
func awaitLogin(ctx context.Context, ex execute.Executor, d store.Deployment, within time.Duration, idScript, idArg string) (login, error) {
	deadline := time.Now().Add(within)
	wait := 250 * time.Millisecond
	for {
		who, err := checkLogin(ctx, ex, d, idScript, idArg)
		switch {
		case err == nil:
			return who, nil
		case !errors.Is(err, errdefs.ErrUnavailable) || time.Now().Add(wait).After(deadline):
			return login{}, fmt.Errorf("reach the machine: %w", err)
		}
		select {
		case <-ctx.Done():
			return login{}, fmt.Errorf("reach the machine: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// machineIDScript prints the machine id an agent with data dir dataDir
// will register with, found as hw.MachineID finds it: the first of
// systemFiles that holds one ("uninitialized" is none), else the data
// dir's; a machine with neither is given $1 in the data dir, so that its
// id is known before its agent starts. It needs only a POSIX shell, tr,
// mkdir and mv (busybox has them).
func machineIDScript(systemFiles []string, dataDir string) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	b.WriteString("for f in")
	for _, f := range systemFiles {
		b.WriteString(" " + shellQuote(f))
	}
	b.WriteString(`; do
  id=$(tr -d ' \t\r\n' 2>/dev/null <"$f") || id=
  if [ -n "$id" ] && [ "$id" != uninitialized ]; then echo "$id"; exit 0; fi
done
`)
	file := shellQuote(filepath.Join(dataDir, hw.MachineIDFile))
	b.WriteString(`id=$(tr -d ' \t\r\n' 2>/dev/null <` + file + `) || id=
if [ -z "$id" ] || [ "$id" = uninitialized ]; then
  mkdir -p ` + shellQuote(dataDir) + `
  (umask 077 && echo "$1" >` + file + `.tmp && mv -f ` + file + `.tmp ` + file + `)
  id=$1
fi
echo "$id"
`)
	return b.String()
}

// newMachineID is the id machineIDScript gives a machine that has none.
func newMachineID() string {
	var seed [16]byte
	rand.Read(seed[:])
	return hex.EncodeToString(seed[:])
}

// readMachineID reads (or gives, newID) a machine the id its agent will
// register with, as root; see machineIDScript.
func readMachineID(ctx context.Context, ex execute.Executor, d store.Deployment, idScript, newID string) (string, error) {
	var out, errOut bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{
		Argv:   asRoot("/bin/sh", "-c", idScript, "sh", newID),
		Stdout: &out, Stderr: &errOut, Timeout: execTimeout})
	if err != nil {
		return "", fmt.Errorf("read the machine's id: %w", err)
	}
	return machineIDFrom(code, out.String(), errOut.String())
}

// machineIDFrom is the id in the output of machineIDScript, which exited
// code.
func machineIDFrom(code int, out, errOut string) (string, error) {
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.ContainsAny(id, " \n") {
		return "", fmt.Errorf("read the machine's id: exit %d, %q: %s", code, lastBytes(id, 100), strings.TrimSpace(lastBytes(errOut, 300)))
	}
	return id, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// pickBinary chooses the binary for the machine's architecture. With one
// candidate there is nothing to choose: start.sh checks the arch on the
// machine, which saves a round trip.
func (o *Orchestrator) pickBinary(ctx context.Context, ex execute.Executor, d store.Deployment) (Binary, error) {
	bins, err := o.cfg.Bootstrap.candidates()
	if err != nil {
		return Binary{}, err
	}
	if len(bins) == 1 {
		return bins[0], nil
	}
	var out bytes.Buffer
	code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: []string{"uname", "-m"}, Stdout: &out, Timeout: execTimeout})
	if err != nil || code != 0 {
		return Binary{}, fmt.Errorf("ask the machine its architecture (uname -m): exit %d, %v", code, err)
	}
	return chooseBinary(bins, strings.TrimSpace(out.String()))
}

// chooseBinary is the first of bins built for arch (uname -m's name).
func chooseBinary(bins []Binary, arch string) (Binary, error) {
	var have []string
	for _, b := range bins {
		if b.Arch == arch {
			return b, nil
		}
		have = append(have, b.Arch)
	}
	return Binary{}, errdefs.Field("agent_binary", "the machine is %s and the server has agent binaries for %v only; put nodemgr-linux-%s in --agent-binaries DIR (go run ./cmd/release builds it) or pass it with --agent-binary",
		arch, have, goArch(arch))
}

// candidates are the binaries the server can deliver, most preferred
// first: those given one by one, those in BinaryDir, then the server's
// own executable where it is static (a dev build may not be) and no
// other serves its arch.
func (c BootstrapConfig) candidates() ([]Binary, error) {
	var bins []Binary
	for _, p := range c.Binaries {
		b, err := CheckBinary(p)
		if err != nil {
			return nil, err
		}
		bins = append(bins, b)
	}
	if c.BinaryDir != "" {
		dir, err := ReadBinaryDir(c.BinaryDir)
		if err != nil {
			return nil, err
		}
		bins = append(bins, dir...)
	}
	if c.Self == "" {
		return noneIsError(bins)
	}
	self, err := CheckBinary(c.Self)
	if err != nil {
		if len(bins) == 0 {
			return nil, err // say why this binary cannot go
		}
		return bins, nil
	}
	if _, err := chooseBinary(bins, self.Arch); err != nil {
		bins = append(bins, self)
	}
	return bins, nil
}

func noneIsError(bins []Binary) ([]Binary, error) {
	if len(bins) == 0 {
		return nil, errdefs.Field("agent_binary", "the server knows no agent binary to deliver; pass --agent-binaries DIR (go run ./cmd/release builds one) or --agent-binary FILE")
	}
	return bins, nil
}

// BinaryPrefix starts the names of the binaries an --agent-binaries
// directory holds: nodemgr-linux-amd64, nodemgr-linux-arm64 (the release
// tool's names).
const BinaryPrefix = "nodemgr-linux-"

// ReadBinaryDir reads the agent binaries in dir: every file named
// nodemgr-linux-ARCH (ARCH without dots, so the release's .modules
// files beside them are skipped), each checked to be a static Linux
// executable. A directory with none is an error: the operator meant to
// give some.
func ReadBinaryDir(dir string) ([]Binary, error) {
	if err := notWorldWritable("agent_binaries", dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, errdefs.Field("agent_binaries", "%v; give a directory holding nodemgr-linux-amd64, nodemgr-linux-arm64 (go run ./cmd/release builds them)", err)
	}
	var bins []Binary
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, BinaryPrefix) || strings.Contains(name, ".") || e.IsDir() {
			continue
		}
		b, err := CheckBinary(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if want := goArch(b.Arch); want != strings.TrimPrefix(name, BinaryPrefix) {
			return nil, errdefs.Field("agent_binaries", "%s is a binary for %s: rename it %s%s", filepath.Join(dir, name), want, BinaryPrefix, want)
		}
		bins = append(bins, b)
	}
	if len(bins) == 0 {
		return nil, errdefs.Field("agent_binaries", "%s holds no %sARCH binary; build them with go run ./cmd/release", dir, BinaryPrefix)
	}
	return bins, nil
}

// notWorldWritable refuses an agent binary, or the directory of them,
// that every user of the server's machine may write: the binary runs as
// root on every pool machine, so whoever can replace it, or add one for
// an arch the directory lacks, owns them all. Refused rather than warned
// about: a warning in the server's log protects no machine, and the fix
// (chmod o-w) is one command. A path that cannot be read is left to the
// caller to report.
func notWorldWritable(field, path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o002 == 0 {
		return nil
	}
	return errdefs.Field(field, "%s is writable by every user of this machine (mode %04o), and what it holds runs as root on every pool machine: run chmod o-w %s",
		path, fi.Mode().Perm(), path)
}

// goArch is GOARCH's name for an arch as uname -m names it.
func goArch(uname string) string {
	switch uname {
	case "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	case "i686":
		return "386"
	case "armv7l":
		return "arm"
	}
	return uname // riscv64, ppc64le, s390x are the same in both
}

// agentConfig is the agent's config file for a machine.
func (o *Orchestrator) agentConfig(spec api.PoolSpec, d store.Deployment, token string, withCA bool) []byte {
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
	if o.cfg.Bootstrap.InsecureHTTP {
		cfg["insecure_http"] = true
	}
	if withCA {
		cfg["server_ca"] = AgentDir + "/server-ca.crt"
	}
	if ep := o.noticeEndpoint(d); ep != "" {
		cfg["imds"] = ep // a spot machine: drain and be replaced on notice
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

// noticeEndpoint is the metadata service where d's agent hears its
// provider's notices about the machine (provision.Noticer); "" none.
func (o *Orchestrator) noticeEndpoint(d store.Deployment) string {
	pr, err := o.cluster.Provider(d.Provider)
	if err != nil {
		return ""
	}
	if n, ok := pr.(provision.Noticer); ok {
		return n.NoticeEndpoint(d.Machine())
	}
	return ""
}

// startScript checks the machine's arch and starts the agent in the
// background under a loop that restarts it after a crash and ends when it
// exits 0 (a graceful shutdown).
func startScript(art Artifact) string {
	arch := art.Arch
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
if [ -f "$dir/nodemgr.gz" ]; then
  gzip -dc "$dir/nodemgr.gz" >"$dir/nodemgr.new"
  rm -f "$dir/nodemgr.gz"
fi
chmod 0755 "$dir/nodemgr.new"
mv -f "$dir/nodemgr.new" "$dir/nodemgr"
` + superviseScript + `
`
}

// stageFiles writes the tree copied onto the machine: the agent (as its
// compressed artifact, a fifth of the binary's size, where the copy
// crosses a network; stripped only where it does not), its config and the
// script that unpacks and starts it.
func stageFiles(dir string, art Artifact, compress bool, config []byte) error {
	src, name := art.Stripped, "nodemgr.new"
	if compress {
		src, name = art.Path, "nodemgr.gz"
	}
	if err := linkOrCopy(src, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("stage the agent binary %s: %w", src, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.yaml"), config, 0o600); err != nil {
		return fmt.Errorf("stage the agent config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "start.sh"), []byte(startScript(art)), 0o755); err != nil {
		return fmt.Errorf("stage the start script: %w", err)
	}
	return os.Chmod(dir, 0o700)
}

// compressFor says whether the agent crosses a network on its way through
// ex: not when its record says its machines are on the server's host (a
// container on the server's engine, this host itself), where unpacking it
// would cost more than the copy saves.
func compressFor(ex execute.Executor) bool {
	d, ok := execute.ByCapability(ex.Capability())
	return !ok || !d.OnHost
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return filecopy.File(src, dst, 0o755)
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
	if code, err := ex.Exec(ctx, d.Machine(), execute.Command{Argv: asRoot("/bin/sh", "-c", agentLogScript),
		Stdout: &out, Timeout: 5 * time.Second}); err != nil || code != 0 {
		return ""
	}
	return strings.Join(strings.Fields(lastBytes(out.String(), 600)), " ")
}

// agentLogScript prints the end of what tells why an agent did not
// register: its log where the restart loop runs it, its unit's journal
// under systemd, else cloud-init's output (a pull bootstrap that failed
// before the agent ran).
const agentLogScript = `if [ -s ` + AgentDir + `/agent.log ]; then tail -n 5 ` + AgentDir + `/agent.log
elif command -v journalctl >/dev/null 2>&1 && [ -n "$(journalctl -u nodemgr-agent -q --no-pager -n 1 2>/dev/null)" ]; then journalctl -u nodemgr-agent -q --no-pager -n 5
elif [ -f /var/log/cloud-init-output.log ]; then tail -n 5 /var/log/cloud-init-output.log
fi`

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + strings.ToValidUTF8(s[len(s)-n:], "")
}
