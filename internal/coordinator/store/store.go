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
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Store is the coordinator's state. Implementations are safe for concurrent use.
type Store interface {
	Nodes
	Notifications
	Auth
	Suites
	SuiteProblems
	Tasks
	TaskFiles
	Documents
	Deployments
	Containers
	Pools
	Ensembles
	Overlay
	Stats
	Leases
	Close() error
}

// Stats are the counts the server's metrics show. Each costs the same
// whatever the number of nodes, suites and tasks (an index or a kept count,
// never a scan of tasks), since every scrape asks.
type Stats interface {
	// CountNodes counts nodes by status; a status no node has is absent.
	CountNodes(ctx context.Context) (map[string]int, error)
	// CountSuites counts suites by state (a state no suite has is absent)
	// and the tasks of all suites by state.
	CountSuites(ctx context.Context) (map[string]int, api.TaskCounts, error)
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
	CurrentSuite  string    // the suite the agent works on, as it last reported; "" when idle
	LastHeartbeat time.Time // zero: never
	// Replica is the server process (replica ID and instance) that held
	// the agent's session when it last said hello; "" before any.
	Replica      string
	RegisteredAt time.Time
	UpdatedAt    time.Time
}

// NodeFilter narrows ListNodes. Zero values match everything.
type NodeFilter struct {
	Status string
	// Groups: if non-empty, only nodes in at least one of these groups.
	Groups []string
	// Replica: if set, only nodes whose last hello reached that replica.
	Replica string
	Page
}

// Heartbeat is one agent's liveness, written in batches.
type Heartbeat struct {
	NodeID     string
	At         time.Time
	AgentState string
	SuiteID    string // written to Node.CurrentSuite
	// Held is how many of SuiteID's tasks the agent holds and has not
	// started (Node.Held).
	Held int
}

// Nodes stores nodes.
type Nodes interface {
	// CreateNode stores a new node. A second node for the same (MachineID,
	// DataDir) is errdefs.ErrConflict: registration never adopts an
	// existing node (re-joining one goes through UpdateNode, after the
	// server has checked the node's own credential).
	CreateNode(ctx context.Context, n Node) (Node, error)
	// JoinNode is CreateNode that spends one use of the join token
	// tokenID in the same transaction, as UseJoinToken: a node that is
	// not created (a conflict) spends no use, and a token that is spent
	// or expired at now (errdefs.ErrPermission) creates no node.
	JoinNode(ctx context.Context, tokenID string, now time.Time, n Node) (Node, error)
	GetNode(ctx context.Context, id string) (Node, error)
	// ListNodes lists nodes by name, then ID.
	ListNodes(ctx context.Context, f NodeFilter) ([]Node, error)
	// NodesRevision is a number that changes whenever a node is created
	// or deleted, or its name, tags, labels, groups or hardware change,
	// through any server on the store, and at no other write (status,
	// heartbeats, agent state, current suite, replica). What a server
	// keeps of those fields from ListNodes stays true while it reads the
	// same revision; read the revision before the nodes, so that a change
	// between the two reads shows as a new revision next time.
	NodesRevision(ctx context.Context) (int64, error)
	// HeldTasks sums, for each of suiteIDs, the tasks that the online
	// nodes working on it hold and have not started, as their last
	// heartbeats said (Heartbeat.Held). A suite none holds is left out.
	HeldTasks(ctx context.Context, suiteIDs []string) (map[string]int, error)
	// UpdateNode applies fn to the current node inside one transaction and
	// stores the result; fn may return an error to abort.
	UpdateNode(ctx context.Context, id string, fn func(*Node) error) (Node, error)
	// RecordHeartbeats sets last heartbeat and agent state for many nodes at
	// once, and turns suspect nodes back online if the beat came after the
	// node became suspect. An offline node stays offline: batches are
	// written late, and a beat buffered before a node was declared offline
	// (or said goodbye, or became suspect) must not revive it — only a new
	// hello does. Unknown IDs are ignored.
	RecordHeartbeats(ctx context.Context, hbs []Heartbeat) error
	// SetNodeStatus moves a node to status with a reason. If onlyIf is
	// non-empty the change happens only when the current status is one of
	// them; changed reports whether it happened.
	SetNodeStatus(ctx context.Context, id, status, reason string, onlyIf ...string) (changed bool, err error)
	// StaleNodes lists nodes whose status is in statuses and whose last
	// NodeReplicas lists, each once, the replicas (Node.Replica) that the
	// nodes in one of statuses (any if none) last said hello to.
	NodeReplicas(ctx context.Context, statuses ...string) ([]string, error)
	// heartbeat is before cutoff.
	StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) ([]Node, error)
	// DeleteNode removes a node, its notifications and its credentials.
	DeleteNode(ctx context.Context, id string) error
}

// OverlayMember is a node's place on the overlay network.
type OverlayMember struct {
	NodeID     string
	Block      int    // the index of the node's block in the overlay's prefix
	PublicKey  string // base64 WireGuard key
	ListenPort int
	Endpoint   string // host:port peers send to
	Kind       string // api.OverlayKernel or api.OverlayUserspace
	JoinedAt   time.Time
	UpdatedAt  time.Time
}

// Overlay keeps the nodes' places on the overlay network.
type Overlay interface {
	// JoinOverlay stores m as node m.NodeID's place on the overlay. A node
	// already on it keeps its block, whatever m.Block says; a new one gets
	// the lowest free block below blocks, or errdefs.ErrUnavailable when
	// none is free. A public key another node has is errdefs.ErrConflict,
	// an unknown node errdefs.ErrNotFound. Nothing is written when nothing
	// changed. A node's place goes with the node (DeleteNode).
	JoinOverlay(ctx context.Context, m OverlayMember, blocks int) (OverlayMember, error)
	// ListOverlay lists every node on the overlay by block.
	ListOverlay(ctx context.Context) ([]OverlayMember, error)
	// OverlayRevision is a number that changes at every write to the
	// overlay's members, through any server on the store.
	OverlayRevision(ctx context.Context) (int64, error)
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
	ID     string
	Kind   string // api.Token*
	Name   string
	Hash   []byte // sha256 of the secret
	User   string // api tokens
	NodeID string // node credentials
	Groups []string
	// DeploymentID binds a join token to a deployment's machine: the node
	// it creates is that deployment's (the orchestrator's bootstrap).
	DeploymentID string
	MaxUses      int // join tokens; 0 = unlimited
	Uses         int
	ExpiresAt    time.Time // zero: never
	CreatedAt    time.Time
	LastUsed     time.Time // zero: never
}

// TokenFilter narrows ListTokens.
type TokenFilter struct {
	Kind   string
	User   string
	NodeID string
	Page
}

// Auth stores users, groups and tokens.
type Auth interface {
	CreateUser(ctx context.Context, u User) error
	GetUser(ctx context.Context, name string) (User, error)
	// ListUsers lists users by name.
	ListUsers(ctx context.Context, p Page) ([]User, error)
	// SetMembership sets a user's role in a group; an empty role removes it.
	SetMembership(ctx context.Context, user, group, role string) error
	DeleteUser(ctx context.Context, name string) error // and its tokens

	CreateToken(ctx context.Context, t Token) error
	// TokenByHash finds a token by the hash of its secret.
	TokenByHash(ctx context.Context, hash []byte) (Token, error)
	// ListTokens lists tokens oldest first, then by ID.
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

// Suite is a stored task suite. Counts is kept by the store as tasks change state.
type Suite struct {
	ID            string
	Spec          api.SuiteSpec // name, group, tags, worker schedule, hooks ... (stored as JSON)
	State         string        // api.Suite*
	Owner         string
	AssignedNodes []string // explicit assignment; empty means automatic
	// StoppedNodes are nodes where the suite's pool was stopped by hand
	// (allocation stop): it is not offered to them until assigned again.
	StoppedNodes []string
	Counts       api.TaskCounts
	CreatedAt    time.Time
	UpdatedAt    time.Time
	LastTaskAt   time.Time // last time tasks were added (for closing idle suites)
}

// SuiteFilter narrows ListSuites. Zero values match everything.
type SuiteFilter struct {
	States []string
	Groups []string // only suites in one of these groups (when non-empty)
	Page
}

// Suites stores task suites.
type Suites interface {
	// CreateSuite stores a new suite; its name must be unique among suites
	// that are not Complete or Cancelled (errdefs.ErrConflict otherwise).
	CreateSuite(ctx context.Context, s Suite) error
	GetSuite(ctx context.Context, id string) (Suite, error)
	// SuiteByName finds the newest suite with this name.
	SuiteByName(ctx context.Context, name string) (Suite, error)
	// ListSuites lists suites, highest priority first, then oldest first.
	ListSuites(ctx context.Context, f SuiteFilter) ([]Suite, error)
	// UpdateSuite applies fn inside one transaction (state changes, explicit
	// assignment); fn may return an error to abort. Moving a suite to
	// Cancelled also cancels its Ready and Running tasks.
	UpdateSuite(ctx context.Context, id string, fn func(*Suite) error) (Suite, error)
	// CloseIdleSuites moves Open suites whose LastTaskAt (or CreatedAt when
	// no task was ever added) is before cutoff to Closed, and returns their IDs.
	CloseIdleSuites(ctx context.Context, cutoff time.Time) ([]string, error)
	// CompleteSuites moves Closed suites with no Ready or Running task to
	// Complete, and returns their IDs.
	CompleteSuites(ctx context.Context) ([]string, error)
}

// SuiteProblem is a node's latest failure to take a suite up.
type SuiteProblem struct {
	SuiteID string
	api.SuiteProblem
}

// SuiteProblems keeps why nodes could not take suites up (a failing
// prepare hook), so that users see it and the dispatcher backs off.
type SuiteProblems interface {
	// PutSuiteProblem records p for (suiteID, p.NodeID), replacing an older
	// one. An unknown suite or node is errdefs.ErrNotFound.
	PutSuiteProblem(ctx context.Context, suiteID string, p api.SuiteProblem) error
	// SuiteProblems lists the problems of a suite (nodeID ""), of a node
	// (suiteID ""), or of both, newest first.
	SuiteProblems(ctx context.Context, suiteID, nodeID string) ([]SuiteProblem, error)
	// ClearSuiteProblem forgets the problem of (suiteID, nodeID), if any.
	ClearSuiteProblem(ctx context.Context, suiteID, nodeID string) error
}

// Task is a stored task.
type Task struct {
	ID      string
	Seq     int64 // the order tasks were added in, unique; set by the store
	SuiteID string
	Spec    api.TaskSpec
	State   string // api.Task*
	// After are the IDs of the tasks this one waits for (Spec.After with
	// names resolved), in the same suite; the store keeps it Pending until
	// they all finished, and cancels it when one fails or is cancelled.
	After     []string
	Reason    string // why nodemgr cancelled it, if it did
	Attempt   int    // attempts started
	NodeID    string // node of the current or last attempt
	Result    *api.TaskResult
	Failures  []api.TaskFailure // oldest first
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TaskFilter narrows ListTasks.
type TaskFilter struct {
	SuiteID string
	States  []string
	NodeID  string
	Name    string            // only the task of this name
	Labels  map[string]string // only tasks carrying all these labels
	Page
}

// Attempt is a report of how one attempt of a task ended.
type Attempt struct {
	TaskID  string
	Attempt int
	Outcome string // api.Outcome*
	Result  api.TaskResult
	Failure *api.TaskFailure // set for OutcomeFailed
}

// RetryPolicy decides what happens to a task that just failed again: it
// sees its suite's retry policy and the task's own (either may be nil),
// and all its failures so far, the new one last, and says whether to give
// the task up, or else how long it waits before its next attempt.
type RetryPolicy func(suite, task *api.RetryPolicy, failures []api.TaskFailure) (giveUp bool, wait time.Duration)

// Finished is what FinishAttempts did.
type Finished struct {
	Applied int // reports that counted
	// Superseded are attempts still running elsewhere of tasks that a late
	// report just finished: the nodes running them should stop.
	Superseded []Superseded
	// Released are the suites in which tasks became Ready because their
	// last dependency finished: their nodes have work again.
	Released []string
}

// Superseded names an attempt of a task running on a node.
type Superseded struct {
	TaskID, NodeID string
	Attempt        int
}

// Tasks stores tasks and their attempts. Claims are atomic; reports are
// idempotent and only the attempt that holds the task may finish it (the
// first commit wins).
type Tasks interface {
	// AddTasks adds tasks to an Open suite, all or none (errdefs.ErrConflict
	// if the suite is not Open or a name is taken in it, ErrNotFound if it
	// does not exist). A task with After is Pending until those tasks (in
	// this batch or already stored, in the same suite) finished; one whose
	// dependency already failed or was cancelled is stored Cancelled. The
	// caller refuses cycles.
	AddTasks(ctx context.Context, suiteID string, tasks []Task) error
	GetTask(ctx context.Context, id string) (Task, error)
	// ListTasks lists tasks in the order they were added.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	// ClaimTasks moves up to max Ready tasks of the suite to Running on the
	// node, highest priority first then oldest, increments their Attempt, and
	// returns them. Concurrent claims never return the same task twice. A
	// task waiting out its retry pause is not claimed before its time.
	ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]Task, error)
	// FinishAttempts applies reports from a node in one transaction. A report
	// counts if its task is Running on that node at that attempt; others are
	// ignored (late or duplicate) — except a success of the attempt a node
	// lost when it was declared offline (ReclaimNode): the first completion
	// wins, so that success finishes the task whether it is Ready again or
	// Running elsewhere (then Superseded names the other attempt). Succeeded
	// → Finished with the result; Failed → the failure is recorded, then
	// Failed if retry says to give up, or Ready again after the pause retry
	// asks for; Stopped → Ready, nothing recorded. A task that finished
	// releases its dependents (Released names their suites); one that
	// failed for good cancels them, with the reason.
	FinishAttempts(ctx context.Context, nodeID string, reports []Attempt, retry RetryPolicy) (Finished, error)
	// ReturnTasks moves the node's Running tasks among ids back to Ready and
	// takes back the attempt count they were claimed with.
	ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error)
	// ReclaimNode moves every task Running on the node back to Ready (the
	// node went offline, or its agent restarted), except the ones in keep
	// (an agent that reconnected still holds those); attempts already
	// counted stay counted.
	ReclaimNode(ctx context.Context, nodeID string, keep ...string) (int, error)
	// ReclaimSuiteTasks moves the suite's tasks Running on the node back to
	// Ready as ReclaimNode does (attempts stay counted; a late success of
	// the attempt still wins): the node left the suite and holds none.
	ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (int, error)
	// ReattachTasks moves tasks among ids that ReclaimNode took from the
	// node and that are Ready still back to Running on it, at the attempt
	// it was running: its agent came back holding them.
	ReattachTasks(ctx context.Context, nodeID string, ids []string) (int, error)
	// CancelTask moves a Pending, Ready or Running task to Cancelled, with
	// its dependents, and returns it as it was before (so the caller knows
	// which node to tell).
	CancelTask(ctx context.Context, id string) (Task, error)
}

// TaskFiles answers who may see a file of the blob store: a node, the
// files the tasks it holds name (the inputs of their specs, the outputs of
// the tasks they run after); anyone, whether a file exists, for the files
// uploaded into their groups. Each answer is one statement over an index,
// however many files tasks have, so that every blob request is authorized
// against the store's state at that moment, never a cache.
type TaskFiles interface {
	// NodeReadsBlob reports whether the node may download the blob: it
	// holds (Running on it) a task that names digest as an input, or that
	// runs after a task whose result output it (input_from takes outputs
	// of tasks in after, so every such output counts).
	NodeReadsBlob(ctx context.Context, nodeID, digest string) (bool, error)
	// NodeBlobScope reports whether the node holds any Running task, and
	// whether digest was uploaded into the group of one of the suites of
	// those tasks.
	NodeBlobScope(ctx context.Context, nodeID, digest string) (holding, uploaded bool, err error)
	// BlobInGroups reports whether digest was uploaded into one of groups.
	BlobInGroups(ctx context.Context, digest string, groups []string) (bool, error)
	// AddBlobGroups records that digest was uploaded into groups.
	AddBlobGroups(ctx context.Context, digest string, groups []string) error
	// AddNodeBlob records that digest was uploaded into the groups of the
	// suites of the node's Running tasks (its outputs are theirs).
	AddNodeBlob(ctx context.Context, nodeID, digest string) error
	// ForgetBlobGroups forgets the groups of blobs the blob store no
	// longer holds.
	ForgetBlobGroups(ctx context.Context, digests []string) error
	// BlobsInUse lists the digests of the files that tasks name as inputs
	// or hold as outputs, and the outputs of action cache entries, for the
	// blob store's collection.
	BlobsInUse(ctx context.Context) (map[string]bool, error)
	// TaskLog is the full log of a task's attempt; NotFound when the
	// attempt kept none (its output fit in the result's tails).
	TaskLog(ctx context.Context, taskID string, attempt int) (api.TaskLog, error)

	// CachedActions finds the action cache's entries of scope for keys,
	// and marks them used now.
	CachedActions(ctx context.Context, scope string, keys []string) (map[string]CachedAction, error)
	// CacheActions stores entries in scope, each replacing the one of its
	// key.
	CacheActions(ctx context.Context, scope string, entries map[string]CachedAction) error
	// DeleteCachedActions removes scope's entry of key, or every entry of
	// scope when key is "", and says how many went.
	DeleteCachedActions(ctx context.Context, scope, key string) (int, error)
	// ExpireCachedActions removes the entries last used before before.
	ExpireCachedActions(ctx context.Context, before time.Time) (int, error)
}

// CachedAction is an action cache entry: the result of a task's run that
// succeeded, and that task's ID.
type CachedAction struct {
	Result api.TaskResult
	TaskID string
}

// Document kinds.
const (
	KindTemplate = "template"
	KindMapping  = "mapping"
)

// Document is a named YAML document the server validated before storing:
// a provisioning template or a mapping set. It is kept as written, so
// `show` gives back the user's own file.
type Document struct {
	Kind      string
	Name      string
	Body      []byte
	Version   int // 1 on create, +1 on every replace
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Documents stores templates and mapping sets.
type Documents interface {
	// PutDocument creates or replaces the document (Kind, Name) and
	// returns it with its new version.
	PutDocument(ctx context.Context, d Document) (Document, error)
	GetDocument(ctx context.Context, kind, name string) (Document, error)
	// ListDocuments lists a kind's documents by name.
	ListDocuments(ctx context.Context, kind string, p Page) ([]Document, error)
	DeleteDocument(ctx context.Context, kind, name string) error
}

// Deployment is a machine a provider made, as the server tracks it.
type Deployment struct {
	ID          string
	Provider    string
	ResourceID  string // the provider's own ID
	Name        string
	Template    string
	State       string // provision.State*, or "failed"
	StateReason string // why it failed, drifted, or was terminated
	Address     string
	Executors   []string
	Extra       map[string]any
	Labels      map[string]string
	// NodeID is the node whose agent registered from this machine, with a
	// join token bound to the deployment.
	NodeID string
	// MachineID is the machine id the agent on it must register with: the
	// orchestrator reads it from the machine through its executor (or
	// gives the machine one) before it makes the join token, so that the
	// token registers that machine and no other. Empty: not bound.
	MachineID string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Machine is the deployment as its provider and executors see it.
func (d Deployment) Machine() provision.Deployment {
	return provision.Deployment{ID: d.ID, Provider: d.Provider, ResourceID: d.ResourceID, Name: d.Name,
		Template: d.Template, State: d.State, Address: d.Address, Executors: d.Executors, Extra: d.Extra,
		Labels: d.Labels, CreatedAt: d.CreatedAt}
}

// DeploymentFilter narrows ListDeployments. Zero values match everything.
type DeploymentFilter struct {
	Provider string
	States   []string
	NodeID   string
	Page
}

// Deployments tracks provisioned machines.
type Deployments interface {
	// CreateDeployment stores a new deployment; its name must be unique
	// per provider among deployments that are not terminated or failed
	// (errdefs.ErrConflict).
	CreateDeployment(ctx context.Context, d Deployment) error
	// LinkDeploymentNode records that nodeID's agent runs on the
	// deployment's machine.
	LinkDeploymentNode(ctx context.Context, deploymentID, nodeID string) error
	GetDeployment(ctx context.Context, id string) (Deployment, error)
	// ListDeployments lists deployments, oldest first.
	ListDeployments(ctx context.Context, f DeploymentFilter) ([]Deployment, error)
	// UpdateDeployment applies fn inside one transaction.
	UpdateDeployment(ctx context.Context, id string, fn func(*Deployment) error) (Deployment, error)
	DeleteDeployment(ctx context.Context, id string) error
}

// ContainerFilter narrows ListContainers. Zero values match everything.
type ContainerFilter struct {
	NodeID string
	// Live leaves out the jobs in a final status (api.ContainerFinal).
	Live bool
	Page
}

// Containers keeps what agents report about the containers they run. The
// agent is the truth; these are its latest reports, kept per (node, job
// id) so that a job moved between nodes leaves a record on each.
type Containers interface {
	// PutContainers records a node's reports, replacing earlier reports of
	// the same (node, job id). Each report's Node is set to nodeID.
	PutContainers(ctx context.Context, nodeID string, cs []api.Container) error
	// ListContainers lists reports by node, then creation time.
	ListContainers(ctx context.Context, f ContainerFilter) ([]api.Container, error)
	// FindContainer returns the reports of job id on every node: live ones
	// first, then the most recently updated. None is errdefs.ErrNotFound.
	FindContainer(ctx context.Context, id string) ([]api.Container, error)
	// DeleteContainer forgets a node's report of job id.
	DeleteContainer(ctx context.Context, nodeID, id string) error
}

// Ensembles stores ensembles. A name belongs to one ensemble at a time
// among those not shut down or failed.
type Ensembles interface {
	// CreateEnsemble stores a new ensemble (errdefs.ErrConflict when a live
	// one has its name).
	CreateEnsemble(ctx context.Context, e api.Ensemble) error
	// GetEnsemble finds an ensemble by ID, or the newest by name.
	GetEnsemble(ctx context.Context, ref string) (api.Ensemble, error)
	// ListEnsembles lists ensembles, newest first; live only unless all.
	ListEnsembles(ctx context.Context, all bool) ([]api.Ensemble, error)
	// UpdateEnsemble applies fn to the stored ensemble in one transaction.
	UpdateEnsemble(ctx context.Context, id string, fn func(*api.Ensemble) error) (api.Ensemble, error)
}

// KindPool is the document kind of a pool's spec.
const KindPool = "pool"

// PoolMachine is one machine of a pool, from the intent to make it to its
// end. It is stored before the provider is called, so a server that stops
// at any point finds what it was doing.
type PoolMachine struct {
	ID           string
	Pool         string
	Template     string
	Provider     string
	State        string // api.Machine*
	StateReason  string
	DeploymentID string
	NodeID       string
	CPUs         float64 // the machine's size, as its template gives it
	MemoryMB     int64
	CreatedAt    time.Time
	LaunchedAt   time.Time // the provider gave the machine; zero before
	// DeliveredAt is when its agent was delivered and started, from when
	// it has the bootstrap timeout to register; zero before, and for a
	// bootstrap that a stopping server cut off.
	DeliveredAt time.Time
	ReadyAt     time.Time // its agent registered; zero before
	BusyAt      time.Time // work last seen on its node
	UpdatedAt   time.Time
}

// Live reports whether the machine exists or is on its way.
func (m PoolMachine) Live() bool {
	return m.State != api.MachineGone && m.State != api.MachineFailed
}

// PoolMachineFilter narrows ListPoolMachines. Zero values match everything.
type PoolMachineFilter struct {
	Pool string
	Live bool // leave out gone and failed machines
	Page
}

// Pools keeps the orchestrator's machines and decisions. The pools' specs
// are documents of KindPool.
type Pools interface {
	// CreatePoolMachine stores a machine and the deployment it will be,
	// in one transaction: the intent is stored before the provider call.
	CreatePoolMachine(ctx context.Context, m PoolMachine, d Deployment) error
	GetPoolMachine(ctx context.Context, id string) (PoolMachine, error)
	// ListPoolMachines lists machines oldest first.
	ListPoolMachines(ctx context.Context, f PoolMachineFilter) ([]PoolMachine, error)
	// UpdatePoolMachine applies fn inside one transaction.
	UpdatePoolMachine(ctx context.Context, id string, fn func(*PoolMachine) error) (PoolMachine, error)
	// DeletePoolMachines forgets a pool's machines that are gone or
	// failed and ended before cutoff (a zero cutoff: all of them).
	DeletePoolMachines(ctx context.Context, pool string, cutoff time.Time) error
	// AddPoolEvent appends a decision; its ID and a zero At are set.
	AddPoolEvent(ctx context.Context, e api.PoolEvent) (api.PoolEvent, error)
	// PoolEvents lists a pool's events oldest first.
	PoolEvents(ctx context.Context, pool string, p Page) ([]api.PoolEvent, error)
	// DeletePoolEvents forgets a pool's events from before cutoff (a zero
	// cutoff: all of them).
	DeletePoolEvents(ctx context.Context, pool string, cutoff time.Time) error
}

// Lease is a named lease: who holds it, until when, and its term, which
// grows by one each time the lease changes hands. Replicas of the server
// elect the one that runs the singleton loops with the lease "leader".
type Lease struct {
	Name    string
	Holder  string // "" once released
	Term    int64
	Expires time.Time // zero once released
}

// Leases elects one holder at a time. Times are the store's clock, as for
// heartbeats: keep the replicas' clocks in step.
type Leases interface {
	// AcquireLease takes the lease when it is free, released or expired
	// (a takeover: Term+1, even when holder held it before), or renews it
	// when holder holds it and it is live (Term kept); either way it is
	// held until now+ttl. A live lease of another holder is
	// errdefs.ErrConflict, naming who holds it until when. An empty name
	// or holder, or a ttl <= 0, is errdefs.ErrInvalid.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// ReleaseLease gives the lease up if holder holds it, so that another
	// takes it at once; otherwise it does nothing. The term is kept, so the
	// next holder's is higher.
	ReleaseLease(ctx context.Context, name, holder string) error
	// GetLease reads a lease; one never acquired is errdefs.ErrNotFound.
	GetLease(ctx context.Context, name string) (Lease, error)
}

// ErrNotLeader is a fenced write refused because the lease of its fence
// has another holder or term now: a new leader took over. It is an
// errdefs.ErrConflict; nothing was written.
var ErrNotLeader = fmt.Errorf("not the leader: the lease was taken over: %w", errdefs.ErrConflict)

type fenceKey struct{}

// WithFence returns a context whose writes are fenced by l: every write
// transaction a store runs with it first checks, in the same transaction,
// that lease l.Name still has l's holder and term, and otherwise fails
// with ErrNotLeader and writes nothing. A leader passes such a context to
// its singleton loops, so that a leader that was paused while another took
// over cannot write what only the leader may.
func WithFence(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, fenceKey{}, l)
}

// FenceFrom returns the fence of ctx, if it has one.
func FenceFrom(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(fenceKey{}).(Lease)
	return l, ok
}

// NotLeader is the error of a write fenced by want that found the lease
// held as got (a zero got: the lease is gone).
func NotLeader(want, got Lease) error {
	holder := got.Holder
	if holder == "" {
		holder = "nobody"
	}
	return fmt.Errorf("write fenced by lease %s term %d of %s, now term %d of %s: %w",
		want.Name, want.Term, want.Holder, got.Term, holder, ErrNotLeader)
}

// Acquire is l as holder's AcquireLease at now makes it: renewed when
// holder holds it and it is live, taken over (Term+1) when it is free,
// released or expired, and errdefs.ErrConflict when another holds it live.
// Both stores decide with it, inside the transaction that locks the row.
func (l Lease) Acquire(holder string, now time.Time, ttl time.Duration) (Lease, error) {
	live := l.Holder != "" && now.Before(l.Expires)
	switch {
	case live && l.Holder == holder:
	case live:
		return l, fmt.Errorf("lease %s is held by %s until %s; try again after it expires: %w",
			l.Name, l.Holder, l.Expires.UTC().Format(time.RFC3339Nano), errdefs.ErrConflict)
	default:
		l.Holder, l.Term = holder, l.Term+1
	}
	l.Expires = now.Add(ttl).Round(0).UTC() // as the store reads it back
	return l, nil
}

// CheckLeaseArgs refuses what AcquireLease cannot take.
func CheckLeaseArgs(name, holder string, ttl time.Duration) error {
	switch {
	case name == "":
		return errdefs.Field("name", "a lease needs a name")
	case holder == "":
		return errdefs.Field("holder", "a lease needs a holder")
	case ttl <= 0:
		return errdefs.Field("ttl", "must be positive, got %s", ttl)
	}
	return nil
}

// Fenced reports whether cur, the lease as a write transaction reads it,
// still has the holder and term of want, the write's fence; if not, the
// error is ErrNotLeader.
func Fenced(want, cur Lease) error {
	if cur.Holder != want.Holder || cur.Term != want.Term {
		return NotLeader(want, cur)
	}
	return nil
}
