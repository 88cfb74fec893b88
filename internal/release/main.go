package release

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := Options{Version: *version, Commit: *commit, OutDir: *out, RepoDir: "."}
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
	for _, a := range arts {
		fmt.Printf("%s  %s\n", a.SHA256, a.Path)
	}
	return 0
}
