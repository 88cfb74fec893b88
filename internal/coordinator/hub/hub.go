// Package hub is the coordinator's live side: the sessions of the agents
// connected to this server (hello, heartbeats written to the store in
// batches, goodbye), the durable outbox pushed to them, the liveness
// checks that take a silent node offline, the replica and leader leases,
// and the signals and relayed calls by which servers sharing a store act
// for each other's agents. It also keeps what the server knows of a node
// beside its row: its books, its provider's notices, its recent usage, its
// live wire form, and the changes an admin makes to it (patch, forget).
// The server decodes the agents' protocol and calls the hub; the hub calls
// back into the server only through Hooks.
package hub

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Config tunes the hub; the server's Config gives each value (DESIGN.md
// defaults).
type Config struct {
	ReplicaID      string
	OfflineAfter   time.Duration // no heartbeat this long: the node is checked
	ConfirmTimeout time.Duration // how long a check's ping may take
	ReconnectGrace time.Duration // how long a lost connection has to come back
	FlushInterval  time.Duration // how often heartbeats are written
	LeaderLease    time.Duration // the TTL of the leader and replica leases
	// CallTimeout bounds a relayed call on an agent connected here.
	CallTimeout time.Duration
	// Sole says the store serves this one server (SQLite): a lease it
	// holds for another instance was left by a previous run.
	Sole bool
}

// Store is what the hub needs of the store.
type Store interface {
	GetNode(ctx context.Context, id string) (store.Node, error)
	ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error)
	SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (bool, error)
	StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) ([]store.Node, error)
	NodeReplicas(ctx context.Context, statuses ...string) ([]string, error)
	RecordHeartbeats(ctx context.Context, hbs []store.Heartbeat) error
	TouchTokens(ctx context.Context, used map[string]time.Time) error
	Enqueue(ctx context.Context, nodeID, method string, body []byte) (store.Notification, error)
	Pending(ctx context.Context, nodeID string, after uint64) ([]store.Notification, error)
	PutDocument(ctx context.Context, d store.Document) (store.Document, error)
	GetDocument(ctx context.Context, kind, name string) (store.Document, error)
	DeleteDocument(ctx context.Context, kind, name string) error
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error)
	ReleaseLease(ctx context.Context, name, holder string) error
	GetLease(ctx context.Context, name string) (store.Lease, error)
	DeleteNode(ctx context.Context, id string) error
	UpdateNode(ctx context.Context, id string, fn func(*store.Node) error) (store.Node, error)
	Ack(ctx context.Context, nodeID string, seq uint64) error
	ListContainers(ctx context.Context, f store.ContainerFilter) ([]api.Container, error)
}

// Hooks are what the hub asks of the rest of the server.
type Hooks struct {
	// Reclaim puts the tasks running on a node that went offline back to
	// their queues.
	Reclaim func(ctx context.Context, nodeID, reason string)
	// Singletons are the server's loops that run on the leader only, each
	// with its term's fenced context; the hub adds its own liveness loops.
	Singletons func() []func(context.Context)
	// WakeOrchestrator asks the orchestrator, which runs on the leader,
	// for a round now.
	WakeOrchestrator func()
	// SuiteCancelled tells the agents connected here that run the suite,
	// cancelled through another server, to stop.
	SuiteCancelled func(ctx context.Context, suiteID string)
}

// Hub is one server's live side.
type Hub struct {
	cfg      Config
	store    Store
	log      *slog.Logger
	hooks    Hooks
	metrics  *metrics
	signals  *signaller // to and from the other servers on the store
	instance string     // this process among the replicas (replica.go)
	// remoteWork is when agents connected to other servers were last seen
	// working, as the leader's orchestrator read it (their idle time).
	remoteWork sync.Map

	mu       sync.Mutex
	sessions map[string]*Session
	arrived  chan struct{} // closed and replaced whenever a session registers

	bufMu     sync.Mutex
	heartbeat map[string]store.Heartbeat
	tokenUse  map[string]time.Time

	live      liveness
	leading   leadership
	replicas  replicaLives
	relayWait relayWaiters

	// Usage is the recent machine usage of the nodes connected here, as
	// their heartbeats carry it: the dashboard's charts.
	Usage UsageBook

	// started is when the server began serving: every node's heartbeat as
	// far as liveness goes; life ends when it stops. Both are set by
	// Begin, before the first request.
	started time.Time
	life    context.Context
}

// New makes the hub of a server over st; sig is the store's signals, nil
// when the store serves one server.
func New(cfg Config, st Store, sig store.Signals, hooks Hooks, logger *slog.Logger) *Hub {
	h := &Hub{
		cfg: cfg, store: st, log: logger, hooks: hooks,
		signals:   newSignaller(sig, cfg.ReplicaID),
		instance:  newInstance(cfg.ReplicaID),
		sessions:  map[string]*Session{},
		arrived:   make(chan struct{}),
		heartbeat: map[string]store.Heartbeat{},
		tokenUse:  map[string]time.Time{},
	}
	h.metrics = newMetrics(h)
	return h
}

// Instance names this server process among the replicas: its replica ID
// and a random part. Nodes remember the instance they said hello to.
func (h *Hub) Instance() string { return h.instance }

// Begin marks the server's start: the hub's clock of every node's last
// heartbeat, and the life its checks run in.
func (h *Hub) Begin(life context.Context, started time.Time) {
	h.life, h.started = life, started
}

// lifeCtx is the context of the running server: Background before Begin
// (a handler served by something else than the server, in tests).
func (h *Hub) lifeCtx() context.Context {
	if h.life == nil {
		return context.Background()
	}
	return h.life
}

// Run renews this process's replica lease (taken by ClaimReplica),
// writes heartbeats, watches its agents' silence, hears the other
// servers' signals and campaigns for leadership, until ctx ends. fatal is
// called if another process takes over this replica ID: the server must
// stop.
func (h *Hub) Run(ctx context.Context, replica store.Lease, fatal func(error)) {
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.replicaLoop(ctx, replica); err != nil {
			fatal(err)
		}
	})
	wg.Go(func() { h.flushLoop(ctx) })
	wg.Go(func() { h.silenceLoop(ctx) })
	wg.Go(func() { h.signalLoop(ctx) })
	wg.Go(func() { h.leaderLoop(ctx) })
	wg.Wait()
}

// Stop refuses new liveness checks and waits for those running; then,
// with a ctx that is still live, it writes the last heartbeats.
func (h *Hub) Stop(ctx context.Context) {
	h.live.close()
	if ctx.Err() == nil {
		h.Flush(ctx)
	}
}
