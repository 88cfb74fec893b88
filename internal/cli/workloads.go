package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// Artifacts and services are managed on a node through the server
// (`nodemgr artifact ls NODE`), or on one agent through its local API
// without a server (`nodemgr artifact ls --agent-socket PATH`).

// workloadFlags adds --agent-socket to a workload command.
func workloadFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("agent-socket", "", "talk to this agent's local API socket instead of a server; then give no NODE ($NODEMGR_AGENT_SOCKET; the socket is <data_dir>/agent.sock)")
}

// nodeTarget picks the client and the node a workload command acts on, and
// returns the arguments after NODE.
func nodeTarget(cmd *cobra.Command, e *env, args []string) (*client.Client, string, []string, error) {
	if sock := agentSocket(cmd, e); sock != "" {
		return client.NewAgent(sock), "", args, nil
	}
	if len(args) == 0 {
		return nil, "", nil, fmt.Errorf("name the NODE (see `nodemgr node ls`), or use --agent-socket to talk to an agent directly")
	}
	return clientFor(cmd, e), args[0], args[1:], nil
}

// onNode is the RunE of a workload command: run gets the client and the
// node it acts on (see nodeTarget), and the arguments after NODE.
func onNode(e *env, run func(cmd *cobra.Command, c *client.Client, node string, rest []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, node, rest, err := nodeTarget(cmd, e, args)
		if err != nil {
			return err
		}
		return run(cmd, c, node, rest)
	}
}

// onNodeOne is onNode for a command that names exactly one thing on the
// node after NODE; what says what it is, for the error.
func onNodeOne(e *env, what string, run func(cmd *cobra.Command, c *client.Client, node, name string) error) func(*cobra.Command, []string) error {
	return onNode(e, func(cmd *cobra.Command, c *client.Client, node string, rest []string) error {
		if len(rest) != 1 {
			return fmt.Errorf("name one %s", what)
		}
		return run(cmd, c, node, rest[0])
	})
}

// nodeView builds a read-only command on a node: fetch a value (given
// the client, the node and the arguments after NODE) and print it, as
// JSON with --json. A nil print always prints JSON.
func nodeView[T any](e *env, use, short string, args int, fetch func(ctx context.Context, c *client.Client, node string, rest []string) (T, error), print func(*env, T)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  nodeArgs(args),
		RunE: func(cmd *cobra.Command, argv []string) error {
			c, node, rest, err := nodeTarget(cmd, e, argv)
			if err != nil {
				return err
			}
			if len(rest) != args {
				return fmt.Errorf("%s: give NODE (unless --agent-socket) and %d more argument(s)", use, args)
			}
			v, err := fetch(cmd.Context(), c, node, rest)
			if err != nil {
				return err
			}
			return output(e, asJSON || print == nil, v, print)
		},
	}
	if print != nil {
		cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	return cmd
}

// agentSocket is --agent-socket, else $NODEMGR_AGENT_SOCKET.
func agentSocket(cmd *cobra.Command, e *env) string {
	if sock, _ := cmd.Flags().GetString("agent-socket"); sock != "" {
		return sock
	}
	return e.getenv("NODEMGR_AGENT_SOCKET")
}

// nodeArgs accepts n arguments after NODE (NODE is absent with --agent-socket).
func nodeArgs(n int) cobra.PositionalArgs {
	return cobra.RangeArgs(n, n+1)
}

// where names the target in progress messages.
func where(node string) string {
	if node == "" {
		return "the local agent"
	}
	return node
}

func newArtifactCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifact",
		Short: "Install, list and remove versioned software artifacts on a node",
		Long: `Artifacts are group:artifact:version, fetched from the depot the agent has
configured for the group (agent config "depots"), verified against their
checksum, and installed read-only under <prefix>/software/<group>/<artifact>/<version>.`,
	}
	workloadFlags(cmd)
	cmd.AddCommand(artifactInstallCmd(e), artifactLsCmd(e), artifactShowCmd(e), artifactRmCmd(e))
	return cmd
}

func artifactInstallCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "install NODE GROUP:ARTIFACT:VERSION...",
		Short: "Install artifacts (a no-op for a version already installed)",
		Args:  cobra.MinimumNArgs(1),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, ids []string) error {
			if len(ids) == 0 {
				return fmt.Errorf("name at least one artifact as group:artifact:version")
			}
			var out []api.Artifact
			for _, id := range ids {
				if !asJSON {
					fmt.Fprintf(e.stderr, "installing %s on %s (download, checksum, unpack) ...\n", id, where(node))
				}
				start := time.Now()
				a, err := c.InstallArtifact(cmd.Context(), node, id)
				if err != nil {
					return fmt.Errorf("install %s: %w", id, err)
				}
				out = append(out, a)
				if !asJSON {
					fmt.Fprintf(e.stdout, "%s installed in %s (%s, %d files, %s) [%s]\n", a.ID, a.Path, bytesIEC(uint64(a.Size)), a.Files, a.Checksum, time.Since(start).Round(time.Millisecond))
				}
			}
			if asJSON {
				return printJSON(e.stdout, api.ArtifactList{Artifacts: orEmpty(out)})
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func artifactLsCmd(e *env) *cobra.Command {
	return nodeView(e, "ls NODE", "List installed artifacts", 0,
		func(ctx context.Context, c *client.Client, node string, _ []string) (api.ArtifactList, error) {
			arts, err := c.Artifacts(ctx, node)
			return api.ArtifactList{Artifacts: orEmpty(arts)}, err
		}, func(e *env, l api.ArtifactList) { printArtifacts(e, l.Artifacts) })
}

func printArtifacts(e *env, arts []api.Artifact) {
	now := time.Now()
	t := newTable(e.stdout, "ID", "SIZE", "FILES", "INSTALLED", "USED BY")
	for _, a := range arts {
		at := a.InstalledAt
		t.row(a.ID, bytesIEC(uint64(a.Size)), strconv.Itoa(a.Files), ago(&at, now), orDash(strings.Join(a.UsedBy, ",")))
	}
	t.flush()
}

func artifactShowCmd(e *env) *cobra.Command {
	return nodeView(e, "show NODE GROUP:ARTIFACT:VERSION", "Show one installed artifact (JSON)", 1,
		func(ctx context.Context, c *client.Client, node string, rest []string) (api.Artifact, error) {
			return c.Artifact(ctx, node, rest[0])
		}, nil)
}

func artifactRmCmd(e *env) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm NODE GROUP:ARTIFACT:VERSION",
		Short: "Remove an artifact (refused while a service, running or stopped, uses it; --force removes anyway)",
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, "artifact as group:artifact:version", func(cmd *cobra.Command, c *client.Client, node, name string) error {
			if !force {
				if err := c.RemoveArtifact(cmd.Context(), node, name); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s removed from %s\n", name, where(node))
				return nil
			}
			// Who uses it is asked first, to say what the removal breaks.
			var users []string
			if a, err := c.Artifact(cmd.Context(), node, name); err == nil {
				users = a.UsedBy
			}
			if err := c.ForceRemoveArtifact(cmd.Context(), node, name); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s removed from %s\n", name, where(node))
			if len(users) > 0 {
				fmt.Fprintf(e.stderr, "warning: services %s use %s and cannot start again until it is installed again (`nodemgr artifact install %s %s`)\n",
					strings.Join(users, ", "), name, node, name)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove even while services use it; they cannot start again until it is reinstalled")
	return cmd
}

func newServiceCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service",
		Short: "Start, inspect and stop supervised services on a node",
		Long: `A service is a long-running process started from an installed artifact and
named by a coordinate instance.service.user.cell. It runs in its runtime dir
<prefix>/runtime/<cell>/<user>/<service>/<instance>, is restarted by its
restart policy when it dies, and keeps running when the agent restarts (the
agent adopts it again).`,
	}
	workloadFlags(cmd)
	cmd.AddCommand(serviceStartCmd(e), serviceLsCmd(e), serviceShowCmd(e),
		serviceActionCmd(e, "stop", "Stop a service: SIGTERM, then SIGKILL after its stop_grace"),
		serviceActionCmd(e, "drain", "Drain a service (its drain command or signal), then stop it"),
		serviceActionCmd(e, "restart", "Stop a service if it runs, then start it again"),
		serviceLogsCmd(e), serviceRmCmd(e))
	return cmd
}

// LoadServiceFile reads a service spec from YAML (or JSON). Unknown keys
// are errors with their line.
func LoadServiceFile(path string) (api.ServiceSpec, error) {
	return yamlAs[api.ServiceSpec](path)
}

func serviceStartCmd(e *env) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "start NODE -f service.yaml",
		Short: "Start a service from a spec file",
		Args:  nodeArgs(0),
		RunE: onNode(e, func(cmd *cobra.Command, c *client.Client, node string, _ []string) error {
			spec, err := readSpec(file, "give the service spec with -f FILE (YAML: coordinate, artifact, command, ...; see `nodemgr service start --help`)", LoadServiceFile)
			if err != nil {
				return err
			}
			svc, err := c.StartService(cmd.Context(), node, spec)
			if err != nil {
				return err
			}
			return output(e, asJSON, svc, printService)
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "service spec (YAML or JSON; - for stdin)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func serviceLsCmd(e *env) *cobra.Command {
	return nodeView(e, "ls NODE", "List services with pid, state, RSS, restarts, uptime and port", 0,
		func(ctx context.Context, c *client.Client, node string, _ []string) (api.ServiceList, error) {
			svcs, err := c.Services(ctx, node)
			return api.ServiceList{Services: orEmpty(svcs)}, err
		}, func(e *env, l api.ServiceList) { printServices(e, l.Services) })
}

// orEmpty makes a list's JSON [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func printServices(e *env, svcs []api.Service) {
	now := time.Now()
	t := newTable(e.stdout, "COORDINATE", "ARTIFACT", "STATE", "PID", "PORT", "RSS", "RESTARTS", "UPTIME")
	for _, s := range svcs {
		t.row(s.Spec.Coordinate, s.Spec.Artifact, s.State, intOrDash(s.PID), intOrDash(s.Port),
			rssString(s), strconv.Itoa(s.Restarts), uptime(s, now))
	}
	t.flush()
}

func serviceShowCmd(e *env) *cobra.Command {
	return nodeView(e, "show NODE COORDINATE", "Show one service", 1,
		func(ctx context.Context, c *client.Client, node string, rest []string) (api.Service, error) {
			return c.Service(ctx, node, rest[0])
		}, printService)
}

// serviceArg names a service argument, for errors.
const serviceArg = "service by its coordinate instance.service.user.cell"

var actionProgress = map[string]string{"stop": "stopping", "drain": "draining", "restart": "restarting"}

func serviceActionCmd(e *env, action, short string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   action + " NODE COORDINATE",
		Short: short,
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, serviceArg, func(cmd *cobra.Command, c *client.Client, node, name string) error {
			if !asJSON {
				fmt.Fprintf(e.stderr, "%s %s on %s ...\n", actionProgress[action], name, where(node))
			}
			svc, err := c.ServiceAction(cmd.Context(), node, name, action)
			if err != nil {
				return err
			}
			return output(e, asJSON, svc, printService)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func serviceLogsCmd(e *env) *cobra.Command {
	var tail int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs NODE COORDINATE",
		Short: "Print the end of a service's log (<runtime dir>/logs/service.log); -f follows it",
		Long: `Print the end of a service's log (<runtime dir>/logs/service.log).

With --follow, keep printing what the service writes, until interrupted
(Ctrl-C). The log is polled every half second; after a rotation it is
followed from the start of the new file. While the node is unreachable the
command waits for it.`,
		Args: nodeArgs(1),
		RunE: onNodeOne(e, serviceArg, func(cmd *cobra.Command, c *client.Client, node, name string) error {
			return printLog(cmd.Context(), e, follow,
				func() ([]byte, string, error) { return c.ServiceLogTail(cmd.Context(), node, name, tail) },
				func(ctx context.Context, cursor string) ([]byte, string, error) {
					return c.ServiceLogAfter(ctx, node, name, cursor)
				})
		}),
	}
	cmd.Flags().Int64Var(&tail, "tail", 64<<10, "bytes from the end of the log")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what is written, until interrupted")
	return cmd
}

// printLog prints the end of a log, which tail reads with the cursor
// where it ends, and with follow what is written after it (see followLog).
func printLog(ctx context.Context, e *env, follow bool, tail func() ([]byte, string, error), read func(ctx context.Context, cursor string) ([]byte, string, error)) error {
	b, cursor, err := tail()
	if err != nil {
		return err
	}
	if _, err := e.rawOut().Write(b); err != nil || !follow {
		return err
	}
	return followLog(ctx, e, cursor, read)
}

// followPoll is how often a followed log is asked for what is new.
const followPoll = 500 * time.Millisecond

// followLog prints what read returns after cursor, poll after poll, until
// ctx ends. An unreachable node is waited for; other errors end it.
func followLog(ctx context.Context, e *env, cursor string, read func(ctx context.Context, cursor string) ([]byte, string, error)) error {
	if cursor == "" {
		return errors.New("the node's agent gives no log cursor (" + api.HeaderLogCursor + "), so its logs cannot be followed; upgrade the agent, or drop --follow")
	}
	return follow(ctx, e, followPoll, func() (bool, error) {
		b, next, err := read(ctx, cursor)
		if err != nil {
			return false, err
		}
		if _, err := e.rawOut().Write(b); err != nil {
			return false, err
		}
		cursor = next
		return len(b) > 0, nil // there may be more right away
	})
}

// follow calls step every poll until ctx ends, at once again while step
// says more is there. A server or node that cannot be reached is waited
// for (and said once); any other error ends it. An interrupt is no error.
func follow(ctx context.Context, e *env, poll time.Duration, step func() (more bool, err error)) error {
	waiting := false
	for {
		more, err := step()
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: following ends there
		case err != nil && isUnavailable(err):
			if !waiting {
				fmt.Fprintf(e.stderr, "(waiting: %v)\n", err)
				waiting = true
			}
		case err != nil:
			return err
		default:
			waiting = false
			if more {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// isUnavailable says whether err is a "not now": a node not connected, a
// server restarting.
func isUnavailable(err error) bool {
	var ae *client.Error
	var ne net.Error
	return (errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable) || errors.As(err, &ne)
}

func serviceRmCmd(e *env) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "rm NODE COORDINATE",
		Short: "Forget a service that is not running (--purge deletes its runtime dir)",
		Args:  nodeArgs(1),
		RunE: onNodeOne(e, serviceArg, func(cmd *cobra.Command, c *client.Client, node, name string) error {
			if err := c.RemoveService(cmd.Context(), node, name, purge); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s removed from %s\n", name, where(node))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the runtime dir and its logs")
	return cmd
}

func printService(e *env, s api.Service) {
	now := time.Now()
	t := newTable(e.stdout, "FIELD", "VALUE")
	rows := [][2]string{
		{"Coordinate", s.Spec.Coordinate}, {"Artifact", s.Spec.Artifact}, {"State", s.State},
		{"PID", intOrDash(s.PID)}, {"Port", intOrDash(s.Port)}, {"RSS", rssString(s)},
		{"Restarts", strconv.Itoa(s.Restarts)}, {"Uptime", uptime(s, now)},
		{"Runtime dir", s.RuntimeDir}, {"Command", strings.Join(s.Spec.Command, " ")},
		{"Last exit", orDash(s.LastExit)}, {"Reason", orDash(s.Reason)},
	}
	for _, r := range rows {
		t.row(r[0], r[1])
	}
	t.flush()
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func rssString(s api.Service) string {
	if s.RSSBytes == 0 {
		return "-"
	}
	out := bytesIEC(s.RSSBytes)
	if s.Spec.ExpectedMemoryMB > 0 {
		out += fmt.Sprintf(" / %d MiB expected", s.Spec.ExpectedMemoryMB)
	}
	return out
}

func uptime(s api.Service, now time.Time) string {
	if s.StartedAt == nil || s.State != api.ServiceRunning {
		return "-"
	}
	return now.Sub(*s.StartedAt).Round(time.Second).String()
}
