// Package cli is the nodemgr command line: the daemons (server, agent, dev)
// and the client verbs (node, token, join-token, user, bench). main calls
// Main and exits with what it returns.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Version and Commit are stamped at build time by the release tool
// (go run ./cmd/release): -ldflags "-X .../internal/cli.Version=1.2.3
// -X .../internal/cli.Commit=abc123...". Agents report Version to the server.
var (
	Version = "dev"
	Commit  = ""
)

// versionLine is what nodemgr --version prints after "nodemgr version ":
// the version, the commit (stamped, else the one go build recorded) and
// the toolchain and platform, and whether it is the agent-only build:
// enough to tell two builds apart in a bug report.
func versionLine() string {
	commit := Commit
	if commit == "" {
		commit = buildVCSRevision()
	}
	if commit == "" {
		commit = "unknown"
	}
	build := ""
	switch {
	case agentOnly:
		build = ", agent only"
	case clientOnly:
		build = ", client only"
	}
	return fmt.Sprintf("%s (commit %s, %s %s/%s%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, build)
}

// buildVCSRevision is the commit go build stamped, with "-dirty" for a
// modified tree; empty when built without VCS information (-buildvcs=false).
func buildVCSRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// env is what a command needs from the outside world; tests replace it.
type env struct {
	stdin io.Reader
	// stdout and stderr are for people: control characters in what they
	// print show escaped (termsafe.go). rawStdout and rawStderr carry byte
	// streams as they are: a command's output, logs, files.
	stdout, stderr       io.Writer
	rawStdout, rawStderr io.Writer
	getenv               func(string) string

	conn *clientConn // how client commands reach the server; set before a command runs
	// warnedInsecure: the --insecure-http warning was given.
	warnedInsecure bool
}

// Main runs the nodemgr command line and returns the process exit code.
// clientHelp is what every build's root help says of the client
// commands.
const clientHelp = `Client commands read NODEMGR_ADDR, NODEMGR_TOKEN (or NODEMGR_TOKEN_FILE) and
NODEMGR_CA_CERT, or --addr, --token-file and --ca-cert.

Exit codes: 0 done; 1 the operation failed (an error, a failed task, a
container that failed to start); 2 the command line is wrong (usage: an
unknown command or flag, a flag's value that cannot be right, a required
flag missing); exec passes on the command's own code, 255 if it could
not run.

Topics: nodemgr help templates | suites | pools | ensembles`

func Main(args []string) int {
	if code, ok := relayed(args); ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{stdin: os.Stdin, stdout: &safeWriter{w: os.Stdout}, stderr: &safeWriter{w: os.Stderr},
		rawStdout: os.Stdout, rawStderr: os.Stderr, getenv: os.Getenv}
	if path := os.Getenv("NODEMGR_CPUPROFILE"); path != "" {
		stopProfile := startCPUProfile(path)
		defer stopProfile()
	}
	return run(ctx, e, args)
}

// run runs one command line with e's streams and returns the exit code:
// 0, the command's own (exitError), exitUsage for a command line that
// cannot run, else 1.
func run(ctx context.Context, e *env, args []string) int {
	root := newRoot(e)
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		// Only a shell asking for completions reads them, and walking
		// every command's flags for them is a tenth of a command's start.
		addCompletions(root, e)
	}
	root.SetArgs(args)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(e.stderr, "error:", describe(err))
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return 1
}

// exitError ends the process with a code after the command already said why.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// namesField reports whether msg already names field as one of its
// ": "-separated segments ("onboard: share: must be ..."), so describe
// does not say it twice.
func namesField(msg, field string) bool {
	return strings.HasPrefix(msg, field) || strings.Contains(msg, ": "+field+": ")
}

// describe adds what to do next to errors from the server.
func describe(err error) string {
	var clear *cleartext.Error
	if errors.As(err, &clear) {
		// The client names its Go option; the CLI's users have a flag.
		return (&cleartext.Error{URL: clear.URL, Setting: insecureSetting}).Error()
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		return errdefs.Message(err)
	}
	msg := errdefs.Message(err)
	if ce.Field != "" && !namesField(msg, ce.Field) {
		msg = ce.Field + ": " + msg
	}
	switch ce.Code {
	case "unauthenticated":
		return msg + "\n(set NODEMGR_TOKEN or NODEMGR_TOKEN_FILE, or pass --token-file, to a valid API token; `nodemgr dev` and `nodemgr server` print the admin token on first start)"
	case "permission_denied":
		return msg
	}
	return msg
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "nodemgr",
		Short:         "Compute nodes on demand, and the work that runs on them",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			warnSecretFlags(cmd, e)
			conn, err := resolveConn(cmd, e)
			e.conn = conn
			return err
		},
	}
	root.PersistentFlags().String("addr", "", "server address (default $NODEMGR_ADDR or http://127.0.0.1:7070)")
	root.PersistentFlags().String("token", "", "API token (default $NODEMGR_TOKEN); visible to other local users, prefer --token-file or NODEMGR_TOKEN")
	root.PersistentFlags().String("token-file", "", "file holding the API token ($NODEMGR_TOKEN_FILE)")
	root.PersistentFlags().Bool("insecure-http", false, "send the API token over plain http:// to an address other than loopback, where anyone on the path can read it ($NODEMGR_INSECURE_HTTP); without it such a request is refused: use https://")
	root.PersistentFlags().String("ca-cert", "", "PEM file of the CA the server's certificate is checked against, e.g. the server's DATA_DIR/ca.crt ($NODEMGR_CA_CERT; default the system's roots)")
	root.PersistentFlags().String("log-level", "info", "log level of daemons: debug, info, warn, error")
	root.PersistentFlags().String("log-format", "text", "log format of daemons: text or json")
	addCommands(root, e)
	root.SetHelpCommand(newHelpCmd(root))
	strictUsage(root)
	return root
}

// clientFor builds an API client from flags and the environment.
func clientFor(cmd *cobra.Command, e *env) *client.Client {
	conn := e.conn
	if conn == nil { // a command run without the root (tests)
		conn, _ = resolveConn(cmd, e)
	}
	var opts []client.Option
	if conn.roots != nil {
		opts = append(opts, client.WithRootCAs(conn.roots))
	}
	if conn.insecureHTTP {
		opts = append(opts, client.AllowInsecureHTTP())
		if !e.warnedInsecure {
			e.warnedInsecure = true
			warnInsecureHTTP(e, conn)
		}
	}
	return client.New(conn.addr, conn.token, opts...)
}

// newLogger builds the daemons' logger from the persistent flags.
func newLogger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	levelName, _ := cmd.Flags().GetString("log-level")
	format, _ := cmd.Flags().GetString("log-format")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format: %q is not text or json", format)
}

// startCPUProfile writes a CPU profile of this process to path.PID until the
// returned function runs: a tool for performance work on the daemons, set
// with NODEMGR_CPUPROFILE.
func startCPUProfile(path string) func() {
	f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
