package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// What agents ask of the dispatcher, each call on the session of the agent
// asking: the next suite, leaving one, fetching, reporting and returning
// tasks.

// MaxFetch bounds one tasks.fetch.
const MaxFetch = 4096

// maxOutputTail is the output kept per stream of a task attempt; the agent
// caps it too.
const maxOutputTail = 64 << 10

// Next answers suite.next: the suite the node should run now, if any. A
// poll may be answered from a listing of the suites up to pollListingAge
// old: thousands of idle agents polling then cost one read of the suites
// per period, not one each.
func (d *Dispatcher) Next(ctx context.Context, sess Session, req api.SuiteNextRequest) (api.SuiteNext, error) {
	if sess.Draining() {
		return api.SuiteNext{}, nil // its machine is about to go
	}
	var maxAge time.Duration
	if req.Poll {
		maxAge = pollListingAge
	}
	su, err := d.nextSuite(ctx, sess.Node(), maxAge)
	if err != nil || su == nil {
		return api.SuiteNext{}, err
	}
	sess.Worked(time.Now())
	// It counts among the suite's nodes from now, before its pool
	// starts and fetches: the nodes fetching first leave it its share.
	d.shares.Join(su.ID, sess.Node(), sess, d.workers(ctx, sess, su.Spec.WorkerSchedule))
	out := su.Wire()
	return api.SuiteNext{Suite: &out}, nil
}

// workers is how many workers the node runs for a suite with schedule ws:
// its weight in the suite's fair shares. 0 if not known.
func (d *Dispatcher) workers(ctx context.Context, sess Session, ws api.WorkerSchedule) int {
	if ws.WorkerCount > 0 {
		return ws.WorkerCount
	}
	n, err := d.store.GetNode(ctx, sess.Node())
	if err != nil {
		return 0
	}
	return ws.WorkersOn(n.Hardware)
}

// Leave answers suite.leave: the node is done with the suite for now.
func (d *Dispatcher) Leave(ctx context.Context, sess Session, req api.SuiteLeave) error {
	sess.Worked(time.Now())
	// The agent has reported or returned every task of the suite before
	// it leaves, so one still Running on the node is one it lost track
	// of: it goes back to the queue rather than stay Running for ever.
	if n, err := d.store.ReclaimSuiteTasks(ctx, req.SuiteID, sess.Node()); err != nil {
		return fmt.Errorf("return the tasks node left running in suite %s: %w", req.SuiteID, err)
	} else if n > 0 {
		d.log.Warn("a node left a suite with tasks still running there; returned them to the queue",
			"node", sess.Node(), "suite", req.SuiteID, "tasks", n, "reason", req.Reason)
		d.wakeSuite(req.SuiteID, sess.Node())
	}
	if err := d.noteLeave(ctx, sess.Node(), req); err != nil {
		return fmt.Errorf("note that node left suite %s: %w", req.SuiteID, err)
	}
	d.fetches.Forget(req.SuiteID, sess.Node())
	d.shares.Leave(req.SuiteID, sess.Node())
	d.log.Info("agent left suite", "node", sess.Node(), "suite", req.SuiteID, "reason", req.Reason)
	return nil
}

// maxFetchWait bounds how long a fetch that found nothing is parked
// (api.TasksFetch.WaitMS): a node parked on an empty suite still looks,
// that often, whether it should move on to another.
const maxFetchWait = 2 * time.Second

// Fetch answers tasks.fetch: it claims up to req.Max of the suite's ready
// tasks for the node, no more than its fair share, or says why the node
// should move on. When nothing is Ready and the agent lets it wait
// (req.WaitMS), parked is not nil: it waits, up to WaitMS, for a wake of
// the suite, claims then, and its answer is the fetch's (hub/parking.go).
// The caller runs it off the shared request handlers (proto.Later).
func (d *Dispatcher) Fetch(ctx context.Context, sess Session, req api.TasksFetch) (out api.TasksFetched, parked func() (api.TasksFetched, error), err error) {
	if req.WaitMS < 0 {
		return api.TasksFetched{}, nil, errdefs.Field("wait_ms", "must not be negative, got %d", req.WaitMS)
	}
	wakes := sess.Wakes()
	if out, err = d.fetch(ctx, sess, req); err != nil || !parkable(req, out) || sess.Draining() {
		return out, nil, err
	}
	woken, ok := sess.Park(req.SuiteID, wakes)
	if !ok {
		return out, nil, nil // woken since it looked: the agent was sent the wake
	}
	deadline := time.Now().Add(min(time.Duration(req.WaitMS)*time.Millisecond, maxFetchWait))
	return out, func() (api.TasksFetched, error) { return d.park(ctx, sess, req, out, woken, deadline) }, nil
}

// parkable says whether a fetch that answered out may wait for tasks: it
// found none Ready, and the suite may still have some.
func parkable(req api.TasksFetch, out api.TasksFetched) bool {
	return req.WaitMS > 0 && req.Max > 0 && len(out.Tasks) == 0 && out.Remaining == 0 && out.Yield == "" && !out.Done &&
		(out.SuiteState == api.SuiteOpen || out.SuiteState == api.SuiteClosed)
}

// park waits for the suite's next wake, until deadline, and claims then;
// a claim that finds nothing again (another node was quicker) parks
// again. It answers empty, what the fetch found at first, at the
// deadline.
func (d *Dispatcher) park(ctx context.Context, sess Session, req api.TasksFetch, empty api.TasksFetched, woken <-chan struct{}, deadline time.Time) (api.TasksFetched, error) {
	d.metrics.fetchesParked.Inc()
	defer d.metrics.fetchesParked.Dec()
	for {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-woken:
			t.Stop()
		case <-t.C:
			sess.Unpark(woken)
			return empty, nil
		case <-ctx.Done(): // the connection ended: claim nothing for it
			t.Stop()
			sess.Unpark(woken)
			return api.TasksFetched{}, ctx.Err()
		}
		wakes := sess.Wakes()
		out, err := d.fetch(ctx, sess, req)
		if err != nil || !parkable(req, out) || sess.Draining() || time.Until(deadline) <= 0 {
			return out, err
		}
		var ok bool
		if woken, ok = sess.Park(req.SuiteID, wakes); !ok {
			return out, nil
		}
	}
}

// fetch claims for Fetch, once.
func (d *Dispatcher) fetch(ctx context.Context, sess Session, req api.TasksFetch) (api.TasksFetched, error) {
	if req.Max < 0 || req.Max > MaxFetch {
		return api.TasksFetched{}, errdefs.Field("max", "must be between 0 and %d, got %d", MaxFetch, req.Max)
	}
	if sess.Draining() {
		// Its machine is about to go: what it would claim now would
		// only come back.
		return yield("this node drains: its machine is about to be taken back"), nil
	}
	if why, err := d.moveOn(ctx, req.SuiteID, sess.Node()); err != nil {
		return api.TasksFetched{}, err
	} else if why != "" {
		return yield(why), nil
	}
	// Several nodes on the suite: claim no more than this one's fair
	// share (shares.go). Alone it takes what it asks for, at no cost.
	want, total := req.Max, 0
	var members []Share
	if req.Max > 0 {
		members = d.shares.Members(req.SuiteID, sess.Node(), sess, d.agents.Get)
	}
	var su *store.Suite // read once, when the cap or the answer needs it
	if len(members) > 1 {
		got, err := d.store.GetSuite(ctx, req.SuiteID)
		if err != nil {
			return api.TasksFetched{}, err
		}
		su = &got
		if members[0].Workers == 0 { // it fetched without suite.next here (a server restart)
			members[0].Workers = d.workers(ctx, sess, su.Spec.WorkerSchedule)
			d.shares.Join(req.SuiteID, sess.Node(), sess, members[0].Workers)
		}
		total = su.Counts.Ready + su.Counts.Running
		want = FairCap(total, req.Max, members)
	}
	// The store authorizes every claim, one of 0 tasks too: moveOn looks
	// at most once a second, the store every time, and it decides.
	claimed, answered, err := d.claim(ctx, sess, req.SuiteID, want)
	if errors.Is(err, errdefs.ErrPermission) {
		d.fetches.Recheck(req.SuiteID, sess.Node())
		d.shares.Leave(req.SuiteID, sess.Node())
		d.log.Info("claim refused", "node", sess.Node(), "suite", req.SuiteID, "why", errdefs.Message(err))
		return yield(notThisNodes), nil
	} else if err != nil {
		return api.TasksFetched{}, err
	}
	if len(claimed) > 0 {
		d.shares.Claimed(req.SuiteID, sess.Node(), sess, len(claimed))
	} else if answered > 0 {
		d.CompleteIfDone(ctx, req.SuiteID) // the cache may have answered its last tasks
	}
	// A node held to its share has work: only one that found the
	// suite empty counts towards moving on.
	if req.Max > 0 && want > 0 {
		d.fetches.NoteClaim(req.SuiteID, sess.Node(), len(claimed)+answered)
	}
	if len(members) > 1 && len(claimed) < want {
		// Nothing more is Ready while the node is short of its share:
		// the nodes holding more than theirs give the excess back.
		members[0].Held += len(claimed)
		for nodeID, n := range PlanGiveback(total, members) {
			d.giveback(req.SuiteID, nodeID, n)
		}
	}
	out := api.TasksFetched{Tasks: claimed, Remaining: -1}
	if len(claimed) < req.Max || req.Max == 0 {
		// The read before the claim is still good: nothing this fetch
		// did changes the suite's state, and fewer claimed means the
		// Ready it saw is what is left to others.
		if su == nil || len(claimed) > 0 {
			got, err := d.store.GetSuite(ctx, req.SuiteID)
			if err != nil {
				return api.TasksFetched{}, err
			}
			su = &got
		}
		c := su.Counts
		out.SuiteState, out.Remaining = su.State, c.Ready
		out.Done = su.State == api.SuiteComplete || su.State == api.SuiteCancelled ||
			(su.State == api.SuiteClosed && c.Pending == 0 && c.Ready == 0 && c.Running == 0)
	}
	return out, nil
}

// claim claims up to want of the suite's Ready tasks for the node, their
// input_from resolved. Those the action cache answers are finished at
// once and not returned, and more are claimed in their place, so that a
// build whose every task is a hit is done within the fetch; answered
// says how many.
func (d *Dispatcher) claim(ctx context.Context, sess Session, suiteID string, want int) (tasks []api.Task, answered int, err error) {
	tasks = []api.Task{}
	for round := 0; ; round++ {
		ask := want - len(tasks)
		claimed, err := d.store.ClaimTasks(ctx, suiteID, sess.Node(), ask)
		if err != nil {
			if round > 0 && !errors.Is(err, errdefs.ErrPermission) {
				return tasks, answered, nil // what it has is claimed: hand it out
			}
			return nil, 0, err
		}
		d.metrics.tasksClaimed.Add(float64(len(claimed)))
		fresh := make([]api.Task, len(claimed))
		for i, t := range claimed {
			fresh[i] = t.Wire()
			if len(t.Spec.InputFrom) > 0 {
				d.resolveInputs(ctx, &fresh[i])
			}
		}
		run, hits := d.answerFromCache(ctx, sess, suiteID, fresh)
		tasks, answered = append(tasks, run...), answered+hits
		// Claim again only when hits left room and the store had more.
		if hits == 0 || len(claimed) < ask || len(tasks) >= want || round >= maxCacheRounds {
			return tasks, answered, nil
		}
	}
}

// maxCacheRounds bounds the claims one fetch makes in place of tasks the
// action cache answered: the agent asks again for the rest.
const maxCacheRounds = 64

// yield is a fetch's answer that claims nothing and tells the node to
// move on, and why.
func yield(why string) api.TasksFetched {
	return api.TasksFetched{Tasks: []api.Task{}, Remaining: -1, Yield: why}
}

// Report answers tasks.report: it applies the attempts the node finished
// (the first report of an attempt wins), and says how many applied.
func (d *Dispatcher) Report(ctx context.Context, sess Session, req api.TasksReport) (int, error) {
	now := time.Now().UTC()
	attempts := make([]store.Attempt, 0, len(req.Reports))
	for i, r := range req.Reports {
		a, err := d.attempt(sess.Node(), "reports["+strconv.Itoa(i)+"]", r, now)
		if err != nil {
			return 0, err
		}
		attempts = append(attempts, a)
	}
	// A task that waits before its next attempt is Ready only then: its
	// nodes may be idle by that time, and are woken for it.
	var wait time.Duration
	retry := func(suite, task *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
		giveUp, w := d.retryPolicy(suite, task, failures)
		if !giveUp {
			wait = max(wait, w)
		}
		return giveUp, w
	}
	done, err := d.store.FinishAttempts(ctx, sess.Node(), attempts, retry)
	if err != nil {
		return 0, err
	}
	if wait > 0 {
		time.AfterFunc(wait, func() { d.wakeSuite("", "") })
	}
	d.cacheSucceeded(ctx, attempts)
	d.metrics.tasksReported.Add(float64(done.Applied))
	d.stopSuperseded(ctx, done.Superseded)
	for _, id := range done.Released { // dependents became Ready: wake their nodes
		d.SuiteChanged(ctx, id)
	}
	// If these were the suite's last tasks, it completes now rather than
	// at the next tick. They can only be if the node holds none of its
	// tasks any more (as counted here; a node this server has not seen
	// fetch is looked at every time).
	drained, member := d.shares.Settled(sess.Node(), len(req.Reports), false)
	_, current := sess.Work()
	if !member && current != "" {
		drained = append(drained, current)
	}
	// The tasks are the suites' the node fetched from, or its current one.
	d.Changes.Notify(append(d.shares.SuitesOf(sess.Node()), current)...)
	for _, id := range drained {
		d.CompleteIfDone(ctx, id)
	}
	for _, r := range req.Reports {
		d.metrics.taskReports.WithLabelValues(r.Outcome).Inc()
	}
	return done.Applied, nil
}

// attempt is one report as the store applies it. An invalid result is
// not stored as it came: the attempt fails with the reason, so the rest
// of the batch and the task's retries go on.
func (d *Dispatcher) attempt(nodeID, field string, r api.TaskReport, now time.Time) (store.Attempt, error) {
	switch r.Outcome {
	case api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped:
	default:
		return store.Attempt{}, errdefs.Field(field+".outcome", "must be succeeded, failed or stopped, got %q", r.Outcome)
	}
	res := r.Result
	res.Stdout, res.Stderr = tail(res.Stdout), tail(res.Stderr)
	res.NodeID, res.FinishedAt = nodeID, now
	if err := CheckResultFiles(field+".result", res); err != nil {
		d.log.Warn("invalid task result", "node", nodeID, "task", r.TaskID, "err", err)
		res.Outputs, res.Missing = nil, nil
		r.Outcome, r.Reason = api.OutcomeFailed, "the agent reported an invalid result: "+errdefs.Message(err)
	}
	if err := checkResultLog(field+".result.log", res.Log); err != nil {
		d.log.Warn("invalid task log; keeping the tails only", "node", nodeID, "task", r.TaskID, "err", err)
		res.Log = nil
	}
	a := store.Attempt{TaskID: r.TaskID, Attempt: r.Attempt, Outcome: r.Outcome, Result: res}
	if r.Outcome == api.OutcomeFailed {
		a.Failure = &api.TaskFailure{Attempt: r.Attempt, NodeID: nodeID, ExitCode: res.ExitCode,
			Signal: res.Signal, Reason: r.Reason, Stdout: res.Stdout, Stderr: res.Stderr, Log: res.Log, At: now}
	}
	return a, nil
}

// Return answers tasks.return: the node gives back tasks it claimed and
// did not start; it says how many were its to return.
func (d *Dispatcher) Return(ctx context.Context, sess Session, req api.TasksReturn) (int, error) {
	n, err := d.store.ReturnTasks(ctx, sess.Node(), req.TaskIDs)
	if err != nil {
		return 0, err
	}
	d.forgetPending(req.TaskIDs)
	d.metrics.tasksReturned.Add(float64(n))
	if _, current := sess.Work(); current != "" {
		d.Changes.Notify(append(d.shares.SuitesOf(sess.Node()), current)...)
	} else {
		d.Changes.Notify(d.shares.SuitesOf(sess.Node())...)
	}
	d.shares.Settled(sess.Node(), len(req.TaskIDs), true)
	if n > 0 {
		// Ready again: whoever runs the suite or is idle may take them
		// (a giveback's asker waits for exactly this).
		suites := d.shares.SuitesOf(sess.Node())
		if _, current := sess.Work(); len(suites) == 0 && current != "" {
			suites = append(suites, current)
		}
		for _, id := range suites {
			d.wakeSuite(id, sess.Node())
		}
	}
	return n, nil
}

func tail(s string) string {
	if len(s) <= maxOutputTail {
		return s
	}
	return s[len(s)-maxOutputTail:]
}

// cutTail bounds s to n bytes: its head for a reason, its tail for output.
func cutTail(s string, n int, head bool) string {
	if len(s) <= n {
		return s
	}
	if head {
		return strings.ToValidUTF8(s[:n], "")
	}
	return strings.ToValidUTF8(s[len(s)-n:], "")
}
