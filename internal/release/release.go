// Package release builds what a nodemgr release ships: static nodemgr
// binaries for each Linux architecture with the version and commit stamped
// in, the agent-only build of each in agent/ (for pool machines: the
// server's --agent-binaries), their SHA256SUMS, a list of the modules each one holds (an SBOM of
// sorts, from the binary's own build information), and the Debian package
// (deb.go). cmd/release is its command line.
package release

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/sha256sum"
)

// cliPkg holds the Version and Commit variables the linker stamps.
const cliPkg = "github.com/nodemgr/nodemgr/internal/cli"

// Target is one platform a release builds for.
type Target struct{ OS, Arch string }

// Name is the binary's file name: nodemgr-linux-amd64. The server's
// --agent-binaries directory expects these names.
func (t Target) Name() string { return "nodemgr-" + t.OS + "-" + t.Arch }

// DefaultTargets are the platforms agents and servers run on.
var DefaultTargets = []Target{{"linux", "amd64"}, {"linux", "arm64"}}

// Options say what to build and where.
type Options struct {
	Version string   // e.g. 1.2.0; a Debian version, so it starts with a digit
	Commit  string   // the full commit hash, "-dirty" appended for a modified tree
	OutDir  string   // created if missing
	Targets []Target // default DefaultTargets
	// RepoDir is the module's root (where go.mod is); default ".".
	RepoDir string
	Stderr  io.Writer // the go tool's output; default os.Stderr
	// NoDeb skips the Debian packages (one per Linux target).
	NoDeb bool
}

// Artifact is one built binary.
type Artifact struct {
	Target    Target
	Path      string
	SHA256    string
	AgentOnly bool // built with -tags agentonly: the agent and its workers alone
}

// AgentDir is where in OutDir the agent-only builds go, under the names
// --agent-binaries expects.
const AgentDir = "agent"

// Build builds a static binary per target into OutDir with NAME.modules
// beside each one, the agent-only build of each into OutDir/agent (also
// with its modules), a Debian package of each full binary (unless NoDeb),
// and SHA256SUMS over binaries and packages. It returns the binaries, the
// full ones first.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("release: out dir: %w", err)
	}
	var arts, agents, sums []Artifact
	for _, t := range o.targets() {
		a, err := buildOne(ctx, o, t, false)
		if err != nil {
			return nil, err
		}
		arts, sums = append(arts, a), append(sums, a)
		ag, err := buildOne(ctx, o, t, true)
		if err != nil {
			return nil, err
		}
		agents, sums = append(agents, ag), append(sums, ag)
		if o.NoDeb || t.OS != "linux" {
			continue
		}
		d, err := buildDeb(o, a)
		if err != nil {
			return nil, err
		}
		sums = append(sums, d)
	}
	if err := WriteChecksums(filepath.Join(o.OutDir, "SHA256SUMS"), sums); err != nil {
		return nil, err
	}
	return append(arts, agents...), nil
}

// buildDeb packages a as a .deb and checksums it.
func buildDeb(o Options, a Artifact) (Artifact, error) {
	path, err := BuildDeb(o, a)
	if err != nil {
		return Artifact{}, err
	}
	sum, err := fileSHA256(path)
	return Artifact{Target: a.Target, Path: path, SHA256: sum}, err
}

func (o Options) check() error {
	if o.Version == "" || o.Version[0] < '0' || o.Version[0] > '9' {
		return fmt.Errorf("release: version %q must start with a digit (Debian versions do): pass -version 1.2.0", o.Version)
	}
	if strings.ContainsAny(o.Version, " _/") {
		return fmt.Errorf("release: version %q may not hold spaces, underscores or slashes", o.Version)
	}
	if o.OutDir == "" {
		return fmt.Errorf("release: out dir is empty: pass -out DIR")
	}
	return nil
}

func (o Options) targets() []Target {
	if len(o.Targets) == 0 {
		return DefaultTargets
	}
	return o.Targets
}

// buildOne runs go build for one target: no cgo (the binary runs on any
// Linux, including minimal images with no C library), -trimpath (no build
// machine paths in the binary), and the version stamped in; agentOnly
// builds the agent alone (-tags agentonly) into AgentDir. The binary's
// modules are written beside it.
func buildOne(ctx context.Context, o Options, t Target, agentOnly bool) (Artifact, error) {
	dir := o.OutDir
	args := []string{"build", "-trimpath", "-buildvcs=false"}
	if agentOnly {
		dir = filepath.Join(o.OutDir, AgentDir)
		args = append(args, "-tags", "agentonly")
	}
	out, err := filepath.Abs(filepath.Join(dir, t.Name()))
	if err != nil {
		return Artifact{}, err
	}
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Commit=%s", cliPkg, o.Version, cliPkg, o.Commit)
	cmd := exec.CommandContext(ctx, "go", append(args, "-ldflags", ldflags, "-o", out, "./cmd/nodemgr")...)
	cmd.Dir = o.RepoDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.OS, "GOARCH="+t.Arch)
	cmd.Stdout, cmd.Stderr = o.stderr(), o.stderr()
	if err := cmd.Run(); err != nil {
		return Artifact{}, fmt.Errorf("release: build %s: %w", out, err)
	}
	if err := writeModules(out, out+".modules"); err != nil {
		return Artifact{}, err
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{Target: t, Path: out, SHA256: sum, AgentOnly: agentOnly}, nil
}

func (o Options) stderr() io.Writer {
	if o.Stderr == nil {
		return os.Stderr
	}
	return o.Stderr
}

// fileSHA256 is the hex SHA-256 of the file at path, as sha256sum writes it.
func fileSHA256(path string) (string, error) {
	d, _, err := sha256sum.File(path)
	if err != nil {
		return "", fmt.Errorf("release: checksum: %w", err)
	}
	return sha256sum.Hex(d), nil
}

// WriteChecksums writes sha256sum's format ("HASH  NAME", NAME relative
// to path's directory: agent/nodemgr-linux-amd64), so that `sha256sum -c
// SHA256SUMS` checks a download.
func WriteChecksums(path string, arts []Artifact) error {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("release: checksums: %w", err)
	}
	lines := make([]string, 0, len(arts))
	for _, a := range arts {
		p, err := filepath.Abs(a.Path)
		if err != nil {
			return fmt.Errorf("release: checksums: %w", err)
		}
		name, err := filepath.Rel(dir, p)
		if err != nil || strings.HasPrefix(name, "..") {
			return fmt.Errorf("release: checksums: %s is not under %s", a.Path, dir)
		}
		lines = append(lines, a.SHA256+"  "+filepath.ToSlash(name)+"\n")
	}
	sort.Strings(lines)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		return fmt.Errorf("release: checksums: %w", err)
	}
	return nil
}

// writeModules writes the modules a binary was built from, read back from
// the binary itself (what `go version -m` prints): the Go version, each
// module with its version and go.sum hash, and the build settings.
func writeModules(binary, path string) error {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("release: modules of %s: %w", binary, err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# modules in %s, from its build information (go version -m)\n", filepath.Base(binary))
	b.WriteString(info.String())
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("release: modules: %w", err)
	}
	return nil
}

// GitCommit is the repo's HEAD commit, with "-dirty" when the tree has
// changes; empty outside a git checkout.
func GitCommit(ctx context.Context, repoDir string) string {
	out, err := gitOutput(ctx, repoDir, "rev-parse", "HEAD")
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(out)
	if status, err := gitOutput(ctx, repoDir, "status", "--porcelain", "--untracked-files=no"); err == nil && strings.TrimSpace(status) != "" {
		commit += "-dirty"
	}
	return commit
}

// GitVersion is the version of the newest v* tag (v1.2.0 → 1.2.0, with
// git describe's -N-gHASH suffix made Debian-friendly: 1.2.0+3.gabc1234),
// or 0.0.0+git.HASH without one.
func GitVersion(ctx context.Context, repoDir string) string {
	if out, err := gitOutput(ctx, repoDir, "describe", "--tags", "--match", "v[0-9]*"); err == nil {
		v := strings.TrimPrefix(strings.TrimSpace(out), "v")
		if i := strings.Index(v, "-"); i >= 0 {
			v = v[:i] + "+" + strings.ReplaceAll(v[i+1:], "-", ".")
		}
		return v
	}
	if out, err := gitOutput(ctx, repoDir, "rev-parse", "--short=12", "HEAD"); err == nil {
		return "0.0.0+git." + strings.TrimSpace(out)
	}
	return "0.0.0"
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return string(out), err
}
