package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Store time of API requests. A store that stops answering (PostgreSQL
// frozen, a hung disk under SQLite) must cost a client a 503 that says so
// within Config.StoreTimeout, not a request that hangs until the client
// gives up. The bound is on each store call, not on the whole request:
// requests also wait for agents (forwards, up to 15 minutes), providers
// and streams, which have bounds of their own.
//
// serveRoute marks a request's context with the bound (WithBound);
// bounded, the server's store, gives each call made with such a
// context a deadline. Calls without the mark (the server's own loops, the
// agent WebSocket's session) are passed through as they are.

type boundKey struct{}

// WithBound marks ctx: each call of a Bounded store made with it may take
// d.
func WithBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, boundKey{}, d)
}

// addTasksPerBound is how many tasks one bound covers when a batch is
// written: a batch of 64 MiB may hold half a million tasks, whose one
// transaction takes its time on a store that answers.
const addTasksPerBound = 10_000

// bounded is a Store whose calls made with a bounded context
// (WithBound) end when the bound runs out, with an ErrUnavailable
// that says the store did not answer in time and what to do. Each method
// is the same three lines; the guard at the bottom fails to compile when
// Store gains a method that is not bounded here.
type bounded struct{ st Store }

// Bounded returns st with the calls made with a bounded context (WithBound)
// ended when the bound runs out.
func Bounded(st Store) Store { return &bounded{st: st} }

// bound gives a call ctx's bound, if ctx has one. end cancels the call's
// context and, when the bound ran out (not the caller's own context),
// replaces the call's error with one that says so.
func (b *bounded) bound(ctx context.Context, op string) (context.Context, func(*error)) {
	return b.boundN(ctx, op, 1)
}

// boundN is bound for a call that does n calls' work.
func (b *bounded) boundN(ctx context.Context, op string, n int) (context.Context, func(*error)) {
	d, ok := ctx.Value(boundKey{}).(time.Duration)
	if !ok || d <= 0 {
		return ctx, func(*error) {}
	}
	d *= time.Duration(n)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, func(err *error) {
		if *err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			*err = TimeoutError(op, d)
		}
		cancel()
	}
}

// TimeoutError is the answer to a request whose store call ran out of
// time: 503, with what to look at.
func TimeoutError(op string, d time.Duration) error {
	return fmt.Errorf("the store did not answer within %s (%s): check that the database is up and answering "+
		"(PostgreSQL not stopped or overloaded, the SQLite file's disk not hung) and retry; "+
		"a store that is slow but working needs a longer --store-timeout: %w", d, op, errdefs.ErrUnavailable)
}

func (b *bounded) Close() error { return b.st.Close() }

// Nodes

func (b *bounded) CreateNode(ctx context.Context, n Node) (_ Node, err error) {
	ctx, end := b.bound(ctx, "CreateNode")
	defer end(&err)
	return b.st.CreateNode(ctx, n)
}

func (b *bounded) JoinNode(ctx context.Context, tokenID string, now time.Time, n Node) (_ Node, err error) {
	ctx, end := b.bound(ctx, "JoinNode")
	defer end(&err)
	return b.st.JoinNode(ctx, tokenID, now, n)
}

func (b *bounded) GetNode(ctx context.Context, id string) (_ Node, err error) {
	ctx, end := b.bound(ctx, "GetNode")
	defer end(&err)
	return b.st.GetNode(ctx, id)
}

func (b *bounded) ListNodes(ctx context.Context, f NodeFilter) (_ []Node, err error) {
	ctx, end := b.bound(ctx, "ListNodes")
	defer end(&err)
	return b.st.ListNodes(ctx, f)
}

func (b *bounded) NodesRevision(ctx context.Context) (_ int64, err error) {
	ctx, end := b.bound(ctx, "NodesRevision")
	defer end(&err)
	return b.st.NodesRevision(ctx)
}

func (b *bounded) JoinOverlay(ctx context.Context, m OverlayMember, blocks int) (_ OverlayMember, err error) {
	ctx, end := b.bound(ctx, "JoinOverlay")
	defer end(&err)
	return b.st.JoinOverlay(ctx, m, blocks)
}

func (b *bounded) ListOverlay(ctx context.Context) (_ []OverlayMember, err error) {
	ctx, end := b.bound(ctx, "ListOverlay")
	defer end(&err)
	return b.st.ListOverlay(ctx)
}

func (b *bounded) OverlayRevision(ctx context.Context) (_ int64, err error) {
	ctx, end := b.bound(ctx, "OverlayRevision")
	defer end(&err)
	return b.st.OverlayRevision(ctx)
}

func (b *bounded) HeldTasks(ctx context.Context, suiteIDs []string) (_ map[string]int, err error) {
	ctx, end := b.bound(ctx, "HeldTasks")
	defer end(&err)
	return b.st.HeldTasks(ctx, suiteIDs)
}

func (b *bounded) UpdateNode(ctx context.Context, id string, fn func(*Node) error) (_ Node, err error) {
	ctx, end := b.bound(ctx, "UpdateNode")
	defer end(&err)
	return b.st.UpdateNode(ctx, id, fn)
}

func (b *bounded) RecordHeartbeats(ctx context.Context, hbs []Heartbeat) (err error) {
	ctx, end := b.bound(ctx, "RecordHeartbeats")
	defer end(&err)
	return b.st.RecordHeartbeats(ctx, hbs)
}

func (b *bounded) SetNodeStatus(ctx context.Context, id string, status string, reason string, onlyIf ...string) (_ bool, err error) {
	ctx, end := b.bound(ctx, "SetNodeStatus")
	defer end(&err)
	return b.st.SetNodeStatus(ctx, id, status, reason, onlyIf...)
}

func (b *bounded) StaleNodes(ctx context.Context, cutoff time.Time, statuses ...string) (_ []Node, err error) {
	ctx, end := b.bound(ctx, "StaleNodes")
	defer end(&err)
	return b.st.StaleNodes(ctx, cutoff, statuses...)
}

func (b *bounded) NodeReplicas(ctx context.Context, statuses ...string) (_ []string, err error) {
	ctx, end := b.bound(ctx, "NodeReplicas")
	defer end(&err)
	return b.st.NodeReplicas(ctx, statuses...)
}

func (b *bounded) DeleteNode(ctx context.Context, id string) (err error) {
	ctx, end := b.bound(ctx, "DeleteNode")
	defer end(&err)
	return b.st.DeleteNode(ctx, id)
}

// Notifications

func (b *bounded) Enqueue(ctx context.Context, nodeID string, method string, body []byte) (_ Notification, err error) {
	ctx, end := b.bound(ctx, "Enqueue")
	defer end(&err)
	return b.st.Enqueue(ctx, nodeID, method, body)
}

func (b *bounded) Pending(ctx context.Context, nodeID string, after uint64) (_ []Notification, err error) {
	ctx, end := b.bound(ctx, "Pending")
	defer end(&err)
	return b.st.Pending(ctx, nodeID, after)
}

func (b *bounded) Ack(ctx context.Context, nodeID string, upTo uint64) (err error) {
	ctx, end := b.bound(ctx, "Ack")
	defer end(&err)
	return b.st.Ack(ctx, nodeID, upTo)
}

// Auth

func (b *bounded) CreateUser(ctx context.Context, u User) (err error) {
	ctx, end := b.bound(ctx, "CreateUser")
	defer end(&err)
	return b.st.CreateUser(ctx, u)
}

func (b *bounded) GetUser(ctx context.Context, name string) (_ User, err error) {
	ctx, end := b.bound(ctx, "GetUser")
	defer end(&err)
	return b.st.GetUser(ctx, name)
}

func (b *bounded) ListUsers(ctx context.Context, p Page) (_ []User, err error) {
	ctx, end := b.bound(ctx, "ListUsers")
	defer end(&err)
	return b.st.ListUsers(ctx, p)
}

func (b *bounded) SetMembership(ctx context.Context, user string, group string, role string) (err error) {
	ctx, end := b.bound(ctx, "SetMembership")
	defer end(&err)
	return b.st.SetMembership(ctx, user, group, role)
}

func (b *bounded) DeleteUser(ctx context.Context, name string) (err error) {
	ctx, end := b.bound(ctx, "DeleteUser")
	defer end(&err)
	return b.st.DeleteUser(ctx, name)
}

func (b *bounded) CreateToken(ctx context.Context, t Token) (err error) {
	ctx, end := b.bound(ctx, "CreateToken")
	defer end(&err)
	return b.st.CreateToken(ctx, t)
}

func (b *bounded) TokenByHash(ctx context.Context, hash []byte) (_ Token, err error) {
	ctx, end := b.bound(ctx, "TokenByHash")
	defer end(&err)
	return b.st.TokenByHash(ctx, hash)
}

func (b *bounded) ListTokens(ctx context.Context, f TokenFilter) (_ []Token, err error) {
	ctx, end := b.bound(ctx, "ListTokens")
	defer end(&err)
	return b.st.ListTokens(ctx, f)
}

func (b *bounded) DeleteToken(ctx context.Context, id string) (err error) {
	ctx, end := b.bound(ctx, "DeleteToken")
	defer end(&err)
	return b.st.DeleteToken(ctx, id)
}

func (b *bounded) UseJoinToken(ctx context.Context, id string, now time.Time) (_ Token, err error) {
	ctx, end := b.bound(ctx, "UseJoinToken")
	defer end(&err)
	return b.st.UseJoinToken(ctx, id, now)
}

func (b *bounded) TouchTokens(ctx context.Context, used map[string]time.Time) (err error) {
	ctx, end := b.bound(ctx, "TouchTokens")
	defer end(&err)
	return b.st.TouchTokens(ctx, used)
}

func (b *bounded) ReplaceNodeCredential(ctx context.Context, t Token) (err error) {
	ctx, end := b.bound(ctx, "ReplaceNodeCredential")
	defer end(&err)
	return b.st.ReplaceNodeCredential(ctx, t)
}

// Suites

func (b *bounded) CreateSuite(ctx context.Context, s Suite) (err error) {
	ctx, end := b.bound(ctx, "CreateSuite")
	defer end(&err)
	return b.st.CreateSuite(ctx, s)
}

func (b *bounded) GetSuite(ctx context.Context, id string) (_ Suite, err error) {
	ctx, end := b.bound(ctx, "GetSuite")
	defer end(&err)
	return b.st.GetSuite(ctx, id)
}

func (b *bounded) SuiteByName(ctx context.Context, name string) (_ Suite, err error) {
	ctx, end := b.bound(ctx, "SuiteByName")
	defer end(&err)
	return b.st.SuiteByName(ctx, name)
}

func (b *bounded) ListSuites(ctx context.Context, f SuiteFilter) (_ []Suite, err error) {
	ctx, end := b.bound(ctx, "ListSuites")
	defer end(&err)
	return b.st.ListSuites(ctx, f)
}

func (b *bounded) UpdateSuite(ctx context.Context, id string, fn func(*Suite) error) (_ Suite, err error) {
	ctx, end := b.bound(ctx, "UpdateSuite")
	defer end(&err)
	return b.st.UpdateSuite(ctx, id, fn)
}

func (b *bounded) CloseIdleSuites(ctx context.Context, cutoff time.Time) (_ []string, err error) {
	ctx, end := b.bound(ctx, "CloseIdleSuites")
	defer end(&err)
	return b.st.CloseIdleSuites(ctx, cutoff)
}

func (b *bounded) CompleteSuites(ctx context.Context) (_ []string, err error) {
	ctx, end := b.bound(ctx, "CompleteSuites")
	defer end(&err)
	return b.st.CompleteSuites(ctx)
}

// SuiteProblems

func (b *bounded) PutSuiteProblem(ctx context.Context, suiteID string, p api.SuiteProblem) (err error) {
	ctx, end := b.bound(ctx, "PutSuiteProblem")
	defer end(&err)
	return b.st.PutSuiteProblem(ctx, suiteID, p)
}

func (b *bounded) SuiteProblems(ctx context.Context, suiteID string, nodeID string) (_ []SuiteProblem, err error) {
	ctx, end := b.bound(ctx, "SuiteProblems")
	defer end(&err)
	return b.st.SuiteProblems(ctx, suiteID, nodeID)
}

func (b *bounded) ClearSuiteProblem(ctx context.Context, suiteID string, nodeID string) (err error) {
	ctx, end := b.bound(ctx, "ClearSuiteProblem")
	defer end(&err)
	return b.st.ClearSuiteProblem(ctx, suiteID, nodeID)
}

// Tasks

func (b *bounded) AddTasks(ctx context.Context, suiteID string, tasks []Task) (err error) {
	ctx, end := b.boundN(ctx, "AddTasks", 1+len(tasks)/addTasksPerBound)
	defer end(&err)
	return b.st.AddTasks(ctx, suiteID, tasks)
}

func (b *bounded) GetTask(ctx context.Context, id string) (_ Task, err error) {
	ctx, end := b.bound(ctx, "GetTask")
	defer end(&err)
	return b.st.GetTask(ctx, id)
}

func (b *bounded) ListTasks(ctx context.Context, f TaskFilter) (_ []Task, err error) {
	ctx, end := b.bound(ctx, "ListTasks")
	defer end(&err)
	return b.st.ListTasks(ctx, f)
}

func (b *bounded) ClaimTasks(ctx context.Context, suiteID string, nodeID string, max int) (_ []Task, err error) {
	ctx, end := b.bound(ctx, "ClaimTasks")
	defer end(&err)
	return b.st.ClaimTasks(ctx, suiteID, nodeID, max)
}

func (b *bounded) FinishAttempts(ctx context.Context, nodeID string, reports []Attempt, retry RetryPolicy) (_ Finished, err error) {
	ctx, end := b.bound(ctx, "FinishAttempts")
	defer end(&err)
	return b.st.FinishAttempts(ctx, nodeID, reports, retry)
}

func (b *bounded) ReturnTasks(ctx context.Context, nodeID string, ids []string) (_ int, err error) {
	ctx, end := b.bound(ctx, "ReturnTasks")
	defer end(&err)
	return b.st.ReturnTasks(ctx, nodeID, ids)
}

func (b *bounded) ReclaimNode(ctx context.Context, nodeID string, keep ...string) (_ int, err error) {
	ctx, end := b.bound(ctx, "ReclaimNode")
	defer end(&err)
	return b.st.ReclaimNode(ctx, nodeID, keep...)
}

func (b *bounded) ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (_ int, err error) {
	ctx, end := b.bound(ctx, "ReclaimSuiteTasks")
	defer end(&err)
	return b.st.ReclaimSuiteTasks(ctx, suiteID, nodeID)
}

func (b *bounded) ReattachTasks(ctx context.Context, nodeID string, ids []string) (_ int, err error) {
	ctx, end := b.bound(ctx, "ReattachTasks")
	defer end(&err)
	return b.st.ReattachTasks(ctx, nodeID, ids)
}

func (b *bounded) CancelTask(ctx context.Context, id string) (_ Task, err error) {
	ctx, end := b.bound(ctx, "CancelTask")
	defer end(&err)
	return b.st.CancelTask(ctx, id)
}

// TaskFiles

func (b *bounded) NodeReadsBlob(ctx context.Context, nodeID string, digest string) (_ bool, err error) {
	ctx, end := b.bound(ctx, "NodeReadsBlob")
	defer end(&err)
	return b.st.NodeReadsBlob(ctx, nodeID, digest)
}

func (b *bounded) NodeBlobScope(ctx context.Context, nodeID string, digest string) (_ bool, _ bool, err error) {
	ctx, end := b.bound(ctx, "NodeBlobScope")
	defer end(&err)
	return b.st.NodeBlobScope(ctx, nodeID, digest)
}

func (b *bounded) BlobInGroups(ctx context.Context, digest string, groups []string) (_ bool, err error) {
	ctx, end := b.bound(ctx, "BlobInGroups")
	defer end(&err)
	return b.st.BlobInGroups(ctx, digest, groups)
}

func (b *bounded) AddBlobGroups(ctx context.Context, digest string, groups []string) (err error) {
	ctx, end := b.bound(ctx, "AddBlobGroups")
	defer end(&err)
	return b.st.AddBlobGroups(ctx, digest, groups)
}

func (b *bounded) AddNodeBlob(ctx context.Context, nodeID string, digest string) (err error) {
	ctx, end := b.bound(ctx, "AddNodeBlob")
	defer end(&err)
	return b.st.AddNodeBlob(ctx, nodeID, digest)
}

func (b *bounded) ForgetBlobGroups(ctx context.Context, digests []string) (err error) {
	ctx, end := b.bound(ctx, "ForgetBlobGroups")
	defer end(&err)
	return b.st.ForgetBlobGroups(ctx, digests)
}

func (b *bounded) BlobsInUse(ctx context.Context) (_ map[string]bool, err error) {
	ctx, end := b.bound(ctx, "BlobsInUse")
	defer end(&err)
	return b.st.BlobsInUse(ctx)
}

func (b *bounded) TaskLog(ctx context.Context, taskID string, attempt int) (_ api.TaskLog, err error) {
	ctx, end := b.bound(ctx, "TaskLog")
	defer end(&err)
	return b.st.TaskLog(ctx, taskID, attempt)
}

func (b *bounded) CachedActions(ctx context.Context, scope string, keys []string) (_ map[string]CachedAction, err error) {
	ctx, end := b.bound(ctx, "CachedActions")
	defer end(&err)
	return b.st.CachedActions(ctx, scope, keys)
}

func (b *bounded) CacheActions(ctx context.Context, scope string, entries map[string]CachedAction) (err error) {
	ctx, end := b.bound(ctx, "CacheActions")
	defer end(&err)
	return b.st.CacheActions(ctx, scope, entries)
}

func (b *bounded) DeleteCachedActions(ctx context.Context, scope, key string) (_ int, err error) {
	ctx, end := b.bound(ctx, "DeleteCachedActions")
	defer end(&err)
	return b.st.DeleteCachedActions(ctx, scope, key)
}

func (b *bounded) ExpireCachedActions(ctx context.Context, before time.Time) (_ int, err error) {
	ctx, end := b.bound(ctx, "ExpireCachedActions")
	defer end(&err)
	return b.st.ExpireCachedActions(ctx, before)
}

// Documents

func (b *bounded) PutDocument(ctx context.Context, d Document) (_ Document, err error) {
	ctx, end := b.bound(ctx, "PutDocument")
	defer end(&err)
	return b.st.PutDocument(ctx, d)
}

func (b *bounded) GetDocument(ctx context.Context, kind string, name string) (_ Document, err error) {
	ctx, end := b.bound(ctx, "GetDocument")
	defer end(&err)
	return b.st.GetDocument(ctx, kind, name)
}

func (b *bounded) ListDocuments(ctx context.Context, kind string, p Page) (_ []Document, err error) {
	ctx, end := b.bound(ctx, "ListDocuments")
	defer end(&err)
	return b.st.ListDocuments(ctx, kind, p)
}

func (b *bounded) DeleteDocument(ctx context.Context, kind string, name string) (err error) {
	ctx, end := b.bound(ctx, "DeleteDocument")
	defer end(&err)
	return b.st.DeleteDocument(ctx, kind, name)
}

// Deployments

func (b *bounded) CreateDeployment(ctx context.Context, d Deployment) (err error) {
	ctx, end := b.bound(ctx, "CreateDeployment")
	defer end(&err)
	return b.st.CreateDeployment(ctx, d)
}

func (b *bounded) LinkDeploymentNode(ctx context.Context, deploymentID string, nodeID string) (err error) {
	ctx, end := b.bound(ctx, "LinkDeploymentNode")
	defer end(&err)
	return b.st.LinkDeploymentNode(ctx, deploymentID, nodeID)
}

func (b *bounded) GetDeployment(ctx context.Context, id string) (_ Deployment, err error) {
	ctx, end := b.bound(ctx, "GetDeployment")
	defer end(&err)
	return b.st.GetDeployment(ctx, id)
}

func (b *bounded) ListDeployments(ctx context.Context, f DeploymentFilter) (_ []Deployment, err error) {
	ctx, end := b.bound(ctx, "ListDeployments")
	defer end(&err)
	return b.st.ListDeployments(ctx, f)
}

func (b *bounded) UpdateDeployment(ctx context.Context, id string, fn func(*Deployment) error) (_ Deployment, err error) {
	ctx, end := b.bound(ctx, "UpdateDeployment")
	defer end(&err)
	return b.st.UpdateDeployment(ctx, id, fn)
}

func (b *bounded) DeleteDeployment(ctx context.Context, id string) (err error) {
	ctx, end := b.bound(ctx, "DeleteDeployment")
	defer end(&err)
	return b.st.DeleteDeployment(ctx, id)
}

// Containers

func (b *bounded) PutContainers(ctx context.Context, nodeID string, cs []api.Container) (err error) {
	ctx, end := b.bound(ctx, "PutContainers")
	defer end(&err)
	return b.st.PutContainers(ctx, nodeID, cs)
}

func (b *bounded) ListContainers(ctx context.Context, f ContainerFilter) (_ []api.Container, err error) {
	ctx, end := b.bound(ctx, "ListContainers")
	defer end(&err)
	return b.st.ListContainers(ctx, f)
}

func (b *bounded) FindContainer(ctx context.Context, id string) (_ []api.Container, err error) {
	ctx, end := b.bound(ctx, "FindContainer")
	defer end(&err)
	return b.st.FindContainer(ctx, id)
}

func (b *bounded) DeleteContainer(ctx context.Context, nodeID string, id string) (err error) {
	ctx, end := b.bound(ctx, "DeleteContainer")
	defer end(&err)
	return b.st.DeleteContainer(ctx, nodeID, id)
}

// Pools

func (b *bounded) CreatePoolMachine(ctx context.Context, m PoolMachine, d Deployment) (err error) {
	ctx, end := b.bound(ctx, "CreatePoolMachine")
	defer end(&err)
	return b.st.CreatePoolMachine(ctx, m, d)
}

func (b *bounded) GetPoolMachine(ctx context.Context, id string) (_ PoolMachine, err error) {
	ctx, end := b.bound(ctx, "GetPoolMachine")
	defer end(&err)
	return b.st.GetPoolMachine(ctx, id)
}

func (b *bounded) ListPoolMachines(ctx context.Context, f PoolMachineFilter) (_ []PoolMachine, err error) {
	ctx, end := b.bound(ctx, "ListPoolMachines")
	defer end(&err)
	return b.st.ListPoolMachines(ctx, f)
}

func (b *bounded) UpdatePoolMachine(ctx context.Context, id string, fn func(*PoolMachine) error) (_ PoolMachine, err error) {
	ctx, end := b.bound(ctx, "UpdatePoolMachine")
	defer end(&err)
	return b.st.UpdatePoolMachine(ctx, id, fn)
}

func (b *bounded) DeletePoolMachines(ctx context.Context, pool string, cutoff time.Time) (err error) {
	ctx, end := b.bound(ctx, "DeletePoolMachines")
	defer end(&err)
	return b.st.DeletePoolMachines(ctx, pool, cutoff)
}

func (b *bounded) AddPoolEvent(ctx context.Context, e api.PoolEvent) (_ api.PoolEvent, err error) {
	ctx, end := b.bound(ctx, "AddPoolEvent")
	defer end(&err)
	return b.st.AddPoolEvent(ctx, e)
}

func (b *bounded) PoolEvents(ctx context.Context, pool string, p Page) (_ []api.PoolEvent, err error) {
	ctx, end := b.bound(ctx, "PoolEvents")
	defer end(&err)
	return b.st.PoolEvents(ctx, pool, p)
}

func (b *bounded) DeletePoolEvents(ctx context.Context, pool string, cutoff time.Time) (err error) {
	ctx, end := b.bound(ctx, "DeletePoolEvents")
	defer end(&err)
	return b.st.DeletePoolEvents(ctx, pool, cutoff)
}

// Ensembles

func (b *bounded) CreateEnsemble(ctx context.Context, e api.Ensemble) (err error) {
	ctx, end := b.bound(ctx, "CreateEnsemble")
	defer end(&err)
	return b.st.CreateEnsemble(ctx, e)
}

func (b *bounded) GetEnsemble(ctx context.Context, ref string) (_ api.Ensemble, err error) {
	ctx, end := b.bound(ctx, "GetEnsemble")
	defer end(&err)
	return b.st.GetEnsemble(ctx, ref)
}

func (b *bounded) ListEnsembles(ctx context.Context, all bool) (_ []api.Ensemble, err error) {
	ctx, end := b.bound(ctx, "ListEnsembles")
	defer end(&err)
	return b.st.ListEnsembles(ctx, all)
}

func (b *bounded) UpdateEnsemble(ctx context.Context, id string, fn func(*api.Ensemble) error) (_ api.Ensemble, err error) {
	ctx, end := b.bound(ctx, "UpdateEnsemble")
	defer end(&err)
	return b.st.UpdateEnsemble(ctx, id, fn)
}

// Stats

func (b *bounded) CountNodes(ctx context.Context) (_ map[string]int, err error) {
	ctx, end := b.bound(ctx, "CountNodes")
	defer end(&err)
	return b.st.CountNodes(ctx)
}

func (b *bounded) CountSuites(ctx context.Context) (_ map[string]int, _ api.TaskCounts, err error) {
	ctx, end := b.bound(ctx, "CountSuites")
	defer end(&err)
	return b.st.CountSuites(ctx)
}

// Leases

func (b *bounded) AcquireLease(ctx context.Context, name string, holder string, ttl time.Duration) (_ Lease, err error) {
	ctx, end := b.bound(ctx, "AcquireLease")
	defer end(&err)
	return b.st.AcquireLease(ctx, name, holder, ttl)
}

func (b *bounded) ReleaseLease(ctx context.Context, name string, holder string) (err error) {
	ctx, end := b.bound(ctx, "ReleaseLease")
	defer end(&err)
	return b.st.ReleaseLease(ctx, name, holder)
}

func (b *bounded) GetLease(ctx context.Context, name string) (_ Lease, err error) {
	ctx, end := b.bound(ctx, "GetLease")
	defer end(&err)
	return b.st.GetLease(ctx, name)
}

var _ Store = (*bounded)(nil)
