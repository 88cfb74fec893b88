//go:build !clientonly

package cli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/node/agent"
)

// agentFlags binds the agent's flags; applied over file and environment.
func agentFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.String("config", "", "agent config file (YAML: server, data_dir, join_token, name, tags, labels, groups, ...)")
	fl.Bool("print-config", false, "print the settings in effect, each with its source (default, file, env, flag), and exit")
	fl.String("server", "", "coordinator URL, e.g. https://10.0.0.1:7070 ($NODEMGR_SERVER)")
	fl.String("server-ca", "", "PEM file of the CA to verify the server by ($NODEMGR_SERVER_CA; default the CA the join token pins, else the system's roots)")
	fl.Bool("insecure-http", false, "send the join token and the node credential to a plain http:// server other than loopback, where anyone on the path can read them ($NODEMGR_INSECURE_HTTP); without it such a server is refused: use https://")
	fl.String("data-dir", "", "agent state directory, one agent each ($NODEMGR_DATA_DIR; default /var/lib/nodemgr/agent)")
	fl.String("join-token", "", "join token to register with, needed once ($NODEMGR_JOIN_TOKEN); visible to other local users, prefer --join-token-file")
	fl.String("join-token-file", "", "file holding the join token ($NODEMGR_JOIN_TOKEN_FILE)")
	fl.String("name", "", "node name ($NODEMGR_NAME; default the hostname)")
	fl.StringSlice("tag", nil, "tag, repeatable or comma-separated ($NODEMGR_TAGS)")
	fl.StringSlice("label", nil, "label key=value, repeatable ($NODEMGR_LABELS)")
	fl.StringSlice("group", nil, "group, repeatable ($NODEMGR_GROUPS)")
	fl.Duration("heartbeat-interval", 0, "override the heartbeat interval the server asks for")
	fl.Duration("keepalive", agent.DefaultKeepalive, "how often to ping the server; two periods unanswered: move to the next --server")
	fl.Duration("reconnect-min", time.Second, "first reconnect delay")
	fl.Duration("reconnect-max", 60*time.Second, "longest reconnect delay")
	fl.Duration("shutdown-grace", 30*time.Second, "how long a graceful shutdown (node shutdown --graceful, SIGTERM) lets running tasks finish before stopping them")
	fl.Bool("standalone", false, "run without a server: manage this node through its local API only")
	fl.String("prefix", "", "where artifacts (software/) and services (runtime/) live ($NODEMGR_PREFIX; default the data dir)")
	fl.StringSlice("depot", nil, "artifact depot group=URL, repeatable ($NODEMGR_DEPOTS)")
	fl.String("local-api-socket", "", "unix socket of the local API (default <data dir>/agent.sock)")
	fl.String("local-api-listen", "", "also serve the local API on TCP host:port; needs --local-api-token. Beyond loopback it speaks HTTPS with a CA the agent makes in <data dir>/local-api-ca (clients pin its fingerprint, logged at start)")
	fl.String("local-api-token", "", "token the TCP local API requires ($NODEMGR_LOCAL_API_TOKEN); visible to other local users, prefer --local-api-token-file")
	fl.String("local-api-token-file", "", "file holding the local API token ($NODEMGR_LOCAL_API_TOKEN_FILE)")
	fl.Int("procs", 0, "threads of Go code the agent runs (default one per 8 cores, at least one; $GOMAXPROCS wins)")
	fl.String("port-range", "", "ports the agent hands to services and containers, min-max (default 16384-65535)")
	fl.String("docker-host", "", "Docker engine for containers (default $DOCKER_HOST, else the local socket)")
	fl.String("container-host-ip", "", "address containers' host ports bind to (default all)")
	fl.Duration("container-usage-interval", 0, "how often running containers' CPU and memory are sampled and reported (default 10s)")
	fl.String("imds", "", "instance metadata service to poll for spot interruption notices, e.g. http://169.254.169.254 on EC2 (default off); on a notice the agent drains and tells the server")
	fl.Duration("imds-interval", 0, "how often --imds is polled (default 5s)")
	fl.Bool("overlay", false, "join the server's overlay network: a WireGuard device meshed with the nodes that share a group with this one (needs CAP_NET_ADMIN, and /dev/net/tun where the kernel has no WireGuard)")
	fl.String("overlay-interface", "", "link name of the overlay's WireGuard device (default nodemgr0)")
	fl.Int("overlay-port", 0, "UDP port the overlay's WireGuard listens on (default 51820)")
	fl.Duration("overlay-relay-after", 0, "how long a peer may go without a WireGuard handshake over UDP before its packets go through the server (default 15s)")
	fl.String("overlay-endpoint", "", "ip:port peers reach this node's WireGuard at, where it is not the address the server sees this agent connect from (NAT, a proxy)")
}

// agentConfig merges config file < NODEMGR_* environment < flags.
func agentConfig(cmd *cobra.Command, e *env) (agent.Config, error) {
	fl := cmd.Flags()
	var cfg agent.Config
	if path, _ := fl.GetString("config"); path != "" {
		c, err := agent.LoadConfigFile(path)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	if err := cfg.ApplyEnv(e.getenv); err != nil {
		return cfg, err
	}
	str := func(name string, dst *string) { flagInto(fl, name, dst, fl.GetString) }
	// A file given as a flag beats a value from the environment or the
	// config file; a value given as a flag beats both.
	secret := func(name string, value, file *string) {
		if fl.Changed(name + "-file") {
			*value = ""
			*file, _ = fl.GetString(name + "-file")
		}
		str(name, value)
	}
	str("server", &cfg.Server)
	str("server-ca", &cfg.ServerCA)
	str("data-dir", &cfg.DataDir)
	secret("join-token", &cfg.JoinToken, &cfg.JoinTokenFile)
	str("name", &cfg.Name)
	str("prefix", &cfg.Prefix)
	str("local-api-socket", &cfg.LocalAPISocket)
	str("local-api-listen", &cfg.LocalAPIListen)
	secret("local-api-token", &cfg.LocalAPIToken, &cfg.LocalAPITokenFile)
	str("port-range", &cfg.PortRange)
	str("imds", &cfg.IMDS)
	flagInto(fl, "imds-interval", &cfg.IMDSInterval, fl.GetDuration)
	flagInto(fl, "container-usage-interval", &cfg.ContainerUsageInterval, fl.GetDuration)
	flagInto(fl, "procs", &cfg.Procs, fl.GetInt)
	str("docker-host", &cfg.DockerHost)
	str("container-host-ip", &cfg.ContainerHostIP)
	flagInto(fl, "standalone", &cfg.Standalone, fl.GetBool)
	flagInto(fl, "insecure-http", &cfg.InsecureHTTP, fl.GetBool)
	flagInto(fl, "overlay", &cfg.Overlay, fl.GetBool)
	str("overlay-interface", &cfg.OverlayInterface)
	flagInto(fl, "overlay-port", &cfg.OverlayPort, fl.GetInt)
	str("overlay-endpoint", &cfg.OverlayEndpoint)
	flagInto(fl, "overlay-relay-after", &cfg.OverlayRelayAfter, fl.GetDuration)
	keyValues := func(name string) (map[string]string, error) {
		kvs, _ := fl.GetStringSlice(name)
		return validate.KeyValues("--"+name, kvs)
	}
	if err := flagIntoErr(fl, "depot", &cfg.Depots, keyValues); err != nil {
		return cfg, err
	}
	flagInto(fl, "tag", &cfg.Tags, fl.GetStringSlice)
	flagInto(fl, "group", &cfg.Groups, fl.GetStringSlice)
	if err := flagIntoErr(fl, "label", &cfg.Labels, keyValues); err != nil {
		return cfg, err
	}
	dur := func(name string, dst *time.Duration) {
		if fl.Changed(name) || *dst == 0 {
			*dst, _ = fl.GetDuration(name)
		}
	}
	dur("heartbeat-interval", &cfg.HeartbeatInterval)
	dur("keepalive", &cfg.Keepalive)
	dur("reconnect-min", &cfg.ReconnectMin)
	dur("reconnect-max", &cfg.ReconnectMax)
	dur("shutdown-grace", &cfg.ShutdownGrace)
	cfg.Version = Version
	return cfg, nil
}

// flagInto sets *dst to the flag name's value when the flag was given;
// get reads it (fl.GetString, fl.GetDuration, ...), and cannot fail for
// a flag of its type.
func flagInto[T any](fl *pflag.FlagSet, name string, dst *T, get func(string) (T, error)) {
	if fl.Changed(name) {
		*dst, _ = get(name)
	}
}

// flagIntoErr is flagInto for a value that get parses, and may refuse.
func flagIntoErr[T any](fl *pflag.FlagSet, name string, dst *T, get func(string) (T, error)) error {
	if !fl.Changed(name) {
		return nil
	}
	v, err := get(name)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

func newAgentCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent on this machine",
		Long: `Run the node agent. It registers with the server once (with a join token),
saves its node credential in the data dir (mode 0600), keeps one WebSocket to
the server and reconnects by itself (1s → 60s backoff with jitter).

Only one agent may use a data dir; a second one is refused.

The agent also installs artifacts and supervises services (nodemgr artifact,
nodemgr service). Its local API listens on <data dir>/agent.sock, so one agent
is useful without a server (--standalone). Services keep running when the
agent stops; the next agent on the data dir adopts them.

Run as root, the agent runs suite hooks, tasks and services as other users:
a suite's run_as or a service's user, and by default an unprivileged user
it keeps for this (nodemgr-task, made with useradd when missing, else
nobody); its log says which. The data dir is then 0711 with everything in
it private but the suites, software and runtime trees, so they can reach
their work dirs and nothing else; every directory above the data dir must
let others pass (o+x). Run as another user, the agent runs them as itself
and says so once.

Settings come from --config (YAML, e.g. /etc/nodemgr/agent.yaml), then
NODEMGR_<KEY> variables (NODEMGR_SERVER, NODEMGR_DATA_DIR, NODEMGR_TAGS=a,b,
NODEMGR_LABELS=k=v,...), then flags; --print-config shows the result and
where each value came from.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd, e.stderr)
			if err != nil {
				return err
			}
			cfg, err := agentConfig(cmd, e)
			if err != nil {
				return err
			}
			if show, _ := cmd.Flags().GetBool("print-config"); show {
				return printAgentSettings(cmd, e, cfg)
			}
			a, err := agent.New(cfg, log)
			if err != nil {
				return err
			}
			defer a.Close()
			setAgentProcs(cfg.Procs, e.getenv)
			ctx, cancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer cancel()
			stop := stopOnSignals(a, log, cancel)
			defer stop()
			return a.Run(ctx)
		},
	}
	agentFlags(cmd)
	return cmd
}

// printAgentSettings prints the agent's settings in effect, defaults
// filled in, for --print-config.
func printAgentSettings(cmd *cobra.Command, e *env, cfg agent.Config) error {
	full, err := cfg.WithDefaults()
	if err != nil {
		return err
	}
	lines, err := agentPrinted(cmd, e, full)
	if err != nil {
		return err
	}
	printSettings(e.stdout, "agent", lines)
	return nil
}

// stopOnSignals makes SIGTERM and SIGINT (systemctl stop, Ctrl-C) stop the
// agent as `nodemgr node shutdown` does: the first gracefully, the second
// at once (both say goodbye, so the server requeues at once), a third
// without waiting for anything.
func stopOnSignals(a *agent.Agent, log *slog.Logger, abort context.CancelFunc) (stop func()) {
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan struct{})
	go func() {
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case sig := <-sigs:
				switch n {
				case 1:
					log.Info("stopping gracefully: running tasks finish, buffered ones go back to the queue; send the signal again to stop at once", "signal", sig)
					a.Shutdown(api.ShutdownGraceful)
				case 2:
					log.Warn("stopping at once; a third signal exits without saying goodbye", "signal", sig)
					a.Shutdown(api.ShutdownForce)
				default:
					abort()
				}
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// setAgentProcs sizes the agent process's Go runtime (see
// agent.Config.Procs). Only `nodemgr agent` does: `nodemgr dev` shares
// its process with a server.
func setAgentProcs(procs int, getenv func(string) string) {
	if getenv("GOMAXPROCS") != "" {
		return
	}
	if procs == 0 {
		procs = agent.DefaultProcs(runtime.NumCPU())
	}
	runtime.GOMAXPROCS(procs)
}
