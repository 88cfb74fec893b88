// Package release builds what a nodemgr release ships: static nodemgr
// binaries for each Linux architecture with the version and commit stamped
// in, the agent-only build of each in agent/ (for pool machines: the
// server's --agent-binaries), SHA256SUMS over everything, a list of the modules each one holds (an SBOM of
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
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

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
	Stderr  io.Writer // progress and the go tool's output; default os.Stderr
	// NoDeb skips the Debian packages (one per Linux target).
	NoDeb bool
	// Maintainer is the Debian package's maintainer, "Name <address>";
	// required unless NoDeb.
	Maintainer string
	// Date is the release's date, for the Debian changelog; default now.
	Date time.Time
}

// Artifact is one built binary.
type Artifact struct {
	Target     Target
	Path       string
	SHA256     string
	AgentOnly  bool // built with -tags agentonly: the agent and its workers alone
	ClientOnly bool // built with -tags clientonly: the commands that talk to a server
}

// AgentDir is where in OutDir the agent-only builds go, under the names
// --agent-binaries expects.
const AgentDir = "agent"

// ClientDir is where in OutDir the client builds go: for workstations,
// whose command lines start in a third of the whole binary's time.
const ClientDir = "client"

// builds are the builds of each target: the whole nodemgr, the agent
// alone, the client alone.
var builds = []struct {
	dir, tags, label string
}{{"", "", ""}, {AgentDir, "agentonly", " (agent only)"}, {ClientDir, "clientonly", " (client only)"}}

// Build builds a static binary per target into OutDir with NAME.modules
// beside each one, the agent-only build of each into OutDir/agent and the
// client build into OutDir/client (also with their modules), a Debian package of each full binary (unless NoDeb),
// and SHA256SUMS over every file it wrote. It says on Stderr as each step
// starts and ends, with how long it took. It returns the binaries, the
// full ones first, then the agents', then the clients'.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("release: out dir: %w", err)
	}
	var arts, agents, clients []Artifact
	var written []string // every file Build writes into OutDir, for SHA256SUMS
	for _, t := range o.targets() {
		for _, b := range builds {
			what := t.OS + "/" + t.Arch + ": " + path.Join(b.dir, t.Name()) + b.label
			var a Artifact
			err := o.step(what, func() (err error) {
				a, err = buildOne(ctx, o, t, b.dir, b.tags)
				return err
			})
			if err != nil {
				return nil, err
			}
			written = append(written, a.Path, a.Path+".modules")
			switch {
			case a.AgentOnly:
				agents = append(agents, a)
			case a.ClientOnly:
				clients = append(clients, a)
			default:
				arts = append(arts, a)
			}
		}
		if o.NoDeb || t.OS != "linux" {
			continue
		}
		err := o.step(t.OS+"/"+t.Arch+": Debian package", func() error {
			path, err := BuildDeb(ctx, o, arts[len(arts)-1])
			written = append(written, path)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := WriteChecksums(filepath.Join(o.OutDir, "SHA256SUMS"), written); err != nil {
		return nil, err
	}
	return append(append(arts, agents...), clients...), nil
}

// step runs one step of a build, saying on o's stderr when it starts and
// how long it took: a release builds for minutes, and the go tool is
// silent while it works.
func (o Options) step(what string, f func() error) error {
	fmt.Fprintf(o.stderr(), "release: %s: building\n", what)
	start := time.Now()
	err := f()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(o.stderr(), "release: %s: failed after %s\n", what, took)
		return err
	}
	fmt.Fprintf(o.stderr(), "release: %s: done in %s\n", what, took)
	return nil
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
	if !o.NoDeb && !maintainerRE.MatchString(o.Maintainer) {
		return fmt.Errorf("release: maintainer %q is not \"Name <address>\": pass -maintainer, or set DEBFULLNAME and DEBEMAIL, or git's user.name and user.email", o.Maintainer)
	}
	return nil
}

func (o Options) repoDir() string {
	if o.RepoDir == "" {
		return "."
	}
	return o.RepoDir
}

func (o Options) targets() []Target {
	if len(o.Targets) == 0 {
		return DefaultTargets
	}
	return o.Targets
}

// buildOne runs go build for one target: no cgo (the binary runs on any
// Linux, including minimal images with no C library), -trimpath (no build
// machine paths in the binary), and the version stamped in; with tags
// (agentonly, clientonly) into dir in OutDir. The binary's modules are
// written beside it.
func buildOne(ctx context.Context, o Options, t Target, dir, tags string) (Artifact, error) {
	args := []string{"build", "-trimpath", "-buildvcs=false"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := filepath.Abs(filepath.Join(o.OutDir, dir, t.Name()))
	if err != nil {
		return Artifact{}, err
	}
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Commit=%s", cliPkg, o.Version, cliPkg, o.Commit)
	cmd := exec.CommandContext(ctx, "go", append(args, "-ldflags", ldflags, "-o", out, "./cmd/nodemgr")...)
	cmd.Dir = o.repoDir()
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
	return Artifact{Target: t, Path: out, SHA256: sum, AgentOnly: tags == "agentonly", ClientOnly: tags == "clientonly"}, nil
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

// WriteChecksums writes the SHA-256 of each of files in sha256sum's
// format ("HASH  NAME", NAME relative to path's directory:
// agent/nodemgr-linux-amd64), so that `sha256sum -c SHA256SUMS` checks a
// download.
func WriteChecksums(path string, files []string) error {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("release: checksums: %w", err)
	}
	lines := make([]string, 0, len(files))
	for _, f := range files {
		p, err := filepath.Abs(f)
		if err != nil {
			return fmt.Errorf("release: checksums: %w", err)
		}
		name, err := filepath.Rel(dir, p)
		if err != nil || strings.HasPrefix(name, "..") {
			return fmt.Errorf("release: checksums: %s is not under %s", f, dir)
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.ToSlash(name)+"\n")
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

// DefaultMaintainer is who releases: "$DEBFULLNAME <$DEBEMAIL>", as
// Debian's tools (dch) take it, else git's user.name and user.email in
// repoDir; empty when neither is set.
func DefaultMaintainer(ctx context.Context, repoDir string) string {
	name, email := os.Getenv("DEBFULLNAME"), os.Getenv("DEBEMAIL")
	if name == "" || email == "" {
		n, _ := gitOutput(ctx, repoDir, "config", "user.name")
		e, _ := gitOutput(ctx, repoDir, "config", "user.email")
		name, email = strings.TrimSpace(n), strings.TrimSpace(e)
	}
	if name == "" || email == "" {
		return ""
	}
	return name + " <" + email + ">"
}

// GitDate is the time of the repo's HEAD commit (so the same commit gives
// the same changelog); zero outside a git checkout.
func GitDate(ctx context.Context, repoDir string) time.Time {
	out, err := gitOutput(ctx, repoDir, "log", "-1", "--format=%ct")
	if err != nil {
		return time.Time{}
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(sec, 0)
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
