package release

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
)

// Main is cmd/release: it parses args, builds, and returns the exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	version := fs.String("version", "", "version to stamp, starting with a digit (default from the newest v* tag, else 0.0.0+git.HASH)")
	commit := fs.String("commit", "", "commit to stamp (default git's HEAD, -dirty for a modified tree)")
	out := fs.String("out", "dist", "directory the release is written to")
	arches := fs.String("arch", "amd64,arm64", "Linux architectures to build, comma-separated")
	noDeb := fs.Bool("no-deb", false, "skip the Debian packages")
	maintainer := fs.String("maintainer", "", `the Debian package's maintainer, "Name <address>" (default "$DEBFULLNAME <$DEBEMAIL>" as Debian's tools take it, else git's user.name and user.email)`)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := Options{Version: *version, Commit: *commit, OutDir: *out, RepoDir: ".", NoDeb: *noDeb,
		Maintainer: *maintainer, Date: GitDate(ctx, ".")}
	if o.Maintainer == "" {
		o.Maintainer = DefaultMaintainer(ctx, o.RepoDir)
	}
	if o.Version == "" {
		o.Version = GitVersion(ctx, o.RepoDir)
	}
	if o.Commit == "" {
		o.Commit = GitCommit(ctx, o.RepoDir)
	}
	for _, a := range strings.Split(*arches, ",") {
		o.Targets = append(o.Targets, Target{OS: "linux", Arch: strings.TrimSpace(a)})
	}
	arts, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	sums, err := os.ReadFile(filepath.Join(o.OutDir, "SHA256SUMS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	fmt.Printf("built %d binaries in %s:\n%s", len(arts), o.OutDir, sums)
	return 0
}
