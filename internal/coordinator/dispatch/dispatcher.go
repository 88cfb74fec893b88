package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tick"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Config tunes the dispatcher; the server's Config gives each value.
type Config struct {
	SuiteTick       time.Duration // how often suites are closed and completed
	SuiteCloseAfter time.Duration // an Open suite with no new task this long is Closed
	// IdleSuiteGrace is how long an agent may find nothing to run in its
	// suite before it is sent to another suite with work.
	IdleSuiteGrace                time.Duration
	RetryBackoff, RetryBackoffMax time.Duration // a failed task's first pause, and the longest
}

// Store is what the dispatcher needs of the store.
type Store interface {
	WhyStore
	ListSuites(ctx context.Context, f store.SuiteFilter) ([]store.Suite, error)
	SuiteByName(ctx context.Context, name string) (store.Suite, error)
	UpdateSuite(ctx context.Context, id string, fn func(*store.Suite) error) (store.Suite, error)
	CloseIdleSuites(ctx context.Context, cutoff time.Time) ([]string, error)
	CompleteSuites(ctx context.Context) ([]string, error)
	PutSuiteProblem(ctx context.Context, suiteID string, p api.SuiteProblem) error
	ClearSuiteProblem(ctx context.Context, suiteID, nodeID string) error
	GetTask(ctx context.Context, id string) (store.Task, error)
	ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
	ClaimTasks(ctx context.Context, suiteID, nodeID string, max int) ([]store.Task, error)
	FinishAttempts(ctx context.Context, nodeID string, reports []store.Attempt, retry store.RetryPolicy) (store.Finished, error)
	ReturnTasks(ctx context.Context, nodeID string, ids []string) (int, error)
	ReclaimNode(ctx context.Context, nodeID string, keep ...string) (int, error)
	ReclaimSuiteTasks(ctx context.Context, suiteID, nodeID string) (int, error)
	CreateSuite(ctx context.Context, s store.Suite) error
	AddTasks(ctx context.Context, suiteID string, tasks []store.Task) error
	CancelTask(ctx context.Context, id string) (store.Task, error)
	ReattachTasks(ctx context.Context, nodeID string, holding []string) (int, error)
	CachedActions(ctx context.Context, scope string, keys []string) (map[string]store.CachedAction, error)
	CacheActions(ctx context.Context, scope string, entries map[string]store.CachedAction) error
	DeleteCachedActions(ctx context.Context, scope, key string) (int, error)
}

// Session is an agent's live connection to this server.
type Session interface {
	Node() string
	// Work is what the agent last said it does: its state and suite.
	Work() (state, suite string)
	Worked(t time.Time) // the agent had work at t: the pools' idle clock
	Draining() bool     // its machine is about to go: it takes no new work
	Call(ctx context.Context, method string, params, result any) error
	// Wakes, Park and Unpark hold a tasks.fetch that found nothing
	// until the suite's next wake (hub/parking.go).
	Wakes() uint64
	Park(suite string, wakes uint64) (woken <-chan struct{}, ok bool)
	Unpark(woken <-chan struct{})
}

// Agents are the agents' sessions and the ways to reach them: the hub's.
type Agents interface {
	Get(nodeID string) Session // nil when the node has no session here
	All() []Session
	Notify(ctx context.Context, nodeID, method string, body []byte) error
	WakeLocal(suiteID, except string)
	SignalWake(suiteID string)
	SignalCancel(suiteID string)
	WakeOrchestrator()
}

// Dispatcher hands suites and tasks to agents: which suite a node runs
// next, how many tasks it may claim, what becomes of the attempts it
// reports, and which agents to wake when a suite changes. What it
// remembers between calls (fair shares, fetches, prepare failures) is
// this replica's own.
type Dispatcher struct {
	cfg     Config
	store   Store
	agents  Agents
	log     *slog.Logger
	metrics *metrics
	Why     *Why // why a suite waits, and whether a node may take it up
	// Changes wakes the long-polled reads of suites this server changed.
	Changes SuiteChanges

	prepare PrepareFailures
	fetches FetchWatch
	shares  Shares[Session]
	actions actionCache
	specs   suiteSpecs // what never changes in a suite, by ID (ResolveSuiteSpec)
	listing struct {   // the last listing of the live suites (liveSuites)
		mu     sync.Mutex
		at     time.Time
		suites []store.Suite
	}
}

// New makes the dispatcher; pools gives the orchestrator's pools, nil
// while there are none.
func New(cfg Config, st Store, agents Agents, pools func() Pools, logger *slog.Logger) *Dispatcher {
	d := &Dispatcher{cfg: cfg, store: st, agents: agents, log: logger, metrics: newMetrics()}
	d.Why = NewWhy(st, sessions{agents}, &d.prepare, pools)
	return d
}

// sessions is Why's view of the agents' sessions.
type sessions struct{ agents Agents }

func (s sessions) Work(nodeID string) (state, suiteID string, connected bool) {
	sess := s.agents.Get(nodeID)
	if sess == nil {
		return "", "", false
	}
	state, suiteID = sess.Work()
	return state, suiteID, true
}

func (s sessions) Connected() []AgentWork {
	all := s.agents.All()
	out := make([]AgentWork, len(all))
	for i, sess := range all {
		out[i].NodeID = sess.Node()
		out[i].State, out[i].SuiteID = sess.Work()
	}
	return out
}

// NextSuite picks the suite a node should run: the highest-priority
// eligible suite with tasks ready, or with tasks other nodes would give
// back to it (shares.go).
func (d *Dispatcher) NextSuite(ctx context.Context, nodeID string) (*store.Suite, error) {
	return d.nextSuite(ctx, nodeID, 0)
}

// pollListingAge is how old a listing of the suites may be to answer an
// idle agent's poll (api.SuiteNextRequest).
const pollListingAge = 5 * time.Second

// nextSuite is NextSuite from a listing of the live suites at most maxAge
// old (0: read now).
func (d *Dispatcher) nextSuite(ctx context.Context, nodeID string, maxAge time.Duration) (*store.Suite, error) {
	n, err := d.store.GetNode(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	suites, err := d.liveSuites(ctx, maxAge)
	if err != nil {
		return nil, err
	}
	for _, su := range suites {
		if su.Counts.Ready == 0 && !d.wouldGetGivenBack(su, n) {
			continue
		}
		if d.Why.WhyNot(su, n) != nil {
			continue // the same test explains a waiting suite (why.go)
		}
		return &su, nil
	}
	return nil, nil
}

// liveSuites lists the Open and Closed suites, or returns the last listing
// when it is at most maxAge old. The listing is shared: never changed.
func (d *Dispatcher) liveSuites(ctx context.Context, maxAge time.Duration) ([]store.Suite, error) {
	l := &d.listing
	l.mu.Lock()
	if maxAge > 0 && time.Since(l.at) <= maxAge {
		defer l.mu.Unlock()
		return l.suites, nil
	}
	l.mu.Unlock()
	now := time.Now()
	suites, err := d.store.ListSuites(ctx, store.SuiteFilter{States: []string{api.SuiteOpen, api.SuiteClosed}})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	if now.After(l.at) {
		l.suites, l.at = suites, now
	}
	l.mu.Unlock()
	return suites, nil
}

// wouldGetGivenBack says whether node n, joining suite su, would be given
// tasks the suite's nodes hold unstarted.
func (d *Dispatcher) wouldGetGivenBack(su store.Suite, n store.Node) bool {
	if su.Counts.Running == 0 {
		return false
	}
	workers := su.Spec.WorkerSchedule.WorkersOn(n.Hardware)
	return d.shares.JoinWouldGet(su.ID, n.ID, workers, su.Counts.Ready+su.Counts.Running, d.agents.Get)
}

// SuiteChanged wakes the agents that might now have work for the suite:
// idle ones, and those already running it and waiting for tasks.
func (d *Dispatcher) SuiteChanged(ctx context.Context, suiteID string) {
	d.Changes.Notify(suiteID)
	d.agents.WakeOrchestrator() // new tasks may be demand for a pool
	d.wakeSuite(suiteID, "")
}

// wakeSuite wakes the agents, but the one of node except, that are idle or
// run the suite.
func (d *Dispatcher) wakeSuite(suiteID, except string) {
	d.agents.WakeLocal(suiteID, except)
	d.agents.SignalWake(suiteID) // and the agents connected to other servers
}

// NodeChanged makes the node's agent look for work again: its tags or
// groups changed, so its suite may no longer be its to run, and other
// suites may fit it now.
func (d *Dispatcher) NodeChanged(nodeID string) {
	d.fetches.Recheck("", nodeID)
	sess := d.agents.Get(nodeID)
	if sess == nil { // connected to another server, or none: it looks on connect
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sess.Call(ctx, api.MethodWake, api.SuiteRef{}, nil)
	}()
}

// SuiteCancelled tells every node working on the suite to stop it.
func (d *Dispatcher) SuiteCancelled(ctx context.Context, suiteID string) {
	nodes, err := d.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		d.log.Error("list nodes to cancel suite", "suite", suiteID, "err", err)
		return
	}
	for _, n := range nodes {
		current := n.CurrentSuite
		if sess := d.agents.Get(n.ID); sess != nil {
			_, current = sess.Work()
		}
		if current == suiteID {
			d.tellCancelled(ctx, n.ID, suiteID)
		}
	}
	// The store's current suite of a node connected to another server
	// lags by up to a heartbeat flush: that server checks its own.
	d.agents.SignalCancel(suiteID)
}

// LocalSuiteCancelled tells the agents connected here that run the suite
// to stop it (another server cancelled it).
func (d *Dispatcher) LocalSuiteCancelled(ctx context.Context, suiteID string) {
	for _, sess := range d.agents.All() {
		if _, current := sess.Work(); current == suiteID {
			d.tellCancelled(ctx, sess.Node(), suiteID)
		}
	}
}

func (d *Dispatcher) tellCancelled(ctx context.Context, nodeID, suiteID string) {
	body, _ := json.Marshal(api.SuiteRef{SuiteID: suiteID})
	if err := d.agents.Notify(ctx, nodeID, api.NotifySuiteCancelled, body); err != nil {
		d.log.Warn("tell node to stop suite", "suite", suiteID, "node", nodeID, "err", err)
	}
}

// Reclaim gives a node's running tasks back to the queue, but those in
// keep (what its agent still holds).
func (d *Dispatcher) Reclaim(ctx context.Context, nodeID, why string, keep ...string) {
	n, err := d.store.ReclaimNode(ctx, nodeID, keep...)
	if err != nil {
		d.log.Error("reclaim tasks", "node", nodeID, "err", err)
		return
	}
	if n > 0 {
		d.Changes.Notify() // whichever suites they were of
		d.log.Info("tasks returned to the queue", "node", nodeID, "tasks", n, "why", why)
		d.agents.WakeLocal("", "")
		d.agents.SignalWake("")
	}
}

// SuiteLoop closes suites that got no tasks for a while and completes
// closed suites with nothing left to run. A suite whose last task ends is
// completed at once by the report (CompleteIfDone); the tick is the safety
// net for the rest (tasks cancelled while Ready, a report that failed).
// It runs on the leader.
func (d *Dispatcher) SuiteLoop(ctx context.Context) {
	tick.Every(ctx, d.cfg.SuiteTick, func() {
		closed, err := d.store.CloseIdleSuites(ctx, time.Now().Add(-d.cfg.SuiteCloseAfter))
		if err != nil && ctx.Err() == nil {
			d.log.Error("close idle suites", "err", err)
		}
		for _, id := range closed {
			d.log.Info("suite closed: no new tasks", "suite", id, "after", d.cfg.SuiteCloseAfter)
			d.SuiteChanged(ctx, id)
		}
		d.completeSuites(ctx)
	})
}

// SharesLoop forgets, every SuiteTick, the fair-share members that left
// without saying so. Each replica's dispatcher keeps its own shares, so
// this runs on every replica, leader or not.
func (d *Dispatcher) SharesLoop(ctx context.Context) {
	tick.Every(ctx, d.cfg.SuiteTick, func() { d.shares.Prune(d.agents.Get) })
}

// completeSuites moves Closed suites with nothing left to run to Complete.
func (d *Dispatcher) completeSuites(ctx context.Context) {
	done, err := d.store.CompleteSuites(ctx)
	if err != nil && ctx.Err() == nil {
		d.log.Error("complete suites", "err", err)
	}
	for _, id := range done {
		d.log.Info("suite complete", "suite", id)
		d.SuiteChanged(ctx, id)
	}
}

// CompleteIfDone completes the suite now if it is Closed and its last
// task just ended, instead of at the next tick.
func (d *Dispatcher) CompleteIfDone(ctx context.Context, suiteID string) {
	su, err := d.store.GetSuite(ctx, suiteID)
	if err != nil {
		return // gone, or the store is down: the tick tries again
	}
	if su.State == api.SuiteClosed && su.Counts.Pending == 0 && su.Counts.Ready == 0 && su.Counts.Running == 0 {
		d.completeSuites(ctx)
	}
}

// giveback asks the node to give up to n of the suite's tasks it holds
// unstarted back, for members that ran out; see shares.
func (d *Dispatcher) giveback(suiteID, nodeID string, n int) {
	sess, ok := d.shares.Ask(suiteID, nodeID, time.Now())
	if !ok {
		return // asked a moment ago
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp api.TasksGivenBack
		err := sess.Call(ctx, api.MethodTasksGiveback, api.TasksGiveback{SuiteID: suiteID, Count: n}, &resp)
		d.log.Debug("asked a node to give tasks back", "suite", suiteID, "node", nodeID, "asked", n,
			"returned", resp.Returned, "err", err)
	}()
}

// stopSuperseded tells the nodes running re-runs of tasks that a late
// report finished to stop them: the first completion won.
func (d *Dispatcher) stopSuperseded(ctx context.Context, runs []store.Superseded) {
	for _, r := range runs {
		body, _ := json.Marshal(api.TaskRef{TaskID: r.TaskID, Attempt: r.Attempt})
		if err := d.agents.Notify(ctx, r.NodeID, api.NotifyTaskCancel, body); err != nil {
			d.log.Warn("tell a node to stop a superseded attempt", "task", r.TaskID, "node", r.NodeID, "err", err)
			continue
		}
		d.log.Info("a lost attempt finished first; stopping its re-run", "task", r.TaskID, "node", r.NodeID, "attempt", r.Attempt)
	}
}

// retryPolicy is RetryPolicy with the configured backoff, as the store
// applies it to each failed attempt.
func (d *Dispatcher) retryPolicy(suite, task *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
	return RetryPolicy(suite, task, failures, d.cfg.RetryBackoff, d.cfg.RetryBackoffMax)
}

// stopSuiteOn keeps a suite off a node where its pool was stopped by hand,
// until it is assigned there again.
func (d *Dispatcher) stopSuiteOn(ctx context.Context, suiteID, nodeID string) error {
	_, err := d.store.UpdateSuite(ctx, suiteID, func(su *store.Suite) error {
		if !slices.Contains(su.StoppedNodes, nodeID) {
			su.StoppedNodes = append(su.StoppedNodes, nodeID)
		}
		return nil
	})
	if errdefs.IsNotFound(err) {
		return nil // the suite is gone
	}
	if err != nil {
		return fmt.Errorf("keep suite %s off node %s: %w", suiteID, nodeID, err)
	}
	d.log.Info("suite stopped by hand on a node; it is not offered there until assigned again", "suite", suiteID, "node", nodeID)
	return nil
}
