// Package store defines the coordinator's persistent state behind one
// interface, Store, so that the embedded SQLite implementation (store/sqlite)
// and a PostgreSQL one can serve the same server. Every implementation must
// pass the conformance suite in store/storetest.
//
// Errors are the classes of errdefs: a missing row is errdefs.ErrNotFound, a
// unique clash errdefs.ErrConflict.
package store

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// Store is the coordinator's state. Implementations are safe for concurrent use.
type Store interface {
	Nodes
	Notifications
	Auth
	Close() error
}

// Node is a stored node. Hardware, tags, labels and groups travel as in api.
type Node struct {
	ID            string
	Name          string
	MachineID     string
	DataDir       string
	Tags          []string
	Labels        map[string]string
	Groups        []string
	Hardware      api.Hardware
	Status        string // api.Status*
	StatusReason  string
	AgentState    string // api.Agent*
	AgentVersion  string
	LastHeartbeat time.Time // zero: never
	RegisteredAt  time.Time
	UpdatedAt     time.Time
}

// NodeFilter narrows ListNodes. Zero values match everything.
type NodeFilter struct {
	Status string
	// Groups: if non-empty, only nodes in at least one of these groups.
	Groups []string
}

// Heartbeat is one agent's liveness, written in batches.
type Heartbeat struct {
	NodeID     string
	At         time.Time
	AgentState string
}

// Nodes stores nodes.
type Nodes interface {
	// UpsertNode creates the node keyed by (MachineID, DataDir), or, if one
	// exists, updates its name, hardware, agent version and merges tags,
	// labels and groups, keeping its ID. n.ID is used only on create.
	UpsertNode(ctx context.Context, n Node) (Node, error)
	GetNode(ctx context.Context, id string) (Node, error)
	ListNodes(ctx context.Context, f NodeFilter) ([]Node, error)
	// UpdateNode applies fn to the current node inside one transaction and
	// stores the result; fn may return an error to abort.
	UpdateNode(ctx context.Context, id string, fn func(*Node) error) (Node, error)
	// RecordHeartbeats sets last heartbeat and agent state for many nodes at
	// once, and turns suspect nodes back online. An offline node stays
	// offline: batches are written late, and a beat buffered before a node
	// was declared offline (or said goodbye) must not revive it — only a new
	// hello does. Unknown IDs are ignored.
	RecordHeartbeats(ctx context.Context, hbs []Heartbeat) error
	// SetNodeStatus moves a node to status with a reason. If onlyIf is
	// non-empty the change happens only when the current status is one of
	// them; changed reports whether it happened.
	SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (changed bool, err error)
	// StaleNodes lists nodes whose status is in statuses and whose last
	// heartbeat is before cutoff.
	StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) ([]Node, error)
	// DeleteNode removes a node, its notifications and its credentials.
	DeleteNode(ctx context.Context, id string) error
}

// Notification is a server → agent push waiting for its acknowledgement.
type Notification struct {
	NodeID    string
	Seq       uint64 // per node, strictly increasing from 1, never reused
	Method    string
	Body      []byte // JSON
	CreatedAt time.Time
}

// Notifications is the durable outbox of server → agent pushes.
type Notifications interface {
	// Enqueue appends a notification for a node and returns it with its Seq.
	Enqueue(ctx context.Context, nodeID, method string, body []byte) (Notification, error)
	// Pending returns the unacknowledged notifications with Seq > after, in order.
	Pending(ctx context.Context, nodeID string, after uint64) ([]Notification, error)
	// Ack drops every notification of the node with Seq <= upTo. Acking an
	// old seq again is not an error.
	Ack(ctx context.Context, nodeID string, upTo uint64) error
}

// User is a stored user. Groups maps group name → role (api.Role*).
type User struct {
	Name      string
	Admin     bool
	Groups    map[string]string
	CreatedAt time.Time
}

// Token is a stored credential: only the SHA-256 of its secret is kept.
type Token struct {
	ID        string
	Kind      string // api.Token*
	Name      string
	Hash      []byte // sha256 of the secret
	User      string // api tokens
	NodeID    string // node credentials
	Groups    []string
	MaxUses   int // join tokens; 0 = unlimited
	Uses      int
	ExpiresAt time.Time // zero: never
	CreatedAt time.Time
	LastUsed  time.Time // zero: never
}

// TokenFilter narrows ListTokens.
type TokenFilter struct {
	Kind   string
	User   string
	NodeID string
}

// Auth stores users, groups and tokens.
type Auth interface {
	CreateUser(ctx context.Context, u User) error
	GetUser(ctx context.Context, name string) (User, error)
	ListUsers(ctx context.Context) ([]User, error)
	// SetMembership sets a user's role in a group; an empty role removes it.
	SetMembership(ctx context.Context, user, group, role string) error
	DeleteUser(ctx context.Context, name string) error // and its tokens

	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by the hash of its secret.
	TokenByHash(ctx context.Context, hash []byte) (Token, error)
	ListTokens(ctx context.Context, f TokenFilter) ([]Token, error)
	DeleteToken(ctx context.Context, id string) error
	// UseJoinToken counts one use of a join token atomically, failing with
	// errdefs.ErrPermission when it is exhausted or expired at now.
	UseJoinToken(ctx context.Context, id string, now time.Time) (Token, error)
	// TouchTokens records last use for many tokens at once.
	TouchTokens(ctx context.Context, used map[string]time.Time) error
	// ReplaceNodeCredential deletes the node's credentials and stores t.
	ReplaceNodeCredential(ctx context.Context, t Token) error
}
