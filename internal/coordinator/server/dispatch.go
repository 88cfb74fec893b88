package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Output kept per stream of a task attempt; the agent caps it too.
const maxOutputTail = 64 << 10

// maxFetch bounds one tasks.fetch.
const maxFetch = 4096

func jsonBody(v any) ([]byte, error) { return json.Marshal(v) }

// dispatcher holds what the server remembers about suites between requests.
type dispatcher struct {
	prepare dispatch.PrepareFailures
	fetches dispatch.FetchWatch
	shares  dispatch.Shares[*hub.Session]
}

// nextSuite picks the suite a node should run: the highest-priority
// eligible suite with tasks ready, or with tasks other nodes would give
// back to it (fairness.go).
func (s *Server) nextSuite(ctx context.Context, nodeID string) (*store.Suite, error) {
	n, err := s.store.GetNode(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	suites, err := s.store.ListSuites(ctx, store.SuiteFilter{States: []string{api.SuiteOpen, api.SuiteClosed}})
	if err != nil {
		return nil, err
	}
	for _, su := range suites {
		if su.Counts.Ready == 0 && !s.wouldGetGivenBack(su, n) {
			continue
		}
		if s.why.WhyNot(su, n) != nil {
			continue // the same test explains a waiting suite (why.go)
		}
		return &su, nil
	}
	return nil, nil
}

// wouldGetGivenBack says whether node n, joining suite su, would be given
// tasks the suite's nodes hold unstarted.
func (s *Server) wouldGetGivenBack(su store.Suite, n store.Node) bool {
	if su.Counts.Running == 0 {
		return false
	}
	workers := su.Spec.WorkerSchedule.WorkersOn(n.Hardware)
	return s.dispatch.shares.JoinWouldGet(su.ID, n.ID, workers, su.Counts.Ready+su.Counts.Running, s.hub.Get)
}

// suiteChanged wakes the agents that might now have work for the suite:
// idle ones, and those already running it and waiting for tasks.
func (s *Server) suiteChanged(ctx context.Context, suiteID string) {
	s.hub.WakeOrchestrator() // new tasks may be demand for a pool
	s.wakeSuite(suiteID, "")
}

// wakeSuite wakes the agents, but the one of node except, that are idle or
// run the suite.
func (s *Server) wakeSuite(suiteID, except string) {
	s.hub.WakeLocal(suiteID, except)
	s.hub.SignalWake(suiteID) // and the agents connected to other servers
}

// wakeNode asks one node's agent to look for work again (its tags or
// groups changed, so other suites may fit it now).
func (s *Server) wakeNode(nodeID string) {
	sess := s.hub.Get(nodeID)
	if sess == nil { // connected to another server, or none: it looks on connect
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sess.Peer.Call(ctx, api.MethodWake, api.SuiteRef{}, nil)
	}()
}

// tellSuiteCancelled tells every node working on the suite to stop it.
func (s *Server) tellSuiteCancelled(ctx context.Context, suiteID string) {
	nodes, err := s.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		s.log.Error("list nodes to cancel suite", "suite", suiteID, "err", err)
		return
	}
	body, _ := jsonBody(api.SuiteRef{SuiteID: suiteID})
	for _, n := range nodes {
		current := n.CurrentSuite
		if sess := s.hub.Get(n.ID); sess != nil {
			_, current = sess.Work()
		}
		if current != suiteID {
			continue
		}
		if err := s.hub.Notify(ctx, n.ID, api.NotifySuiteCancelled, body); err != nil {
			s.log.Warn("tell node to stop suite", "suite", suiteID, "node", n.ID, "err", err)
		}
	}
	// The store's current suite of a node connected to another server
	// lags by up to a heartbeat flush: that server checks its own.
	s.hub.SignalCancel(suiteID)
}

// tellLocalCancelled tells the agents connected here that run the suite
// to stop it (another server cancelled it).
func (s *Server) tellLocalCancelled(ctx context.Context, suiteID string) {
	body, _ := jsonBody(api.SuiteRef{SuiteID: suiteID})
	for _, sess := range s.hub.All() {
		if _, current := sess.Work(); current != suiteID {
			continue
		}
		if err := s.hub.Notify(ctx, sess.NodeID, api.NotifySuiteCancelled, body); err != nil {
			s.log.Warn("tell node to stop suite", "suite", suiteID, "node", sess.NodeID, "err", err)
		}
	}
}

// reclaim gives a node's running tasks back to the queue.
func (s *Server) reclaim(ctx context.Context, nodeID, why string, keep ...string) {
	n, err := s.store.ReclaimNode(ctx, nodeID, keep...)
	if err != nil {
		s.log.Error("reclaim tasks", "node", nodeID, "err", err)
		return
	}
	if n > 0 {
		s.log.Info("tasks returned to the queue", "node", nodeID, "tasks", n, "why", why)
		s.hub.WakeLocal("", "")
		s.hub.SignalWake("")
	}
}

// suiteLoop closes suites that got no tasks for a while and completes
// closed suites with nothing left to run. A suite whose last task ends is
// completed at once by the report (completeIfDone); the tick is the safety
// net for the rest (tasks cancelled while Ready, a report that failed).
func (s *Server) suiteLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SuiteTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		closed, err := s.store.CloseIdleSuites(ctx, time.Now().Add(-s.cfg.SuiteCloseAfter))
		if err != nil && ctx.Err() == nil {
			s.log.Error("close idle suites", "err", err)
		}
		for _, id := range closed {
			s.log.Info("suite closed: no new tasks", "suite", id, "after", s.cfg.SuiteCloseAfter)
			s.suiteChanged(ctx, id)
		}
		s.completeSuites(ctx)
	}
}

// completeSuites moves Closed suites with nothing left to run to Complete.
func (s *Server) completeSuites(ctx context.Context) {
	done, err := s.store.CompleteSuites(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("complete suites", "err", err)
	}
	for _, id := range done {
		s.log.Info("suite complete", "suite", id)
		s.suiteChanged(ctx, id)
	}
}

// completeIfDone completes the suite now if it is Closed and its last
// task just ended, instead of at the next tick.
func (s *Server) completeIfDone(ctx context.Context, suiteID string) {
	su, err := s.store.GetSuite(ctx, suiteID)
	if err != nil {
		return // gone, or the store is down: the tick tries again
	}
	if su.State == api.SuiteClosed && su.Counts.Pending == 0 && su.Counts.Ready == 0 && su.Counts.Running == 0 {
		s.completeSuites(ctx)
	}
}

// giveback asks the node to give up to n of the suite's tasks it holds
// unstarted back, for members that ran out; see shares.
func (s *Server) giveback(suiteID, nodeID string, n int) {
	sess, ok := s.dispatch.shares.Ask(suiteID, nodeID, time.Now())
	if !ok {
		return // asked a moment ago
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp api.TasksGivenBack
		err := sess.Peer.Call(ctx, api.MethodTasksGiveback, api.TasksGiveback{SuiteID: suiteID, Count: n}, &resp)
		s.log.Debug("asked a node to give tasks back", "suite", suiteID, "node", nodeID, "asked", n,
			"returned", resp.Returned, "err", err)
	}()
}

// Agent requests about suites and tasks.

func (h *agentHandler) suiteNext(ctx context.Context) (any, error) {
	if h.sess.Draining() {
		return api.SuiteNext{}, nil // its machine is about to go
	}
	su, err := h.s.nextSuite(ctx, h.sess.NodeID)
	if err != nil || su == nil {
		return api.SuiteNext{}, err
	}
	h.sess.Worked(time.Now())
	// It counts among the suite's nodes from now, before its pool
	// starts and fetches: the nodes fetching first leave it its share.
	h.s.dispatch.shares.Join(su.ID, h.sess.NodeID, h.sess, h.workers(ctx, su.Spec.WorkerSchedule))
	out := apiSuite(*su)
	return api.SuiteNext{Suite: &out}, nil
}

// workers is how many workers the node runs for a suite with schedule ws:
// its weight in the suite's fair shares. 0 if not known.
func (h *agentHandler) workers(ctx context.Context, ws api.WorkerSchedule) int {
	if ws.WorkerCount > 0 {
		return ws.WorkerCount
	}
	n, err := h.s.store.GetNode(ctx, h.sess.NodeID)
	if err != nil {
		return 0
	}
	return ws.WorkersOn(n.Hardware)
}

func (h *agentHandler) suiteLeave(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.SuiteLeave
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	h.sess.Worked(time.Now())
	// The agent has reported or returned every task of the suite before
	// it leaves, so one still Running on the node is one it lost track
	// of: it goes back to the queue rather than stay Running for ever.
	if n, err := h.s.store.ReclaimSuiteTasks(ctx, req.SuiteID, h.sess.NodeID); err != nil {
		return nil, fmt.Errorf("return the tasks node left running in suite %s: %w", req.SuiteID, err)
	} else if n > 0 {
		h.s.log.Warn("a node left a suite with tasks still running there; returned them to the queue",
			"node", h.sess.NodeID, "suite", req.SuiteID, "tasks", n, "reason", req.Reason)
		h.s.wakeSuite(req.SuiteID, h.sess.NodeID)
	}
	if err := h.s.noteSuiteLeave(ctx, h.sess.NodeID, req); err != nil {
		return nil, fmt.Errorf("note that node left suite %s: %w", req.SuiteID, err)
	}
	h.s.dispatch.fetches.Forget(req.SuiteID, h.sess.NodeID)
	h.s.dispatch.shares.Leave(req.SuiteID, h.sess.NodeID)
	h.s.log.Info("agent left suite", "node", h.sess.NodeID, "suite", req.SuiteID, "reason", req.Reason)
	return struct{}{}, nil
}

func (h *agentHandler) tasksFetch(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksFetch
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Max < 0 || req.Max > maxFetch {
		return nil, errdefs.Field("max", "must be between 0 and %d, got %d", maxFetch, req.Max)
	}
	if h.sess.Draining() {
		// Its machine is about to go: what it would claim now would
		// only come back.
		return api.TasksFetched{Tasks: []api.Task{}, Remaining: -1, Yield: "this node drains: its machine is about to be taken back"}, nil
	}
	if why, err := h.s.moveOn(ctx, req.SuiteID, h.sess.NodeID); err != nil {
		return nil, err
	} else if why != "" {
		return api.TasksFetched{Tasks: []api.Task{}, Remaining: -1, Yield: why}, nil
	}
	// Several nodes on the suite: claim no more than this one's fair
	// share (fairness.go). Alone it takes what it asks for, at no cost.
	want, total := req.Max, 0
	var members []dispatch.Share
	if req.Max > 0 {
		members = h.s.dispatch.shares.Members(req.SuiteID, h.sess.NodeID, h.sess, h.s.hub.Get)
	}
	var su *store.Suite // read once, when the cap or the answer needs it
	if len(members) > 1 {
		got, err := h.s.store.GetSuite(ctx, req.SuiteID)
		if err != nil {
			return nil, err
		}
		su = &got
		if members[0].Workers == 0 { // it fetched without suite.next here (a server restart)
			members[0].Workers = h.workers(ctx, su.Spec.WorkerSchedule)
			h.s.dispatch.shares.Join(req.SuiteID, h.sess.NodeID, h.sess, members[0].Workers)
		}
		total = su.Counts.Ready + su.Counts.Running
		want = dispatch.FairCap(total, req.Max, members)
	}
	// The store authorizes every claim, one of 0 tasks too: moveOn looks
	// at most once a second, the store every time, and it decides.
	claimed, err := h.s.store.ClaimTasks(ctx, req.SuiteID, h.sess.NodeID, want)
	if errors.Is(err, errdefs.ErrPermission) {
		h.s.dispatch.fetches.Recheck(req.SuiteID, h.sess.NodeID)
		h.s.dispatch.shares.Leave(req.SuiteID, h.sess.NodeID)
		h.s.log.Info("claim refused", "node", h.sess.NodeID, "suite", req.SuiteID, "why", errdefs.Message(err))
		return api.TasksFetched{Tasks: []api.Task{}, Remaining: -1, Yield: notThisNodes}, nil
	} else if err != nil {
		return nil, err
	}
	if len(claimed) > 0 {
		h.s.dispatch.shares.Claimed(req.SuiteID, h.sess.NodeID, h.sess, len(claimed))
	}
	// A node held to its share has work: only one that found the
	// suite empty counts towards moving on.
	if req.Max > 0 && want > 0 {
		h.s.dispatch.fetches.NoteClaim(req.SuiteID, h.sess.NodeID, len(claimed))
	}
	if len(members) > 1 && len(claimed) < want {
		// Nothing more is Ready while the node is short of its share:
		// the nodes holding more than theirs give the excess back.
		members[0].Held += len(claimed)
		for nodeID, n := range dispatch.PlanGiveback(total, members) {
			h.s.giveback(req.SuiteID, nodeID, n)
		}
	}
	h.s.metrics.tasksClaimed.Add(float64(len(claimed)))
	out := api.TasksFetched{Tasks: make([]api.Task, len(claimed)), Remaining: -1}
	for i, t := range claimed {
		out.Tasks[i] = apiTask(t)
		if len(t.Spec.InputFrom) > 0 {
			h.s.resolveInputs(ctx, &out.Tasks[i])
		}
	}
	if len(claimed) < req.Max || req.Max == 0 {
		// The read before the claim is still good: nothing this fetch
		// did changes the suite's state, and fewer claimed means the
		// Ready it saw is what is left to others.
		if su == nil || len(claimed) > 0 {
			got, err := h.s.store.GetSuite(ctx, req.SuiteID)
			if err != nil {
				return nil, err
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

func (h *agentHandler) tasksReport(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksReport
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	attempts := make([]store.Attempt, 0, len(req.Reports))
	for i, r := range req.Reports {
		switch r.Outcome {
		case api.OutcomeSucceeded, api.OutcomeFailed, api.OutcomeStopped:
		default:
			return nil, errdefs.Field("reports["+strconv.Itoa(i)+"].outcome", "must be succeeded, failed or stopped, got %q", r.Outcome)
		}
		res := r.Result
		res.Stdout, res.Stderr = tail(res.Stdout), tail(res.Stderr)
		res.NodeID, res.FinishedAt = h.sess.NodeID, now
		if err := dispatch.CheckResultFiles("reports["+strconv.Itoa(i)+"].result", res); err != nil {
			// Not stored as it came; the attempt fails with the reason,
			// so the rest of the batch and the task's retries go on.
			h.s.log.Warn("invalid task result", "node", h.sess.NodeID, "task", r.TaskID, "err", err)
			res.Outputs, res.Missing = nil, nil
			r.Outcome, r.Reason = api.OutcomeFailed, "the agent reported an invalid result: "+errdefs.Message(err)
		}
		a := store.Attempt{TaskID: r.TaskID, Attempt: r.Attempt, Outcome: r.Outcome, Result: res}
		if r.Outcome == api.OutcomeFailed {
			a.Failure = &api.TaskFailure{Attempt: r.Attempt, NodeID: h.sess.NodeID, ExitCode: res.ExitCode,
				Signal: res.Signal, Reason: r.Reason, Stdout: res.Stdout, Stderr: res.Stderr, At: now}
		}
		attempts = append(attempts, a)
	}
	done, err := h.s.store.FinishAttempts(ctx, h.sess.NodeID, attempts, h.s.retryPolicy)
	if err != nil {
		return nil, err
	}
	applied := done.Applied
	if applied > 0 {
		h.s.metrics.tasksReported.Add(float64(applied))
	}
	h.s.stopSuperseded(ctx, done.Superseded)
	for _, id := range done.Released { // dependents became Ready: wake their nodes
		h.s.suiteChanged(ctx, id)
	}
	// If these were the suite's last tasks, it completes now rather than
	// at the next tick. They can only be if the node holds none of its
	// tasks any more (as counted here; a node this server has not seen
	// fetch is looked at every time).
	drained, member := h.s.dispatch.shares.Settled(h.sess.NodeID, len(req.Reports), false)
	if _, current := h.sess.Work(); !member && current != "" {
		drained = append(drained, current)
	}
	for _, id := range drained {
		h.s.completeIfDone(ctx, id)
	}
	for _, r := range req.Reports {
		h.s.metrics.taskReports.WithLabelValues(r.Outcome).Inc()
	}
	return struct {
		Applied int `json:"applied"`
	}{applied}, nil
}

func (h *agentHandler) tasksReturn(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksReturn
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	n, err := h.s.store.ReturnTasks(ctx, h.sess.NodeID, req.TaskIDs)
	if err != nil {
		return nil, err
	}
	h.s.metrics.tasksReturned.Add(float64(n))
	h.s.dispatch.shares.Settled(h.sess.NodeID, len(req.TaskIDs), true)
	if n > 0 {
		// Ready again: whoever runs the suite or is idle may take them
		// (a giveback's asker waits for exactly this).
		suites := h.s.dispatch.shares.SuitesOf(h.sess.NodeID)
		if _, current := h.sess.Work(); len(suites) == 0 && current != "" {
			suites = append(suites, current)
		}
		for _, id := range suites {
			h.s.wakeSuite(id, h.sess.NodeID)
		}
	}
	return struct {
		Returned int `json:"returned"`
	}{n}, nil
}

func tail(s string) string {
	if len(s) <= maxOutputTail {
		return s
	}
	return s[len(s)-maxOutputTail:]
}
