// Package agent is the nodemgr node agent: one per machine (a lock file in
// its data dir guarantees it), registered with the coordinator by a join
// token, holding one WebSocket to it. It sends heartbeats, handles the
// server's notifications in order (acknowledging each, persisting how far it
// got so a restart neither loses nor repeats one), and reconnects with
// exponential backoff when the connection drops.
//
// The agent does not import server code: it speaks the protocol in api and
// internal/base/proto only.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/backoff"
	"github.com/nodemgr/nodemgr/internal/base/datadir"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/hw"
	"github.com/nodemgr/nodemgr/internal/base/lockfile"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/node/capacity"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// Agent is a running node agent.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	lock *lockfile.Lock
	http *http.Client
	// blobs moves task files between the server and sandboxes.
	blobs *blobClient
	// users says who suites' and services' code runs as.
	users runas.Policy

	machineID string
	hardware  api.Hardware

	mu       sync.Mutex
	st       state
	agState  string
	suiteID  string        // the suite being worked on
	shutdown chan string   // receives the shutdown mode once
	stopReq  chan struct{} // closed when a shutdown is asked for
	once     sync.Once
	// sessionUp is set when a session got through hello: the connection
	// works, so the reconnect backoff starts over.
	sessionUp atomic.Bool
	serverIdx atomic.Int32 // which of cfg.Servers it talks to

	runner    *runner
	wl        *workloads
	local     http.Handler    // the local API, for its socket and the server's requests
	localTLS  *localTLS       // the TCP local API's TLS; nil on loopback or without one
	stopCtx   context.Context // ends when Run returns
	peer      atomic.Pointer[proto.Peer]
	contact   atomic.Pointer[contact] // nil while no welcomed session is up
	connMu    sync.Mutex
	connected chan struct{} // closed while a session is up

	// workChanged says the agent's state or suite changed: the server
	// hears it with a heartbeat at once, not at the next tick.
	workChanged chan struct{}
	// notices are the provider's notices heard from the metadata service.
	notices     *notices
	caPinned    atomic.Bool // the join token's CA was kept
	saidGoodbye atomic.Bool // the server heard this agent leave
	// overlay is the node's WireGuard mesh (overlay.go), relayOut the
	// packets it relays through the server (overlayrelay.go).
	overlay     overlayNode
	relayOut    chan relayPacket
	relayBlocks atomic.Pointer[map[string]netip.Prefix] // peers' blocks by node ID, for the relay
}

// New validates cfg, takes the data dir's lock and loads the agent's state.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	users, err := runas.NewPolicy(logger, cfg.TaskUser)
	if err != nil {
		return nil, fmt.Errorf("agent users: %w", err)
	}
	// Others' code must pass through the data dir to its work dirs when it
	// runs as other users; nothing else there is theirs (sealDataDir).
	ensure := datadir.Ensure
	if users.Switch {
		ensure = datadir.EnsurePassable
	}
	if was, err := ensure(cfg.DataDir); err != nil {
		return nil, err
	} else if was != 0 {
		logger.Warn("the data dir holds this node's credential and was open to other users; made it private", "dir", cfg.DataDir, "mode", was.String())
	}
	lock, err := lockfile.Acquire(filepath.Join(cfg.DataDir, "agent.lock"), "nodemgr agent")
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: logger, lock: lock, users: users, agState: api.AgentIdle,
		shutdown: make(chan string, 1), stopReq: make(chan struct{}),
		connected: make(chan struct{}), stopCtx: context.Background(), workChanged: make(chan struct{}, 1),
		notices: newNotices(), relayOut: make(chan relayPacket, relayQueueLen)}
	a.runner = newRunner(a)
	if a.st, err = loadState(cfg.DataDir); err != nil {
		lock.Release()
		return nil, err
	}
	if a.st.Server != "" && !slices.Contains(cfg.Servers, a.st.Server) {
		if err := a.serverMoved(); err != nil {
			lock.Release()
			return nil, err
		}
	}
	if err := a.setupTransport(); err != nil {
		lock.Release()
		return nil, fmt.Errorf("agent config: %w", err)
	}
	a.blobs = newBlobClient(a.server, a.credential, a.http, a.cfg.DataDir, a.cfg.BlobCacheMax)
	a.blobs.log = logger.With("subsystem", "blob-cache")
	for _, f := range cfg.openSecretFiles {
		logger.Warn("a file holding a secret is readable by other users; chmod 600 it", "file", f)
	}
	if clear := cfg.inClear(); len(clear) > 0 {
		logger.Warn("insecure_http: the join token and this node's credential go to the server in clear text; anyone on the network path can read them and act as this node. Use https:// where you can", "server", strings.Join(clear, ","))
	}
	if a.machineID, err = hw.MachineID(cfg.DataDir); err != nil {
		lock.Release()
		return nil, fmt.Errorf("machine id: %w", err)
	}
	if a.wl, err = newWorkloads(cfg, agentScope(a.machineID, cfg.DataDir), &a.users, a.overlayResolvers, logger); err != nil {
		lock.Release()
		return nil, err
	}
	if a.localTLS, err = setupLocalTLS(cfg); err != nil {
		lock.Release()
		return nil, err
	}
	if a.localTLS != nil {
		a.wl.presence.LocalAPI.CAFingerprint = a.localTLS.fingerprint
	}
	a.local = a.localHandler()
	if err := a.sealDataDir(); err != nil {
		lock.Release()
		return nil, err
	}
	return a, nil
}

// Close releases the data dir lock.
func (a *Agent) Close() error { return a.lock.Release() }

// NodeID returns the node ID, once registered.
func (a *Agent) NodeID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.NodeID
}

// errAuth marks a rejected credential: register again.
var errAuth = errors.New("credential rejected")

// Run works until ctx ends or the server orders a shutdown. It returns nil
// in both cases; it returns an error only when it cannot go on (for
// example: no credential and no join token).
func (a *Agent) Run(ctx context.Context) error {
	hwctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	var err error
	a.hardware, err = hw.Detect(hwctx, a.cfg.DataDir)
	cancel()
	if err != nil {
		a.log.Warn("hardware detection incomplete", "err", err)
	}
	a.hardware.Hostname = firstNonEmpty(a.hardware.Hostname, a.cfg.Name)
	if err := a.wl.initCapacity(ctx, a.cfg, a.hardware); err != nil {
		return fmt.Errorf("resource books: %w", err)
	}
	a.wl.reconcileBooks()
	// Logs of attempts an agent that stopped mid-suite ran: those attempts
	// are the server's to run again.
	os.RemoveAll(a.taskLogsDir())

	// The runner outlives connections: a suite goes on while the agent
	// reconnects, and its reports wait for the next session.
	runCtx, stopRunner := context.WithCancel(ctx)
	a.stopCtx = runCtx
	go a.runner.loop(runCtx)
	defer func() {
		stopRunner()
		<-a.runner.stopped
	}()
	// Services and the local API outlive connections too; the services
	// themselves outlive the agent.
	var bg sync.WaitGroup
	defer a.closeOverlay(ctx)
	defer bg.Wait()
	defer stopRunner()
	if a.cfg.Overlay {
		bg.Go(func() { a.overlayLoop(runCtx) })
		bg.Go(a.relayLoop)
	}
	bg.Go(func() {
		if err := a.wl.run(runCtx); err != nil {
			a.log.Error("service supervisor stopped", "err", err)
		}
	})
	localErr := make(chan error, 1)
	bg.Go(func() {
		if err := a.serveLocalAPI(runCtx); err != nil {
			a.log.Error("local API stopped", "err", err)
			localErr <- err
		}
	})
	if a.cfg.Standalone {
		a.log.Info("running standalone: no server; manage this node through its local API", "socket", a.cfg.LocalAPISocket)
		// No tasks to finish and no server to say goodbye to: a shutdown
		// (SIGTERM, systemctl stop) ends the agent at once. Its services
		// keep running, as with a server.
		select {
		case <-ctx.Done():
			return nil
		case <-a.stopReq:
			a.log.Info("agent stopped", "mode", "standalone")
			return nil
		case err := <-localErr:
			return err
		}
	}

	if a.cfg.IMDS != "" {
		bg.Go(func() { a.watchIMDS(runCtx) })
	}

	bo := &backoff.Backoff{Min: a.cfg.ReconnectMin, Max: a.cfg.ReconnectMax}
	for {
		err := a.connectOnce(ctx)
		if mode, ok := a.shutdownRequested(); ok {
			a.finishShutdown(ctx, mode)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errAuth) {
			a.log.Warn("the server rejected the node credential; registering again", "err", err)
			a.mu.Lock()
			a.st.Credential = ""
			a.mu.Unlock()
			if a.cfg.JoinToken == "" {
				return fmt.Errorf("the server rejected this node's credential and no join token is configured: create one with `nodemgr join-token create` and pass it with --join-token-file or NODEMGR_JOIN_TOKEN")
			}
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if a.sessionUp.Swap(false) {
			// The server was there a moment ago (or it restarted): try
			// again soon, not at the backoff of an outage long past.
			bo.Reset()
		}
		d := bo.Next()
		a.log.Warn("disconnected from server; reconnecting", "err", err, "in", d.Round(time.Millisecond), "to", a.failover())
		select {
		case <-ctx.Done():
			return nil
		case <-a.stopReq: // connect now: the session drains and says goodbye
		case <-time.After(d):
		}
	}
}

// server is the coordinator replica the agent talks to now.
func (a *Agent) server() string {
	if len(a.cfg.Servers) == 0 { // a config that skipped validate (tests)
		return strings.TrimRight(a.cfg.Server, "/")
	}
	return a.cfg.Servers[int(a.serverIdx.Load())%len(a.cfg.Servers)]
}

// failover moves to the next replica, when there are several, and
// returns the one to try next: a replica that is down, or cut off, is
// left for the next, in order, at the usual backoff.
func (a *Agent) failover() string {
	if len(a.cfg.Servers) > 1 {
		a.serverIdx.Add(1)
	}
	return a.server()
}

// goodbyeWait bounds the last connection attempt of an agent that was
// asked to stop while disconnected.
const goodbyeWait = 10 * time.Second

// Shutdown stops the agent as `nodemgr node shutdown` does. Graceful stops
// taking suites, returns the buffered tasks, lets the running ones finish
// within ShutdownGrace, runs the cleanup hook and says goodbye; force
// stops the running tasks at once (they go back to the queue, not counted
// as failures) and still says goodbye, so the server requeues at once. A
// force after a graceful one cuts the grace short. Run returns when done.
func (a *Agent) Shutdown(mode string) {
	first := false
	a.once.Do(func() {
		first = true
		a.shutdown <- mode
		close(a.stopReq)
	})
	if !first && mode == api.ShutdownForce {
		a.log.Warn("stopping at once: running tasks are stopped and go back to the queue")
		go a.runner.shutdown(api.ShutdownForce, 0)
	}
}

// finishShutdown completes a shutdown once the session is gone: the work
// is drained here, and if the agent could not say goodbye, one more short
// session delivers the reports and the goodbye.
func (a *Agent) finishShutdown(ctx context.Context, mode string) {
	a.drain(mode)
	if !a.saidGoodbye.Load() && ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, goodbyeWait)
		if err := a.connectOnce(gctx); err != nil && !a.saidGoodbye.Load() {
			a.log.Warn("could not say goodbye to the server; it will find out this node is gone by itself", "err", err)
		}
		cancel()
	}
	a.log.Info("agent stopped", "mode", mode)
}

// fatalError stops Run: retrying cannot help.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

func (a *Agent) shutdownRequested() (string, bool) {
	select {
	case m := <-a.shutdown:
		a.shutdown <- m // keep it visible
		return m, true
	default:
		return "", false
	}
}

// connectOnce registers if needed, connects, and serves one session.
func (a *Agent) connectOnce(ctx context.Context) error {
	if err := a.ensureRegistered(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	cred, lastSeq := a.st.Credential, a.st.LastSeq
	a.mu.Unlock()

	server := a.server()
	wsURL := "ws" + strings.TrimPrefix(server, "http") + "/v1/agent/connect"
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, resp, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{
		HTTPClient: a.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}},
	})
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("connect: %w", errAuth)
		}
		if hint := tlsTrouble(err); hint != "" {
			// Retried all the same: the server's certificate may be
			// being fixed.
			return fmt.Errorf("connect to %s: %w (%s)", server, err, hint)
		}
		return fmt.Errorf("connect to %s: %w", server, err)
	}
	conn := proto.NewWebSocketConn(c, 1<<20)
	peer := proto.NewPeer(conn, a, proto.Options{Logger: a.log, LastSeq: lastSeq, Keepalive: a.cfg.Keepalive})
	return a.session(ctx, conn, peer)
}

// leave says goodbye and closes the connection; the work is drained by then.
func (a *Agent) leave(peer *proto.Peer, conn proto.Conn, mode string) {
	a.setState(api.AgentShuttingDown)
	a.log.Info("saying goodbye to the server", "mode", mode)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := peer.Call(ctx, api.MethodGoodbye, api.Goodbye{Reason: mode}, nil); err != nil {
		a.log.Warn("goodbye not delivered", "err", err)
	} else {
		a.saidGoodbye.Store(true)
	}
	conn.Close(proto.CloseNormal, "agent shut down ("+mode+")")
}

// maybeRenew swaps the credential for a fresh one when two thirds of its
// lifetime are gone, so a long-running agent never locks itself out.
func (a *Agent) maybeRenew(ctx context.Context, peer *proto.Peer) {
	a.mu.Lock()
	issued, expires := a.st.CredentialIssued, a.st.CredentialExpires
	a.mu.Unlock()
	if expires.IsZero() || time.Until(expires) > expires.Sub(issued)/3 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var resp api.RegisterResponse
	if err := peer.Call(ctx, api.MethodRenew, struct{}{}, &resp); err != nil {
		a.log.Warn("renew credential", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.Credential, a.st.CredentialIssued, a.st.CredentialExpires = resp.Credential, time.Now().UTC(), resp.ExpiresAt
	if err := a.st.save(a.cfg.DataDir); err != nil {
		a.log.Error("save renewed credential", "err", err)
		return
	}
	a.log.Info("credential renewed", "expires", resp.ExpiresAt)
}

// ensureRegistered registers with the join token when the agent has no
// credential yet.
func (a *Agent) ensureRegistered(ctx context.Context) error {
	a.mu.Lock()
	has := a.st.Credential != ""
	a.mu.Unlock()
	if has {
		return nil
	}
	if a.cfg.JoinToken == "" {
		return &fatalError{fmt.Errorf("this agent is not registered yet: pass a join token (--join-token-file, NODEMGR_JOIN_TOKEN or join_token in the config; create one with `nodemgr join-token create`)")}
	}
	req := api.RegisterRequest{
		MachineID: a.machineID, DataDir: a.cfg.DataDir, Name: a.cfg.Name,
		Tags: a.cfg.Tags, Labels: a.cfg.Labels, Groups: a.cfg.Groups,
		Hardware: a.hardware, AgentVersion: a.cfg.Version,
	}
	body, _ := json.Marshal(req)
	server := a.server()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, server+"/v1/agent/register", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Authorization", "Bearer "+a.cfg.JoinToken)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(hreq)
	if err != nil {
		if isTLSTrouble(err) {
			// Nothing was sent: the agent does not trust the server,
			// and retrying cannot change that.
			if hint := tlsTrouble(err); hint != "" {
				err = fmt.Errorf("%w (%s)", err, hint)
			}
			return &fatalError{fmt.Errorf("register with %s: %w", server, err)}
		}
		return fmt.Errorf("register: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("register with %s: %w", server, answerError(resp))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return &fatalError{err} // a bad token or config does not heal by retrying
		}
		return err
	}
	var rr api.RegisterResponse
	if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil {
		return fmt.Errorf("register: decode response: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.NodeID, a.st.Server = rr.NodeID, server
	a.st.Credential, a.st.CredentialIssued, a.st.CredentialExpires = rr.Credential, time.Now().UTC(), rr.ExpiresAt
	if err := a.st.save(a.cfg.DataDir); err != nil {
		return &fatalError{err}
	}
	a.log.Info("registered", "node", rr.NodeID, "server", server)
	return nil
}

// answerError reads the server's error answer. One that is not nodemgr's
// JSON comes from something else on the way, or, when it is Go's answer
// to plain HTTP on a TLS port, from a server that speaks HTTPS.
func answerError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb api.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		return errdefs.FromAPI(eb.Error)
	}
	if resp.StatusCode == http.StatusBadRequest && bytes.Contains(b, []byte("HTTPS server")) {
		return errdefs.Field("server", "the server speaks HTTPS: use an https:// URL")
	}
	return fmt.Errorf("HTTP %s: %s", resp.Status, bytes.TrimSpace(b))
}

// work returns the agent state and the suite it works on. An agent that
// drains for an interruption says Draining whatever stage its suite is
// at, until it shuts down.
func (a *Agent) work() (state, suite string) {
	draining := a.notices.draining() != nil
	a.mu.Lock()
	defer a.mu.Unlock()
	if draining && a.agState != api.AgentShuttingDown {
		return api.AgentDraining, a.suiteID
	}
	return a.agState, a.suiteID
}

func (a *Agent) setWork(state, suite string) {
	a.mu.Lock()
	a.agState, a.suiteID = state, suite
	a.mu.Unlock()
	a.workChangedNow()
}

func (a *Agent) setState(s string) {
	a.mu.Lock()
	a.agState = s
	a.mu.Unlock()
	a.workChangedNow()
}

func (a *Agent) workChangedNow() {
	select {
	case a.workChanged <- struct{}{}:
	default:
	}
}

// drain stops the runner for a shutdown: graceful lets running tasks
// finish within ShutdownGrace and runs the cleanup hook; force does not wait.
func (a *Agent) drain(mode string) {
	a.runner.shutdown(mode, a.cfg.ShutdownGrace)
	a.setState(api.AgentShuttingDown)
}

// setPeer publishes the live session (nil when disconnected).
func (a *Agent) setPeer(p *proto.Peer) {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	a.peer.Store(p)
	if p != nil {
		close(a.connected)
	} else {
		a.connected = make(chan struct{})
	}
}

// call sends a request to the server over the live session, waiting for
// one if the agent is between connections.
func (a *Agent) call(ctx context.Context, method string, req, resp any) error {
	for {
		if p := a.peer.Load(); p != nil {
			err := p.Call(ctx, method, req, resp)
			if errors.Is(err, errdefs.ErrUnavailable) && ctx.Err() == nil {
				continue // that session just ended; wait for the next
			}
			return err
		}
		a.connMu.Lock()
		ch := a.connected
		a.connMu.Unlock()
		if a.peer.Load() != nil {
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not connected to the server: %w", method, errdefs.ErrUnavailable)
		case <-ch:
		}
	}
}

// HandleRequest answers the server's calls.
func (a *Agent) HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error) {
	switch method {
	case api.MethodPing:
		return struct{}{}, nil
	case api.MethodWake:
		a.runner.poke()
		return struct{}{}, nil
	case api.MethodTasksGiveback:
		var req api.TasksGiveback
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, errdefs.Field("body", "%v", err)
		}
		return a.runner.giveBack(req), nil
	case api.MethodOverlayState:
		return a.overlayStateReq(body)
	case api.MethodOverlayRelayed:
		return a.overlayRelayed(body)
	case api.MethodLocalAPI:
		var req api.LocalRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, errdefs.Field("body", "%v", err)
		}
		return a.serveForwarded(ctx, req)
	}
	return nil, proto.UnknownMethod(method)
}

// HandleNotify acts on one server notification and records its seq on disk
// before it is acknowledged, so a crash in between does not repeat it.
func (a *Agent) HandleNotify(ctx context.Context, seq uint64, method string, body json.RawMessage) error {
	var save func(*state)
	switch method {
	case api.NotifyShutdown:
		var req api.ShutdownRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("notification %d: %w", seq, err)
		}
		defer a.Shutdown(req.Mode)
	case api.NotifySuiteCancelled:
		var ref api.SuiteRef
		if err := json.Unmarshal(body, &ref); err != nil {
			return fmt.Errorf("notification %d: %w", seq, err)
		}
		a.log.Info("suite cancelled by the server", "suite", ref.SuiteID)
		a.runner.cancelSuite(ref.SuiteID)
	case api.NotifyTaskCancel:
		var ref api.TaskRef
		if err := json.Unmarshal(body, &ref); err != nil {
			return fmt.Errorf("notification %d: %w", seq, err)
		}
		a.runner.cancelTask(ref.TaskID, ref.Attempt)
	case api.NotifyUpdate:
		var u api.NodeUpdate
		if err := json.Unmarshal(body, &u); err != nil {
			return fmt.Errorf("notification %d: %w", seq, err)
		}
		save = func(st *state) { st.Tags, st.Labels, st.Groups = u.Tags, u.Labels, u.Groups }
		a.log.Info("node updated by the server", "tags", u.Tags, "labels", u.Labels, "groups", u.Groups)
	default:
		// A newer server may push what this agent does not know; skipping
		// beats wedging the queue.
		a.log.Warn("ignoring unknown notification", "method", method, "seq", seq)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if save != nil {
		save(&a.st)
	}
	a.st.LastSeq = seq
	return a.st.save(a.cfg.DataDir)
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

var _ proto.Handler = (*Agent)(nil)

// machineUsage measures how busy the machine is for the heartbeat (the
// dashboard's charts): nil where it cannot be measured, which the server
// takes as no sample.
func (a *Agent) machineUsage() *api.MachineUsage {
	free, err := capacity.ReadMachineFree(a.cfg.DataDir)
	if err != nil {
		return nil
	}
	return capacity.Usage(a.hardware, free)
}
