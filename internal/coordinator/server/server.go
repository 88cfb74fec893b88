package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
	"github.com/nodemgr/nodemgr/internal/coordinator/accounts"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/catalog"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/enroll"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble/deploy"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/oncommand"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/overlay"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/taskfiles"
	"github.com/nodemgr/nodemgr/internal/coordinator/ui"
)

// Config is the coordinator's configuration. Zero values take the defaults
// of DESIGN.md.
type Config struct {
	Listen            string        // address to listen on; default 127.0.0.1:7070
	DataDir           string        // where the admin token file is written
	HeartbeatInterval time.Duration // told to agents; default 30s
	OfflineAfter      time.Duration // no heartbeat for this long → confirm, then offline; default 2m
	ConfirmTimeout    time.Duration // how long confirmation may take; default 10s
	// ReconnectGrace is how long an agent whose connection ended without
	// a goodbye has to come back before its running tasks are reclaimed;
	// default 10s. (An agent whose connection was healthy retries after
	// about a second.)
	ReconnectGrace time.Duration
	// RetryBackoff is the pause before a task's first counted retry; it
	// doubles with each failure up to RetryBackoffMax. Defaults 1s and 1m.
	RetryBackoff, RetryBackoffMax time.Duration
	// IdleSuiteGrace is how long an agent may find nothing to run in its
	// suite before it is sent to another suite with work; default 5s.
	IdleSuiteGrace    time.Duration
	CredentialTTL     time.Duration // node credential lifetime; default 30 days
	MaxTokenTTL       time.Duration // the longest lifetime a user may give an API or join token; default 365 days
	MaxSubmitInFlight int64         // bytes of task batches the server receives at once; default 128 MiB
	MaxUnauthConns    int           // connections open at once that have not authenticated; default 1024
	UnauthIdle        time.Duration // an unauthenticated connection idle this long is closed; default 10s
	IdleTimeout       time.Duration // an authenticated keep-alive connection idle this long is closed; default 2m
	FlushInterval     time.Duration // heartbeat batch interval; default 1s
	// StoreTimeout is how long one store call of an API request may take
	// before the request is answered 503 (the store did not answer);
	// default 5s. /metrics then serves its last figures, marked stale.
	StoreTimeout    time.Duration
	SuiteCloseAfter time.Duration // an Open suite with no new task this long is Closed; default 180s
	// EnsembleRestoreDeadline is how long a running ensemble's replicas
	// wait for their lost (offline) node before they are placed again
	// elsewhere, unless the ensemble sets its own; default 5m (DMS's).
	EnsembleRestoreDeadline time.Duration
	// EnsembleProvisionDeadline is how long an ensemble that fits on no
	// node waits for the machines pools start for it; default 10m.
	EnsembleProvisionDeadline time.Duration
	SuiteTick                 time.Duration // how often suites are closed and completed; default 1s
	// IdlePoll is how often an idle agent asks for a suite when nothing
	// woke it (the welcome tells it); default 30s. Every change that may
	// give an idle node work wakes it at once: tasks added, released or
	// back in the queue, a retry's or a failed prepare's wait over, the
	// node retagged. The poll is a safety net, and each ask costs the
	// server a look at every open suite.
	IdlePoll      time.Duration
	DriftInterval time.Duration // how often deployments are compared with their providers; default 30s
	// AgentServerURL is the server's URL as pool machines reach it;
	// default the URL it listens on. A plain http:// one beyond loopback
	// would carry their join tokens and credentials in clear: it is
	// refused unless AgentInsecureHTTP, which their agents are then
	// configured with too.
	AgentServerURL    string
	AgentInsecureHTTP bool
	// AgentBinaries are static nodemgr binaries the orchestrator delivers
	// onto pool machines, one per architecture, and AgentBinaryDir holds
	// more, named nodemgr-linux-GOARCH; this executable serves its own
	// arch when they do not.
	AgentBinaries  []string
	AgentBinaryDir string
	// Orchestrator tunes the pools' loop (tick, drain timeout, backoff).
	Orchestrator orchestrate.Config
	// ProviderSettings configures providers by name (e.g. docker: host).
	ProviderSettings map[string]map[string]string
	// ExecutorSettings configures executors by name: ssh (user, port,
	// identity_file, known_hosts, accept_new_host_keys, jump_host,
	// connect_timeout; see package ssh), whose settings and connections
	// the sftp and rsync executors share.
	ExecutorSettings map[string]map[string]string
	Version          string

	// TLSCert and TLSKey are PEM files of a certificate to serve HTTPS
	// with. Without them, a server listening on an address other than
	// loopback (or with TLSAuto) makes a CA in DataDir on first start and
	// serves a certificate from it for its names and addresses, plus
	// TLSSANs (names behind NAT). On loopback it serves plain HTTP.
	TLSCert, TLSKey string
	TLSAuto         bool
	TLSSANs         []string

	// Blobs stores task input and output files; nil: a directory blobs
	// in DataDir. An S3-compatible store lets several replicas share them.
	Blobs blob.Store
	// BlobMaxSize caps one task file; 0: 1 GiB.
	BlobMaxSize int64
	// BlobRetention is how long a task file no task refers to is kept;
	// 0: 24h.
	BlobRetention time.Duration
	// TaskLogMax is how many bytes of each attempt's output are kept as
	// its full log (api.TaskLog); 0: 64 MiB; negative: none, the results'
	// tails only.
	TaskLogMax int64

	// Dashboard tunes the web dashboard under /ui/ (sessions, live
	// updates); zero values take its defaults.
	Dashboard ui.Config

	// Overlay shapes the overlay network the agents started with it form
	// (package overlay): its prefix, each node's block; zero values take
	// its defaults (a /24 per node of 100.64.0.0/10).
	Overlay overlay.Config

	// ReplicaID names this server among the replicas that share its
	// store; default a random one per process (r-...).
	ReplicaID string
	// LeaderLease is the TTL of the lease that elects the replica running
	// the singleton loops; it is renewed every third of it, and another
	// replica takes over within about this long after the leader stops
	// without releasing it. Default 10s.
	LeaderLease time.Duration
}

// setDefaults fills in what was left zero (DESIGN.md's defaults).
func (c *Config) setDefaults() {
	c.EnsembleRestoreDeadline = cmp.Or(c.EnsembleRestoreDeadline, 5*time.Minute)
	c.EnsembleProvisionDeadline = cmp.Or(c.EnsembleProvisionDeadline, 10*time.Minute)
	c.BlobMaxSize = cmp.Or(c.BlobMaxSize, taskfiles.DefaultMaxSize)
	c.BlobRetention = cmp.Or(c.BlobRetention, taskfiles.DefaultRetention)
	c.TaskLogMax = cmp.Or(c.TaskLogMax, tasklog.DefaultMax)
	c.Listen = cmp.Or(c.Listen, "127.0.0.1:7070")
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, 30*time.Second)
	c.OfflineAfter = cmp.Or(c.OfflineAfter, 2*time.Minute)
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 10*time.Second)
	c.ReconnectGrace = cmp.Or(c.ReconnectGrace, 10*time.Second)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, time.Second)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, time.Minute)
	c.IdleSuiteGrace = cmp.Or(c.IdleSuiteGrace, 5*time.Second)
	c.CredentialTTL = cmp.Or(c.CredentialTTL, 30*24*time.Hour)
	c.MaxUnauthConns = cmp.Or(c.MaxUnauthConns, 1024)
	c.UnauthIdle = cmp.Or(c.UnauthIdle, 10*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 2*time.Minute)
	c.MaxSubmitInFlight = cmp.Or(c.MaxSubmitInFlight, 2*maxTaskBody)
	c.MaxTokenTTL = cmp.Or(c.MaxTokenTTL, DefaultMaxTokenTTL)
	c.FlushInterval = cmp.Or(c.FlushInterval, time.Second)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, DefaultStoreTimeout)
	c.SuiteCloseAfter = cmp.Or(c.SuiteCloseAfter, 180*time.Second)
	c.SuiteTick = cmp.Or(c.SuiteTick, time.Second)
	c.IdlePoll = cmp.Or(c.IdlePoll, 30*time.Second)
	c.DriftInterval = cmp.Or(c.DriftInterval, 30*time.Second)
	c.Version = cmp.Or(c.Version, "dev")
	c.ReplicaID = cmp.Or(c.ReplicaID, auth.NewID("r-"))
	c.LeaderLease = cmp.Or(c.LeaderLease, 10*time.Second)
}

func (c *Config) validate() error {
	if c.HeartbeatInterval < 10*time.Millisecond {
		return errdefs.Field("heartbeat_interval", "must be at least 10ms, got %s", c.HeartbeatInterval)
	}
	if c.OfflineAfter < 2*c.HeartbeatInterval {
		return errdefs.Field("offline_after", "must be at least twice the heartbeat interval (%s), got %s", c.HeartbeatInterval, c.OfflineAfter)
	}
	if c.ConfirmTimeout <= 0 {
		return errdefs.Field("confirm_timeout", "must be positive, got %s", c.ConfirmTimeout)
	}
	if c.ReconnectGrace < 0 {
		return errdefs.Field("reconnect_grace", "must be positive, got %s", c.ReconnectGrace)
	}
	if c.RetryBackoff < 0 || c.RetryBackoffMax < c.RetryBackoff {
		return errdefs.Field("retry_backoff", "must be positive and at most retry_backoff_max (%s), got %s", c.RetryBackoffMax, c.RetryBackoff)
	}
	if c.IdleSuiteGrace < 0 {
		return errdefs.Field("idle_suite_grace", "must be positive, got %s", c.IdleSuiteGrace)
	}
	if c.MaxSubmitInFlight < maxTaskBody {
		return errdefs.Field("max_submit_in_flight", "must be at least one batch, %d bytes, got %d", maxTaskBody, c.MaxSubmitInFlight)
	}
	if c.MaxTokenTTL < time.Hour {
		return errdefs.Field("max_token_ttl", "must be at least 1h, got %s", c.MaxTokenTTL)
	}
	if c.StoreTimeout < 10*time.Millisecond {
		return errdefs.Field("store_timeout", "must be at least 10ms, got %s", c.StoreTimeout)
	}
	if c.LeaderLease < 30*time.Millisecond {
		return errdefs.Field("leader_lease", "must be at least 30ms, got %s", c.LeaderLease)
	}
	if err := cleartext.Check(c.AgentServerURL, c.AgentInsecureHTTP, "--agent-insecure-http"); err != nil {
		return errdefs.Field("agent_server_url", "pool machines would send their join token and credential in clear: %v", err)
	}
	if c.CredentialTTL < 3*c.HeartbeatInterval {
		// Agents renew at two thirds of the lifetime, checked every heartbeat.
		return errdefs.Field("credential_ttl", "must be at least three heartbeat intervals (%s), got %s", 3*c.HeartbeatInterval, c.CredentialTTL)
	}
	return nil
}

// Server is the coordinator.
type Server struct {
	cfg Config
	// store bounds the store calls of API requests (store.Bounded);
	// backend is the store itself, for its optional capabilities.
	store      store.Store
	backend    store.Store
	log        *slog.Logger
	hub        *hub.Hub             // agents' sessions, liveness, leases, signals and relays
	dispatcher *dispatch.Dispatcher // suites and tasks to agents
	enroll     *enroll.Enroller     // admits agents
	containers *oncommand.Commander // containers on command
	accounts   *accounts.Accounts   // users and their tokens
	health     healthCheck
	life       context.Context           // ends when Serve returns; for work that outlives a request
	catalog    *catalog.Catalog          // templates, drivers and the machines they made
	orch       *orchestrate.Orchestrator // nil until Serve
	metrics    *metrics
	scrapers   scraperAuth // /metrics tokens last accepted, for while the store does not answer
	dashboard  *ui.UI      // /ui/: calls the API in-process, as the logged-in user
	reasons    dispatch.ReasonCache
	handler    http.Handler
	ensembles  *deploy.Runner
	overlay    *overlay.Network

	mu       sync.Mutex
	listener net.Listener
	ready    chan struct{}

	tls *tlsca.Serving // nil: plain HTTP

	// submitBudget caps the bytes of task batches received at once.
	submitBudget *httpapi.ByteBudget
	files        *taskfiles.Files // task files in the blob store, and who may reach them
	// guard bounds unauthenticated connections; nil until Serve.
	guard *httpapi.ConnGuard
}

// New makes a server over st. It does not listen until Run.
func New(cfg Config, st store.Store, logger *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	s := &Server{cfg: cfg, store: store.Bounded(st), backend: st, log: logger, ready: make(chan struct{})}
	var err error
	if s.catalog, err = catalog.New(s.store, catalog.Config{ProviderSettings: cfg.ProviderSettings,
		ExecutorSettings: cfg.ExecutorSettings, DriftInterval: cfg.DriftInterval}, logger); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	if s.tls, err = setupTLS(cfg); err != nil {
		return nil, fmt.Errorf("server TLS: %w", err)
	}
	s.submitBudget = httpapi.NewByteBudget(cfg.MaxSubmitInFlight, "task batches")
	blobs, err := taskfiles.Open(cfg.Blobs, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	s.files = taskfiles.New(taskfiles.Config{MaxSize: cfg.BlobMaxSize, Retention: cfg.BlobRetention}, s.store, blobs, logger)
	s.hub = s.newHub(st)
	s.dispatcher = s.newDispatcher()
	s.accounts = accounts.New(accounts.Config{MaxTTL: cfg.MaxTokenTTL, DataDir: cfg.DataDir}, s.store, s.caFingerprint, logger)
	s.containers = oncommand.New(oncommand.Config{CallTimeout: forwardLongTimeout}, s.store,
		oncommand.Hooks{CallLocal: s.hub.CallLocal, Resolve: s.resolveNode}, logger)
	s.enroll = enroll.New(enroll.Config{CredentialTTL: cfg.CredentialTTL}, s.store,
		enroll.Hooks{WakeOrchestrator: s.hub.WakeOrchestrator, PoolEvent: s.poolEvent}, logger)
	s.metrics = newMetrics(s)
	if err := s.newOrchestrator(); err != nil {
		return nil, err
	}
	// The dashboard calls the API through s.handler, set just below.
	apiHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) })
	if s.dashboard, err = ui.New(cfg.Dashboard, apiHandler, logger); err != nil {
		return nil, fmt.Errorf("server dashboard: %w", err)
	}
	s.ensembles = s.newEnsembles()
	if s.overlay, err = overlay.New(cfg.Overlay, s.store, overlayAgents{s.hub}, logger); err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	s.handler = s.routes()
	return s, nil
}

// lifeCtx is the context of the running server: Background when the
// handler is served by something other than Serve (tests).
func (s *Server) lifeCtx() context.Context {
	if s.life == nil {
		return context.Background()
	}
	return s.life
}

// Handler is the server's HTTP handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// Ready is closed once the server listens (Run or Serve got that far); a
// Run that cannot listen returns its error instead, and Ready stays open.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr returns the address the server listens on, once Run has started.
func (s *Server) Addr() string {
	<-s.ready
	return s.listener.Addr().String()
}

// Run listens and serves until ctx is done. Cancellation is not an error.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another server running? choose another --listen)", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, with TLS when the server has it.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = s.tls.Listener(ln)
	s.mu.Lock()
	s.listener = ln
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	s.life = ctx
	s.hub.Begin(ctx, started)
	s.catalog.SetStarted(started)
	s.guard = httpapi.NewConnGuard(s.cfg.MaxUnauthConns, s.cfg.UnauthIdle)
	// Ready once what every request reads is set: a handler served on
	// another listener (tests do) may run from here on.
	close(s.ready)
	// No ReadTimeout or WriteTimeout: copies, exec streams and agents'
	// WebSockets run long. Slow or silent clients meet ReadHeaderTimeout,
	// the guard, and each route's body deadline (wrap).
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnState:         s.guard.ConnState,
		ConnContext:       s.guard.ConnContext,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.orch.SetServerURL(s.agentServerURL())
	replica, err := s.hub.ClaimReplica(ctx)
	if err != nil {
		ln.Close()
		if ctx.Err() != nil {
			return nil // stopped while it started: a stop, not a failure
		}
		return err
	}
	// Every replica runs its own chores; the singleton loops run on the
	// leader only (hub.Hooks.Singletons).
	var wg sync.WaitGroup
	fatal := make(chan error, 1)
	wg.Go(func() { s.hub.Run(ctx, replica, func(err error) { fatal <- err }) })
	wg.Go(func() { s.guard.Reap(ctx) })
	wg.Go(func() { s.dispatcher.SharesLoop(ctx) })
	wg.Go(func() { s.overlay.Run(ctx) })
	if !s.blobsShared() {
		wg.Go(func() { s.files.Loop(ctx) })
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("server listening", "addr", ln.Addr().String(), "version", s.cfg.Version, "tls", s.tls.Describe(),
		"replica", s.cfg.ReplicaID, "instance", s.hub.Instance())

	select {
	case err := <-errc:
		cancel()
		wg.Wait()
		s.hub.Stop(ctx)
		return fmt.Errorf("serve: %w", err)
	case err := <-fatal:
		s.log.Error("stopping", "err", err)
		cancel()
		srv.Close()
		wg.Wait()
		s.hub.Stop(ctx)
		return err
	case <-ctx.Done():
	}
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	s.hub.CloseAll("server shutting down")
	_ = srv.Shutdown(shutdownCtx)
	wg.Wait()
	s.hub.Stop(shutdownCtx) // and keep the last heartbeats
	return nil
}

// DefaultStoreTimeout bounds each store call of an API request unless
// configured otherwise: well above what a working store takes, well below
// what a client or a load balancer waits.
const DefaultStoreTimeout = 5 * time.Second

// DefaultMaxTokenTTL caps token lifetimes unless configured otherwise.
const DefaultMaxTokenTTL = accounts.DefaultMaxTTL

// Bootstrap, ResetAdminToken and AdminTokenFile are the tokens room's, for
// the programs that start a server.
var (
	Bootstrap       = accounts.Bootstrap
	ResetAdminToken = accounts.ResetAdminToken
	AdminTokenFile  = accounts.AdminTokenFile
)

// Close releases the provider and executor connections (the Docker
// engine's, for one). The store belongs to the caller.
func (s *Server) Close() error {
	return errors.Join(s.catalog.Close(), s.dashboard.Close())
}
