//go:build !agentonly && !clientonly

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/datadir"
	"github.com/nodemgr/nodemgr/internal/base/lockfile"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/node/agent"
	"github.com/nodemgr/nodemgr/internal/node/runas"

	"github.com/nodemgr/nodemgr/internal/base/tlsca"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/overlay"
	"github.com/nodemgr/nodemgr/internal/coordinator/server"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// serverFlags are the coordinator's settings, shared by `server` and `dev`.
type serverFlags struct {
	// passable: the data dir holds a dev agent's, which runs suites as
	// other users (datadir.Passable); else it is private.
	passable                                                       bool
	listen, dataDir, db, dbListen                                  string
	heartbeatInterval, offlineAfter, confirmTimeout, credentialTTL time.Duration
	maxTokenTTL                                                    time.Duration
	suiteCloseAfter, driftInterval                                 time.Duration
	leaderLease, storeTimeout                                      time.Duration
	replicaID                                                      string
	reconnectGrace, retryBackoff, idleSuiteGrace, idlePoll         time.Duration
	dockerHost                                                     string
	awsRegion, awsEndpoint, awsProfile                             string
	libvirtURI, libvirtPool, libvirtPoolDir, libvirtDomainType     string
	libvirtStopTimeout, libvirtReadyTimeout                        string
	tlsCert, tlsKey                                                string
	tlsAuto                                                        bool
	tlsSANs                                                        []string
	agentServerURL                                                 string
	agentInsecureHTTP                                              bool
	agentBinaries                                                  []string
	agentBinaryDir                                                 string
	poolBackoff, poolTick, poolSweep, poolDrainTimeout             time.Duration
	poolLaunchTries                                                int
	poolLaunchRetry                                                time.Duration
	sshUser, sshKnownHosts, sshJumpHost                            string
	sshIdentityFiles                                               []string
	sshAcceptNewHostKeys                                           bool
	blobMaxSize                                                    int64
	blobRetention                                                  time.Duration
	taskLogMax                                                     int64
	blobS3Bucket, blobS3Prefix, blobS3Region, blobS3Endpoint       string
	blobS3Profile                                                  string
	blobS3PathStyle                                                bool
	ensembleRestoreDeadline, ensembleProvisionDeadline             time.Duration
	overlayNetwork                                                 prefixFlag
}

func (f *serverFlags) register(cmd *cobra.Command, defaultDataDir string) {
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7070", "address to serve the API and the agent WebSocket on")
	fl.StringVar(&f.dataDir, "data-dir", defaultDataDir, "server state directory (database, admin-token)")
	fl.StringVar(&f.dbListen, "db-listen-url", "", "with --db through PgBouncer in transaction mode: a postgres:// URL of the database itself, for the LISTEN connection that hears the other servers")
	fl.StringVar(&f.db, "db", "", "SQLite database file (default DATA_DIR/nodemgr.db), or a postgres:// or postgresql:// URL of a PostgreSQL database that several servers may share (give the password with PGPASSWORD or a ~/.pgpass file, not in the URL)")
	fl.DurationVar(&f.heartbeatInterval, "heartbeat-interval", 30*time.Second, "how often agents send heartbeats")
	fl.DurationVar(&f.offlineAfter, "offline-after", 2*time.Minute, "a node with no heartbeat for this long is checked, then marked offline")
	fl.DurationVar(&f.confirmTimeout, "confirm-timeout", 10*time.Second, "how long the offline check waits for a ping answer or a reconnect")
	fl.DurationVar(&f.reconnectGrace, "reconnect-grace", 10*time.Second, "an agent whose connection ended without a goodbye has this long to reconnect before its running tasks go back to the queue")
	fl.DurationVar(&f.retryBackoff, "retry-backoff", time.Second, "pause before a failed task's first retry; it doubles with each failure, up to 1m")
	fl.DurationVar(&f.idleSuiteGrace, "idle-suite-grace", 5*time.Second, "an agent with nothing to run in its suite for this long moves to another suite that has work")
	fl.DurationVar(&f.idlePoll, "idle-poll", 30*time.Second, "how often an idle agent asks for a suite when nothing woke it (the server wakes idle agents whenever a suite may have work for them)")
	fl.DurationVar(&f.credentialTTL, "credential-ttl", 30*24*time.Hour, "lifetime of node credentials (agents renew them)")
	fl.DurationVar(&f.maxTokenTTL, "max-token-ttl", server.DefaultMaxTokenTTL, "the longest lifetime an API or join token may be given (rotate tokens before they expire)")
	fl.DurationVar(&f.suiteCloseAfter, "suite-close-after", 180*time.Second, "an open suite that gets no new task for this long is closed")
	fl.DurationVar(&f.driftInterval, "drift-interval", 30*time.Second, "how often provisioned machines are compared with what their providers report")
	fl.DurationVar(&f.leaderLease, "leader-lease", 10*time.Second, "of the servers sharing a database, the one holding the leader lease runs the orchestrator, liveness and other once-for-all loops; it renews the lease every third of this, and another takes over within about this long after it dies (at once after a clean shutdown)")
	fl.DurationVar(&f.storeTimeout, "store-timeout", server.DefaultStoreTimeout, "an API request whose store call takes longer than this is answered 503 (the store did not answer) rather than left hanging; /metrics then serves the last counts, marked stale")
	fl.StringVar(&f.replicaID, "replica-id", "", "this server's name among those sharing a database, as /healthz and the logs show it (default a random r-... per process)")
	fl.StringVar(&f.dockerHost, "docker-host", "", "Docker engine for the docker provider (default $DOCKER_HOST or the local socket)")
	fl.StringVar(&f.awsRegion, "aws-region", "", "AWS region for the aws provider (default the standard AWS environment: $AWS_REGION, the shared config)")
	fl.StringVar(&f.awsEndpoint, "aws-endpoint", "", "EC2 endpoint URL for the aws provider, e.g. an emulator's (default AWS's own)")
	fl.StringVar(&f.awsProfile, "aws-profile", "", "shared-config profile the aws provider takes its credentials from (default $AWS_PROFILE or default)")
	fl.StringVar(&f.libvirtURI, "libvirt-uri", "", "libvirtd connection for the libvirt provider: qemu:///system (default), qemu+ssh://host/system, test:///default")
	fl.StringVar(&f.libvirtPool, "libvirt-pool", "", "libvirt storage pool the machines' volumes go in, made when missing (default: default)")
	fl.StringVar(&f.libvirtPoolDir, "libvirt-pool-dir", "", "directory on the libvirt host of the storage pool made when --libvirt-pool is missing (default /var/lib/libvirt/images)")
	fl.StringVar(&f.libvirtDomainType, "libvirt-domain-type", "", "libvirt domain type: qemu (TCG, the default) or kvm")
	fl.StringVar(&f.libvirtStopTimeout, "libvirt-stop-timeout", "", "how long a libvirt machine has to power off after the ACPI button before it is forced (default 30s)")
	fl.StringVar(&f.libvirtReadyTimeout, "libvirt-ready-timeout", "", "how long provisioning waits for a libvirt machine's ssh banner (default 5m; 0 does not wait)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.BoolVar(&f.tlsAuto, "tls-auto", false, "serve HTTPS with the server's own CA even on loopback (it does so on any other address when no --tls-cert is given)")
	fl.StringSliceVar(&f.tlsSANs, "tls-san", nil, "extra name or address for the server's own certificate, e.g. one behind NAT (repeatable)")
	fl.StringVar(&f.agentServerURL, "agent-server-url", "", "the server's URL as pool machines reach it (default the URL it listens on); plain http:// only on loopback, unless --agent-insecure-http")
	fl.BoolVar(&f.agentInsecureHTTP, "agent-insecure-http", false, "let pool machines reach a plain http:// --agent-server-url beyond loopback: their join tokens and credentials travel unencrypted")
	fl.StringSliceVar(&f.agentBinaries, "agent-binary", nil, "static nodemgr binary to deliver onto pool machines, one per architecture (repeatable)")
	fl.StringVar(&f.agentBinaryDir, "agent-binaries", "", "directory of static nodemgr binaries to deliver onto pool machines by their arch, named nodemgr-linux-amd64, nodemgr-linux-arm64 (go run ./cmd/release builds them, the agent-only builds in dist/agent); this binary, if static, serves its own arch when neither this nor --agent-binary does. Refused when every user may write it or a binary in it")
	fl.DurationVar(&f.poolBackoff, "pool-backoff", 10*time.Second, "a pool candidate whose machine failed to launch or bootstrap waits this long before it is tried again; doubles with each failure in a row, up to 5m")
	fl.IntVar(&f.poolLaunchTries, "pool-launch-tries", 3, "how many times a pool machine's launch calls its provider before the machine fails and the next candidate serves (a refusal for want of capacity is not tried again)")
	fl.DurationVar(&f.poolLaunchRetry, "pool-launch-retry", 2*time.Second, "the pause before a pool machine's launch calls its failing provider again; doubles with each try")
	fl.DurationVar(&f.poolTick, "pool-tick", time.Second, "the longest time between two rounds of the pools' loop (demand wakes it sooner)")
	fl.DurationVar(&f.poolSweep, "pool-sweep", 30*time.Second, "how often providers are asked for machines of this server that no pool machine accounts for (they are destroyed)")
	fl.StringVar(&f.sshUser, "ssh-user", "", "user the ssh, sftp and rsync executors log in as (default this process's user; a deployment's ssh_user wins)")
	fl.StringSliceVar(&f.sshIdentityFiles, "ssh-identity-file", nil, "private key the ssh executors log in with, mode 0600 as ssh wants it (repeatable; default ~/.ssh/id_ed25519, id_ecdsa, id_rsa, and the agent at $SSH_AUTH_SOCK)")
	fl.StringVar(&f.sshKnownHosts, "ssh-known-hosts", "", "known_hosts file the ssh executors check host keys against (default ~/.ssh/known_hosts)")
	fl.BoolVar(&f.sshAcceptNewHostKeys, "ssh-accept-new-host-keys", false, "trust a host's first key and add it to --ssh-known-hosts (a changed key is still refused)")
	fl.StringVar(&f.sshJumpHost, "ssh-jump-host", "", "[user@]host[:port] the ssh executors connect through (a deployment's ssh_jump_host wins)")
	fl.DurationVar(&f.poolDrainTimeout, "pool-drain-timeout", 2*time.Minute, "how long a pool machine being scaled down has to stop its agent before it is destroyed anyway")
	fl.DurationVar(&f.ensembleProvisionDeadline, "ensemble-provision-deadline", 10*time.Minute, "how long an ensemble that fits on no node waits for the machines pools start for it (an ensemble's provision_deadline wins)")
	fl.DurationVar(&f.ensembleRestoreDeadline, "ensemble-restore-deadline", 5*time.Minute, "how long a running ensemble's replicas wait for their lost node before they are placed elsewhere (an ensemble's restore_deadline wins)")
	fl.Int64Var(&f.blobMaxSize, "blob-max-size", 1<<30, "largest task input or output file the blob store takes, in bytes")
	fl.DurationVar(&f.blobRetention, "blob-retention", 24*time.Hour, "a task file that no task refers to is deleted after this long")
	fl.Int64Var(&f.taskLogMax, "task-log-max", 64<<20, "bytes of each task attempt's output kept as its full log in the blob store, beyond the 64 KiB tails of its result (0: keep the tails only)")
	fl.StringVar(&f.blobS3Bucket, "blob-s3-bucket", "", "keep task files in this S3 bucket instead of DATA_DIR/blobs (several replicas can share it)")
	fl.StringVar(&f.blobS3Prefix, "blob-s3-prefix", "", "key prefix of task files in --blob-s3-bucket, e.g. nodemgr/")
	fl.StringVar(&f.blobS3Region, "blob-s3-region", "", "region of --blob-s3-bucket (default the standard AWS environment)")
	fl.StringVar(&f.blobS3Endpoint, "blob-s3-endpoint", "", "S3-compatible endpoint URL, e.g. MinIO's or an emulator's (default AWS's own)")
	fl.StringVar(&f.blobS3Profile, "blob-s3-profile", "", "shared-config profile for --blob-s3-bucket's credentials (default $AWS_PROFILE or default)")
	fl.BoolVar(&f.blobS3PathStyle, "blob-s3-path-style", false, "address the bucket in the URL path (MinIO and most emulators need it)")
	f.overlayNetwork = prefixFlag(netip.MustParsePrefix(overlay.DefaultPrefix))
	fl.Var(&f.overlayNetwork, "overlay-network", "IPv4 prefix of the overlay network that agents started with --overlay form; each node gets a /24 of it for as long as it exists")
}

// prefixFlag is an IP prefix flag, checked as it is set.
type prefixFlag netip.Prefix

func (p *prefixFlag) String() string { return netip.Prefix(*p).String() }
func (p *prefixFlag) Type() string   { return "prefix" }
func (p *prefixFlag) Set(v string) error {
	pf, err := netip.ParsePrefix(v)
	if err != nil {
		return fmt.Errorf("want an address prefix such as %s", overlay.DefaultPrefix)
	}
	*p = prefixFlag(pf)
	return nil
}

// blobStore is the S3 store the flags name, or nil for the data dir.
func (f *serverFlags) blobStore(ctx context.Context) (blob.Store, error) {
	if f.blobS3Bucket == "" {
		if f.blobS3Prefix != "" || f.blobS3Endpoint != "" || f.blobS3Region != "" || f.blobS3Profile != "" {
			return nil, usagef("--blob-s3-prefix, -endpoint, -region and -profile need --blob-s3-bucket")
		}
		return nil, nil
	}
	s3, err := blob.NewS3(ctx, blob.S3Config{Bucket: f.blobS3Bucket, Prefix: f.blobS3Prefix, Region: f.blobS3Region,
		Endpoint: f.blobS3Endpoint, Profile: f.blobS3Profile, PathStyle: f.blobS3PathStyle, TempDir: f.dataDir})
	if err != nil {
		return nil, fmt.Errorf("--blob-s3-bucket %s: %w", f.blobS3Bucket, err)
	}
	return s3, nil
}

func (f *serverFlags) config() server.Config {
	return server.Config{
		Listen: f.listen, DataDir: f.dataDir, HeartbeatInterval: f.heartbeatInterval,
		OfflineAfter: f.offlineAfter, ConfirmTimeout: f.confirmTimeout, ReconnectGrace: f.reconnectGrace,
		RetryBackoff: f.retryBackoff, RetryBackoffMax: max(time.Minute, f.retryBackoff), IdleSuiteGrace: f.idleSuiteGrace, IdlePoll: f.idlePoll,
		CredentialTTL: f.credentialTTL, MaxTokenTTL: f.maxTokenTTL, SuiteCloseAfter: f.suiteCloseAfter, DriftInterval: f.driftInterval,
		LeaderLease: f.leaderLease, ReplicaID: f.replicaID, StoreTimeout: f.storeTimeout,
		ProviderSettings: f.providerSettings(), ExecutorSettings: f.executorSettings(), Version: Version,
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSAuto: f.tlsAuto, TLSSANs: f.tlsSANs,
		AgentServerURL: f.agentServerURL, AgentInsecureHTTP: f.agentInsecureHTTP, AgentBinaries: f.agentBinaries, AgentBinaryDir: f.agentBinaryDir,
		BlobMaxSize: f.blobMaxSize, BlobRetention: f.blobRetention, TaskLogMax: taskLogMax(f.taskLogMax), EnsembleRestoreDeadline: f.ensembleRestoreDeadline,
		EnsembleProvisionDeadline: f.ensembleProvisionDeadline, Overlay: overlay.Config{Prefix: netip.Prefix(f.overlayNetwork)},
		Orchestrator: orchestrate.Config{Tick: f.poolTick, BackoffMin: f.poolBackoff, SweepInterval: f.poolSweep, DrainTimeout: f.poolDrainTimeout,
			LaunchTries: f.poolLaunchTries, LaunchRetry: f.poolLaunchRetry},
	}
}

func (f *serverFlags) providerSettings() map[string]map[string]string {
	settings := map[string]map[string]string{}
	set := func(provider, key, value string) {
		if value == "" {
			return
		}
		if settings[provider] == nil {
			settings[provider] = map[string]string{}
		}
		settings[provider][key] = value
	}
	set("docker", "host", f.dockerHost)
	set("aws", "region", f.awsRegion)
	set("aws", "endpoint", f.awsEndpoint)
	set("aws", "profile", f.awsProfile)
	set("libvirt", "uri", f.libvirtURI)
	set("libvirt", "pool", f.libvirtPool)
	set("libvirt", "pool_dir", f.libvirtPoolDir)
	set("libvirt", "domain_type", f.libvirtDomainType)
	set("libvirt", "stop_timeout", f.libvirtStopTimeout)
	set("libvirt", "ready_timeout", f.libvirtReadyTimeout)
	return settings
}

// executorSettings are the ssh executor's settings, which sftp and rsync
// share.
func (f *serverFlags) executorSettings() map[string]map[string]string {
	s := map[string]string{}
	for k, v := range map[string]string{"user": f.sshUser, "identity_file": strings.Join(f.sshIdentityFiles, ","),
		"known_hosts": f.sshKnownHosts, "jump_host": f.sshJumpHost} {
		if v != "" {
			s[k] = v
		}
	}
	if f.sshAcceptNewHostKeys {
		s["accept_new_host_keys"] = "true"
	}
	if len(s) == 0 {
		return nil
	}
	return map[string]map[string]string{"ssh": s}
}

// newServer makes the server the flags describe, on st, with its blob
// store.
func (f *serverFlags) newServer(ctx context.Context, st store.Store, log *slog.Logger) (*server.Server, error) {
	cfg := f.config()
	var err error
	if cfg.Blobs, err = f.blobStore(ctx); err != nil {
		return nil, err
	}
	return server.New(cfg, st, log)
}

// openStore opens the store --db names: PostgreSQL for a postgres:// or
// postgresql:// URL, else the SQLite file (by default in the data dir,
// which holds the admin token either way). With SQLite it first locks the
// data dir, and returns the lock to release after the store is closed (a
// nil lock releases as nothing).
func (f *serverFlags) openStore(ctx context.Context, log *slog.Logger) (store.Store, *lockfile.Lock, error) {
	ensure := datadir.Ensure
	if f.passable {
		ensure = datadir.EnsurePassable
	}
	if was, err := ensure(f.dataDir); err != nil {
		return nil, nil, err
	} else if was != 0 {
		log.Warn("the data dir holds the store and the admin token and was open to other users; made it private", "dir", f.dataDir, "mode", was.String())
	}
	if was, err := datadir.PrivateFile(server.AdminTokenFile(f.dataDir)); err != nil {
		return nil, nil, fmt.Errorf("%w; run chmod 600 on it, or remove it (nodemgr server --reset-admin-token writes a new one)", err)
	} else if was != 0 {
		log.Warn("the admin-token file was readable by other users; made it 0600", "file", server.AdminTokenFile(f.dataDir), "mode", was.String())
	}
	if strings.HasPrefix(f.db, "postgres://") || strings.HasPrefix(f.db, "postgresql://") {
		for _, db := range []struct{ flag, value string }{{"--db", f.db}, {"--db-listen-url", f.dbListen}} {
			if holdsPassword(db.value) {
				log.Warn("the " + db.flag + " URL holds a password, which other users can read in the process list; give it with PGPASSWORD or a ~/.pgpass file instead")
			}
		}
		if f.blobS3Bucket == "" {
			log.Warn("task files go to this server's data dir, which other servers on the database cannot read; with several servers, give them one S3 bucket (--blob-s3-bucket) or one shared data dir")
		}
		var opts []postgres.Option
		if f.dbListen != "" {
			opts = append(opts, postgres.WithListenURL(f.dbListen))
		}
		st, err := postgres.Open(ctx, f.db, log, opts...)
		if err != nil {
			return nil, nil, err
		}
		return st, nil, nil
	}
	if f.dbListen != "" {
		return nil, nil, usagef("--db-listen-url is for a PostgreSQL --db (behind PgBouncer); drop it, or give --db a postgres:// URL")
	}
	path := f.db
	if path == "" {
		path = filepath.Join(f.dataDir, "nodemgr.db")
	}
	// A SQLite store serves one server: its leader lease takes itself
	// back from any other holder (SoleServer), and the data dir's blobs
	// and admin token are that server's alone. A second server must not
	// start there. (Replicas on PostgreSQL may share a data dir.)
	lock, err := lockfile.Acquire(filepath.Join(f.dataDir, "server.lock"), "nodemgr server")
	if errors.Is(err, errors.ErrUnsupported) {
		// As before the lock: the server still runs where it cannot lock.
		log.Warn("cannot lock the data dir on this system; make sure no other server uses it", "dir", f.dataDir)
	} else if err != nil {
		return nil, nil, err
	}
	st, err := sqlite.Open(ctx, path, log)
	if err != nil {
		lock.Release()
		return nil, nil, err
	}
	return st, lock, nil
}

func newServerCmd(e *env) *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the coordinator server",
		Long: `Run the coordinator: the REST API under /v1, the web dashboard under /ui/
(log in with an API token), the agents' WebSocket, and the loops that keep
the node view true. State lives in an embedded SQLite
file in the data dir. On first start an admin user is created and its API
token is written to DATA_DIR/admin-token (mode 0600), and printed when
standard output is a terminal (not to a journal or a log file).

On an address other than loopback the server speaks HTTPS: with
--tls-cert/--tls-key, or else with a certificate from a CA it makes on first
start (DATA_DIR/ca.crt, key in DATA_DIR/ca.key, mode 0600). Join tokens then
carry the CA's fingerprint, so agents verify the server before they send it
anything; clients pass --ca-cert DATA_DIR/ca.crt (or NODEMGR_CA_CERT).

Settings come from --config (YAML, e.g. /etc/nodemgr/server.yaml), then
NODEMGR_SERVER_<KEY> variables (NODEMGR_SERVER_LISTEN, ..._DATA_DIR), then
flags; --print-config shows the result and where each value came from.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, err := applyServerSettings(cmd, e)
			if err != nil {
				return err
			}
			if show, _ := cmd.Flags().GetBool("print-config"); show {
				path, _ := cmd.Flags().GetString("config")
				printSettings(e.stdout, "server", serverPrinted(settings, path))
				return nil
			}
			log, err := newLogger(cmd, e.stderr)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, lock, err := f.openStore(ctx, log)
			if err != nil {
				return err
			}
			defer lock.Release()
			defer st.Close()
			token, created, err := server.Bootstrap(ctx, st, f.dataDir)
			if err != nil {
				return err
			}
			if created {
				printAdminToken(e, "Created the admin user.", f.dataDir, token)
			}
			if reset, _ := cmd.Flags().GetBool("reset-admin-token"); reset && !created {
				if token, err = server.ResetAdminToken(ctx, st, f.dataDir); err != nil {
					return err
				}
				printAdminToken(e, "Made a new API token for the admin user.", f.dataDir, token)
			}
			srv, err := f.newServer(ctx, st, log)
			if err != nil {
				return err
			}
			defer srv.Close()
			printTLS(e.stdout, srv.TLS())
			return srv.Run(ctx)
		},
	}
	f.register(cmd, "/var/lib/nodemgr/server")
	cmd.Flags().String("config", "", "server config file (YAML: every setting below by its flag's name with _ for -, e.g. data_dir); NODEMGR_SERVER_<KEY> variables override it, flags override both")
	cmd.Flags().Bool("print-config", false, "print the settings in effect, each with its source (default, file, env, flag), and exit")
	cmd.Flags().Bool("reset-admin-token", false, "make a new API token for the admin user and write it to DATA_DIR/admin-token (when every admin token expired or was lost)")
	return cmd
}

// printAdminToken tells the person who started the server its admin
// token. Under systemd (or any other non-terminal) stdout goes to the
// journal, which others may read and which outlives the token: there it
// says only where the token is, the 0600 file.
func printAdminToken(e *env, what, dataDir, token string) {
	file := server.AdminTokenFile(dataDir)
	if !isTerminal(e.rawStdout) {
		fmt.Fprintf(e.stdout, "%s Its API token is in %s (mode 0600): export NODEMGR_TOKEN_FILE=%s\n", what, file, file)
		return
	}
	fmt.Fprintf(e.stdout, "%s Its API token (also in %s):\n\n  export NODEMGR_TOKEN=%s\n\n", what, file, token)
}

// newBackupStoreCmd copies a SQLite store while its server serves. It is
// not "server backup": server runs, and a command with subcommands shows
// its help.
func newBackupStoreCmd(e *env) *cobra.Command {
	var dataDir, db, to string
	cmd := &cobra.Command{
		Use:   "backup-store --to FILE [--data-dir DIR]",
		Short: "Copy the server's SQLite database to FILE, consistent, while the server runs",
		Long: `Copy the server's SQLite database (DATA_DIR/nodemgr.db, or --db) to a new
file, consistent as of one moment, while the server keeps serving (SQLite's
VACUUM INTO). The copy is private (0600) and never overwrites a file.

To restore: stop the server, put the copy in the data dir as nodemgr.db
(remove nodemgr.db-wal and nodemgr.db-shm there), and start it. The data
dir's other files (admin-token, ca.crt and ca.key, blobs) are files: copy
them as they are. For a PostgreSQL store use pg_dump and pg_restore.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usagef("--to is required: the new file to write the backup to")
			}
			if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
				return usagef("--db is a PostgreSQL database: back it up with pg_dump (see docs/operations.md); this command copies a SQLite store")
			}
			if db == "" {
				db = filepath.Join(dataDir, "nodemgr.db")
			}
			start := time.Now()
			if err := sqlite.Backup(cmd.Context(), db, to); err != nil {
				return err
			}
			fi, err := os.Stat(to)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "backed up %s to %s (%d KiB in %s)\n", db, to, fi.Size()>>10, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "/var/lib/nodemgr/server", "the server's data dir")
	cmd.Flags().StringVar(&db, "db", "", "the SQLite database file (default DATA_DIR/nodemgr.db)")
	cmd.Flags().StringVar(&to, "to", "", "the new file to write (required)")
	return cmd
}

// printTLS tells the operator how agents and clients trust a server that
// made its own CA.
func printTLS(w io.Writer, info server.TLSInfo) {
	if info.CAFingerprint == "" {
		return
	}
	made := "Serving HTTPS with the server's CA"
	if info.CACreated {
		made = "Created a CA for the server"
	}
	fmt.Fprintf(w, `%s, %s. Join tokens carry its fingerprint,
which agents pin (nodemgr agent --server https://...):

  %s

Clients trust it with:

  export NODEMGR_CA_CERT=%s

`, made, info.CAFile, info.CAFingerprint, info.CAFile)
}

func newDevCmd(e *env) *cobra.Command {
	var f serverFlags
	var name string
	var tags []string
	var noDemo bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a server and an agent in one process (zero setup)",
		Long: `Run a coordinator and one agent in one process, state in an embedded SQLite
file under the data dir (default ./nodemgr-dev). It prints the address and the
admin token to use with the client commands in another terminal.

On first start it also creates a small demo suite, "hello", whose tasks the
agent runs at once: watch it with nodemgr suite watch hello, or in a browser
at ADDR/ui/ (log in with the admin token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd, e, &f, name, tags, !noDemo)
		},
	}
	f.register(cmd, "nodemgr-dev")
	cmd.Flags().StringVar(&name, "name", "", "the dev agent's node name (default the hostname)")
	cmd.Flags().StringSliceVar(&tags, "tag", nil, "tags of the dev agent")
	cmd.Flags().BoolVar(&noDemo, "no-demo", false, "do not create the demo suite")
	return cmd
}

func runDev(cmd *cobra.Command, e *env, f *serverFlags, name string, tags []string, demo bool) error {
	log, err := newLogger(cmd, e.stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	if f.dataDir, err = filepath.Abs(f.dataDir); err != nil {
		return err
	}
	// The dev agent, run as root, runs suites as other users, who pass
	// through the server's data dir to the agent's.
	f.passable = runas.CanSwitch()
	st, lock, err := f.openStore(ctx, log)
	if err != nil {
		return err
	}
	defer lock.Release()
	defer st.Close()
	adminToken, _, err := server.Bootstrap(ctx, st, f.dataDir)
	if err != nil {
		return err
	}
	srv, err := f.newServer(ctx, st, log.With("component", "server"))
	if err != nil {
		return err
	}
	defer srv.Close()
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Run(ctx) }()
	// The port may be taken (another dev, another server): say so and stop,
	// rather than wait for a listener that never comes.
	select {
	case <-srv.Ready():
	case err := <-srvErr:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	addr := srv.URL()
	caFile := srv.TLS().CAFile // set when dev listens beyond loopback, or with --tls-auto

	agentDir := filepath.Join(f.dataDir, "agent")
	if f.passable {
		// Nothing in the server's data dir but the agent's is theirs.
		if _, err := datadir.Seal(f.dataDir, "agent"); err != nil {
			return err
		}
	}
	// Always at hand, so the dev agent can register again if its credential
	// no longer matches the database; gone when dev stops (or in an hour).
	joinToken, tokenID, err := devJoinToken(ctx, st)
	if err != nil {
		return err
	}
	defer st.DeleteToken(context.Background(), tokenID)
	a, err := agent.New(agent.Config{
		Server: addr, ServerCA: caFile, DataDir: agentDir, JoinToken: joinToken,
		Name: name, Tags: tags, Version: Version,
		// The dev agent's server is the one of this data dir, on whatever
		// --listen it was given this time.
		SameCoordinator: true,
	}, log.With("component", "agent"))
	if err != nil {
		return err
	}
	defer a.Close()

	// The banner is written at once, after the demo suite exists: a log
	// line (the suite created) must not land in the middle of it.
	var banner strings.Builder
	fmt.Fprintf(&banner, `nodemgr dev is running: a server and one agent, state in %s

In another terminal:

  export NODEMGR_ADDR=%s
  export NODEMGR_TOKEN=%s
`, f.dataDir, addr, adminToken)
	var opts []client.Option
	if caFile != "" {
		fmt.Fprintf(&banner, "  export NODEMGR_CA_CERT=%s\n", caFile)
		certs, err := tlsca.LoadCerts(caFile)
		if err != nil {
			return err
		}
		opts = append(opts, client.WithRootCAs(tlsca.Pool(certs...)))
	}
	fmt.Fprintf(&banner, "  nodemgr node ls\n")
	if demo {
		runAs := ""
		if blocked := closedAbove(f.dataDir); runas.CanSwitch() && blocked != "" {
			// Its tasks would run as an unprivileged user who cannot
			// reach them: the first suite a newcomer sees must run.
			runAs = runas.Agent
			fmt.Fprintf(e.stderr, "note: %s lets no other user pass, so suites that name no user cannot run under %s (chmod o+x %s, or use a data dir elsewhere); the demo suite runs as the agent's own user (run_as: agent)\n",
				blocked, f.dataDir, blocked)
		}
		if err := createDemoSuite(ctx, client.New(addr, adminToken, opts...), runAs); err != nil {
			log.Warn("demo suite not created", "err", err)
		} else {
			fmt.Fprintf(&banner, "  nodemgr suite watch %s      # the demo suite, running now\n", demoSuite)
		}
	}
	fmt.Fprintf(&banner, "\nOr open %s/ui/ in a browser and log in with the token.\n", addr)
	fmt.Fprintf(&banner, "\nPress Ctrl-C to stop.\n")
	io.WriteString(e.stdout, banner.String())

	agentErr := make(chan error, 1)
	go func() { agentErr <- a.Run(ctx) }()
	select {
	case err := <-srvErr:
		return err
	case err := <-agentErr:
		if err != nil {
			return err
		}
		// The agent was shut down from the server: keep serving until Ctrl-C.
		return <-srvErr
	}
}

// devJoinToken makes a short-lived join token for the in-process agent.
func devJoinToken(ctx context.Context, st store.Store) (secret, id string, err error) {
	secret, hash := auth.NewSecret(api.TokenJoin)
	now := time.Now().UTC()
	t := store.Token{ID: auth.NewID("t-"), Kind: api.TokenJoin, Name: "dev agent", Hash: hash,
		User: "admin", MaxUses: 3, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateToken(ctx, t); err != nil {
		return "", "", fmt.Errorf("dev join token: %w", err)
	}
	return secret, t.ID, nil
}

// closedAbove is the first directory above dir that other users may not
// pass (no o+x), or "".
func closedAbove(dir string) string {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// demoSuite is the suite `nodemgr dev` creates on first start.
const demoSuite = "hello"

// createDemoSuite gives a new dev setup something to watch: 120 short
// tasks on two workers, closed so that it completes. It does nothing when
// the suite exists already.
func createDemoSuite(ctx context.Context, c *client.Client, runAs string) error {
	if _, err := c.Suite(ctx, demoSuite); err == nil {
		return nil
	}
	_, err := c.CreateSuite(ctx, api.SuiteSpec{
		Name: demoSuite, Description: "created by nodemgr dev: 120 tasks that greet and sleep",
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}, RunAs: runAs,
	})
	if err != nil {
		return err
	}
	tasks := make([]api.TaskSpec, 120)
	for i := range tasks {
		tasks[i] = api.TaskSpec{Argv: []string{"sh", "-c", fmt.Sprintf(`echo "hello from task %d on $(hostname)"; sleep 0.25`, i+1)}}
	}
	if _, err := c.SubmitTasks(ctx, demoSuite, tasks); err != nil {
		return err
	}
	_, err = c.CloseSuite(ctx, demoSuite)
	return err
}

// taskLogMax is --task-log-max as server.Config takes it: 0 there is the
// default, so "keep none" is negative.
func taskLogMax(flag int64) int64 {
	if flag <= 0 {
		return -1
	}
	return flag
}
