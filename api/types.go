package api

import (
	"strings"
	"time"
)

// Error is the body of every failed API response:
// {"error": {"code": "...", "message": "..."}}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// ErrorBody wraps Error as it travels.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Node statuses as the server sees them.
const (
	StatusOnline  = "online"  // heartbeats arrive
	StatusSuspect = "suspect" // heartbeats overdue; the server is confirming
	StatusOffline = "offline" // confirmed unreachable, or shut down
)

// States, statuses and phases are spelled in lower case everywhere (kebab
// case where they are two words), as node statuses always were.

// AgentState is an agent's state in that spelling: agents before it said
// "Idle" and "ShuttingDown".
func AgentState(s string) string {
	if s == "ShuttingDown" {
		return AgentShuttingDown
	}
	return strings.ToLower(s)
}

// Agent states (the Mitosis node-manager state machine).
const (
	AgentIdle         = "idle"
	AgentPreparing    = "preparing"
	AgentExecuting    = "executing"
	AgentCleanup      = "cleanup"
	AgentShuttingDown = "shutting-down"
	// AgentDraining: its machine is about to go (a spot interruption
	// notice): it takes no new work, has returned what it had not
	// started, and lets what runs go on until the machine's deadline.
	AgentDraining = "draining"
)

// Node is a machine that nodemgr knows.
type Node struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	MachineID     string            `json:"machine_id"`
	DataDir       string            `json:"data_dir"`
	Tags          []string          `json:"tags"`
	Labels        map[string]string `json:"labels"`
	Groups        []string          `json:"groups"`
	Hardware      Hardware          `json:"hardware"`
	Status        string            `json:"status"`
	StatusReason  string            `json:"status_reason,omitempty"`
	AgentState    string            `json:"agent_state,omitempty"` // none while offline
	AgentVersion  string            `json:"agent_version"`
	CurrentSuite  string            `json:"current_suite,omitempty"`
	Connected     bool              `json:"connected"` // to this server, or to another on its database
	LastHeartbeat *time.Time        `json:"last_heartbeat,omitempty"`
	// Presence is what the agent publishes about itself while it is
	// connected: services, artifacts, where its local API listens.
	Presence *Presence `json:"presence,omitempty"`
	// Notices are what the machine's provider announced and the agent
	// heard (a spot interruption, a rebalance recommendation), in
	// GET /v1/nodes/{node} only.
	Notices []Notice `json:"notices,omitempty"`
	// Deployment is the machine the node runs on when nodemgr made it
	// (a pool's), in GET /v1/nodes/{node} only.
	Deployment   string    `json:"deployment,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Hardware describes a node's machine as its agent measured it.
type Hardware struct {
	Hostname    string  `json:"hostname"`
	OS          string  `json:"os"`
	Arch        string  `json:"arch"`
	Kernel      string  `json:"kernel,omitempty"`
	CPUModel    string  `json:"cpu_model,omitempty"`
	Cores       int     `json:"cores"`
	CPULimit    float64 `json:"cpu_limit,omitempty"` // CPUs' worth of time a cgroup quota allows, where less than Cores (1.5 with 2 cores)
	MemoryBytes uint64  `json:"memory_bytes"`        // the cgroup's limit, where that is less than the host's memory
	DiskBytes   uint64  `json:"disk_bytes"`          // size of the filesystem holding the agent's data dir
	GPUs        []GPU   `json:"gpus"`
}

// GPU is one accelerator found on a node.
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid,omitempty"`
	Name        string `json:"name"`
	MemoryBytes uint64 `json:"memory_bytes"`
	Driver      string `json:"driver,omitempty"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
	Next  string `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// NodePatch changes a node's tags and labels (PATCH /v1/nodes/{id}).
// Set* replace; Add*/Remove* edit in place. Unknown fields are rejected.
type NodePatch struct {
	SetTags      *[]string         `json:"set_tags,omitempty"`
	AddTags      []string          `json:"add_tags,omitempty"`
	RemoveTags   []string          `json:"remove_tags,omitempty"`
	SetLabels    map[string]string `json:"set_labels,omitempty"`
	RemoveLabels []string          `json:"remove_labels,omitempty"`
	SetGroups    *[]string         `json:"set_groups,omitempty"`
}

// Shutdown modes.
const (
	ShutdownGraceful = "graceful"
	ShutdownForce    = "force"
)

// ShutdownRequest is the body of POST /v1/nodes/{id}/shutdown.
type ShutdownRequest struct {
	Mode string `json:"mode"` // graceful | force
}

// Roles, in increasing power (the Mitosis model).
const (
	RoleRead  = "Read"
	RoleWrite = "Write"
	RoleAdmin = "Admin"
)

// User is a person or robot that calls the API.
type User struct {
	Name      string            `json:"name"`
	Admin     bool              `json:"admin"`  // superuser: every permission on everything
	Groups    map[string]string `json:"groups"` // group → role
	CreatedAt time.Time         `json:"created_at"`
	// TokenExpiresAt is when the token that asked expires: set by
	// GET /v1/whoami only, so that a client (the dashboard) can warn
	// before it stops working.
	TokenExpiresAt *time.Time `json:"token_expires_at,omitempty"`
}

// CreateUserRequest is the body of POST /v1/users.
type CreateUserRequest struct {
	Name   string            `json:"name"`
	Admin  bool              `json:"admin,omitempty"`
	Groups map[string]string `json:"groups,omitempty"` // group → role
}

// Token describes an API token, a join token or a node credential. The
// secret is returned once, when it is created.
type Token struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"` // api | join | node
	Name   string `json:"name,omitempty"`
	User   string `json:"user,omitempty"`
	NodeID string `json:"node_id,omitempty"`
	Secret string `json:"secret,omitempty"`
	// CAFingerprint is the pin of the server's own CA ("sha256:<hex>"),
	// which a new join token's secret carries after a ".".
	CAFingerprint string     `json:"ca_fingerprint,omitempty"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	LastUsed      *time.Time `json:"last_used,omitempty"`
	// Groups are the groups a join token admits nodes into (none: an
	// admin's token, which admits them into the groups they ask for).
	Groups []string `json:"groups,omitempty"`
	// MaxUses is how many registrations a join token allows (0:
	// unlimited); Uses how many it made.
	MaxUses int `json:"max_uses,omitempty"`
	Uses    int `json:"uses,omitempty"`
}

// Token kinds.
const (
	TokenAPI  = "api"
	TokenJoin = "join"
	TokenNode = "node"
)

// CreateTokenRequest is the body of POST /v1/tokens and POST /v1/join-tokens.
type CreateTokenRequest struct {
	Name string `json:"name,omitempty"`
	User string `json:"user,omitempty"` // api tokens: whose (default: the caller)
	TTL  string `json:"ttl,omitempty"`  // Go duration, e.g. "720h"; empty: kind's default
	// Join tokens: what registering nodes get (merged with the agent's own).
	Groups []string `json:"groups,omitempty"`
	// Join tokens: how many registrations it allows; 0 means unlimited
	// (a re-join token bound to a node defaults to 1).
	MaxUses int `json:"max_uses,omitempty"`
	// Join tokens: bind the token to this existing node (ID or name), so an
	// agent on that node's machine and data dir can re-join it. Admins only.
	Node string `json:"node,omitempty"`
}

// TokenList is the body of GET /v1/tokens and GET /v1/join-tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
	Next   string  `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// UserList is the body of GET /v1/users.
type UserList struct {
	Users []User `json:"users"`
	Next  string `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// Health is the body of GET /healthz.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Replica names the server that answered among those sharing its
	// store. Leader says whether it runs the singleton loops (the
	// orchestrator, liveness, ...) now, in Term, which grows each time
	// leadership moves.
	Replica string `json:"replica"`
	Leader  bool   `json:"leader"`
	Term    int64  `json:"term,omitempty"`
}

// Summary is the body of GET /v1/summary (admins): how many nodes, suites
// and tasks the store holds, by status or state.
type Summary struct {
	Nodes  map[string]int `json:"nodes"`  // status → count
	Suites map[string]int `json:"suites"` // state → count
	Tasks  TaskCounts     `json:"tasks"`
}
