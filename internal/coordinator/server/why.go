package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Why a suite waits. The dispatcher (nextSuite) and the suite's
// waiting_reason ask the same question, whyNot, so the reason shown can
// never disagree with what the dispatcher does.

// Kinds of misfit, in the order whyNot checks them.
const (
	misfitAssigned = iota + 1 // the suite is explicitly assigned to other nodes
	misfitTags                // the node lacks some of the suite's tags
	misfitGroup               // the node is not in the suite's group
	misfitCores               // the suite's cpu_binding names cores the node does not have
	misfitPrepare             // the node failed to prepare the suite a short while ago
	misfitStopped             // the suite's pool was stopped on the node by hand
)

// misfit is why one node cannot take a suite up now.
type misfit struct {
	kind   int
	detail string
}

// placement says whether a suite may go to a node at all, by its explicit
// assignment, or else by its tags and group; nil when it may. It is the
// store's rule (store.Placement.Fit), which every claim checks too.
func placement(su store.Suite, n store.Node) *misfit {
	switch m, missing := su.Placement().Fit(n.ID, n.Tags, n.Groups); m {
	case store.MisfitStopped:
		return &misfit{kind: misfitStopped}
	case store.MisfitAssigned:
		return &misfit{kind: misfitAssigned}
	case store.MisfitTags:
		return &misfit{kind: misfitTags, detail: strings.Join(missing, ",")}
	case store.MisfitGroup:
		return &misfit{kind: misfitGroup}
	}
	return nil
}

// whyNot says why node n cannot take suite su up now, or nil when it can.
func (s *Server) whyNot(su store.Suite, n store.Node) *misfit {
	if m := placement(su, n); m != nil {
		return m
	}
	if err := validateCoresOn(su.Spec.WorkerSchedule.CPUBinding, n.Name, n.Hardware.Cores); err != nil {
		return &misfit{kind: misfitCores, detail: errdefs.Message(err)}
	}
	if s.dispatch.prepareFailedRecently(su.ID, n.ID) {
		return &misfit{kind: misfitPrepare}
	}
	return nil
}

// waitingReason says in one line why a suite with Ready tasks runs
// nowhere, or "" when some node runs it or could take it up now.
func (s *Server) waitingReason(ctx context.Context, su store.Suite) (string, error) {
	if su.Counts.Ready == 0 || (su.State != api.SuiteOpen && su.State != api.SuiteClosed) {
		return "", nil
	}
	why, err := s.diagnose(ctx, su, false)
	if why != "" && s.orch != nil {
		if pools := s.orch.ForSuite(ctx, su.Spec.Name); pools != "" {
			why += "; " + pools
		}
	}
	return why, err
}

// creationWarning says why no node could run a new suite, or "": it is
// accepted anyway, since nodes may join later.
func (s *Server) creationWarning(ctx context.Context, su store.Suite) (string, error) {
	return s.diagnose(ctx, su, true)
}

// diagnose looks at every node and says why none takes su up. Online means
// connected: only a connected agent asks for suites. New leaves out what
// only matters once the suite has tasks (prepare failures, busy nodes).
func (s *Server) diagnose(ctx context.Context, su store.Suite, new bool) (string, error) {
	nodes, err := s.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return "", fmt.Errorf("list nodes to explain suite %s: %w", su.Spec.Name, err)
	}
	if len(nodes) == 0 {
		return "no node is registered yet: start an agent with a join token (nodemgr join-token create)", nil
	}
	var online, placedOffline, placed, fit []store.Node
	for _, n := range nodes {
		sess := s.hub.get(n.ID)
		if sess != nil {
			if _, cur := sess.work(); cur == su.ID {
				return "", nil // it runs there
			}
			online = append(online, n)
		}
		if placement(su, n) != nil {
			continue
		}
		if sess == nil {
			placedOffline = append(placedOffline, n)
			continue
		}
		placed = append(placed, n)
		if m := s.whyNot(su, n); m == nil || m.kind == misfitPrepare {
			fit = append(fit, n)
		}
	}
	switch {
	case len(online) == 0:
		return fmt.Sprintf("no node is online (%d registered, none connected)", len(nodes)), nil
	case len(placed) == 0:
		return noPlacement(su, placedOffline), nil
	case len(fit) == 0:
		return noCores(su, placed), nil
	case new:
		return "", nil
	}
	return s.busyOrFailed(ctx, su, fit)
}

// noPlacement says that no online node matches the suite's assignment,
// tags or group, and names offline nodes that would.
func noPlacement(su store.Suite, offline []store.Node) string {
	var why string
	switch spec := su.Spec; {
	case len(su.StoppedNodes) > 0 && len(su.AssignedNodes) == 0 && len(spec.Tags) == 0 && spec.Group == "":
		why = "it was stopped by hand on every online node"
	case len(su.AssignedNodes) > 0:
		why = fmt.Sprintf("none of its assigned nodes [%s] is online", strings.Join(su.AssignedNodes, ","))
	case len(spec.Tags) > 0 && spec.Group != "":
		why = fmt.Sprintf("no online node in group %s has tags [%s]", spec.Group, strings.Join(spec.Tags, ","))
	case len(spec.Tags) > 0:
		why = fmt.Sprintf("no online node has tags [%s]", strings.Join(spec.Tags, ","))
	default:
		why = fmt.Sprintf("no online node is in group %s", spec.Group)
	}
	if len(offline) > 0 {
		why += fmt.Sprintf(" (offline ones that would: %s)", nodeNames(offline, 3))
	}
	if len(su.StoppedNodes) > 0 {
		why += fmt.Sprintf("; stopped by hand on %s (suite assign %s NODE brings it back there)", strings.Join(su.StoppedNodes, ","), su.Spec.Name)
	}
	return why
}

// noCores says that the suite's binding needs more cores than any online
// node that it may go to has.
func noCores(su store.Suite, placed []store.Node) string {
	b := su.Spec.WorkerSchedule.CPUBinding
	largest := 0
	for _, n := range placed {
		largest = max(largest, n.Hardware.Cores)
	}
	cores := make([]string, len(b.Cores))
	need := 0
	for i, c := range b.Cores {
		cores[i] = strconv.Itoa(c)
		need = max(need, c+1)
	}
	return fmt.Sprintf("no node can run it: cpu_binding cores [%s] need %d cores; the largest online node it may use has %d",
		strings.Join(cores, ","), need, largest)
}

// busyOrFailed explains a suite that some online nodes could run: all of
// them failed to prepare it a short while ago, or they all work on other
// suites. It is "" when one of them is free (it takes the suite up at its
// next ask).
func (s *Server) busyOrFailed(ctx context.Context, su store.Suite, fit []store.Node) (string, error) {
	var failed, busy []store.Node
	for _, n := range fit {
		switch m := s.whyNot(su, n); {
		case m != nil && m.kind == misfitPrepare:
			failed = append(failed, n)
		case s.busy(n.ID):
			busy = append(busy, n)
		default:
			return "", nil
		}
	}
	if len(failed) == len(fit) {
		problems, err := s.store.SuiteProblems(ctx, su.ID, "")
		if err != nil {
			return "", fmt.Errorf("explain suite %s: %w", su.Spec.Name, err)
		}
		var each []string
		for _, p := range problems {
			if len(each) < 3 && p.Stage != api.StageCleanup {
				each = append(each, fmt.Sprintf("%s: %s", nodeLabel(p.NodeName, p.NodeID), p.Reason))
			}
		}
		why := fmt.Sprintf("prepare failed on all %d eligible nodes", len(fit))
		if len(each) > 0 {
			why += " (" + strings.Join(each, "; ") + ")"
		}
		return why + fmt.Sprintf("; they retry after %s (see problems)", prepareBackoff), nil
	}
	return fmt.Sprintf("all %d eligible nodes are busy with other suites (%s)", len(fit), nodeNames(busy, 3)), nil
}

// busy reports whether a node's agent works on a suite.
func (s *Server) busy(nodeID string) bool {
	sess := s.hub.get(nodeID)
	if sess == nil {
		return false
	}
	state, cur := sess.work()
	return cur != "" && state != api.AgentIdle
}

func nodeNames(nodes []store.Node, most int) string {
	var names []string
	for i, n := range nodes {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(nodes)-most))
			break
		}
		names = append(names, nodeLabel(n.Name, n.ID))
	}
	return strings.Join(names, ", ")
}

func nodeLabel(name, id string) string {
	if name == "" {
		return id
	}
	return name
}

// noteSuiteLeave keeps what an agent said when it left a suite: a prepare
// failure becomes the suite's problem on that node (and the dispatcher
// backs off), and so does a cleanup hook that failed after the suite ran
// (the suite's state is not touched); leaving after the suite ran, and
// cleaned up, clears an older problem.
func (s *Server) noteSuiteLeave(ctx context.Context, nodeID string, req api.SuiteLeave) error {
	if req.Stopped {
		return s.stopSuiteOn(ctx, req.SuiteID, nodeID)
	}
	p := req.Problem
	if p == nil && strings.HasPrefix(req.Reason, "prepare-failed") {
		// An agent from before problems: all it gave is one line.
		p = &api.SuiteProblem{Stage: api.StagePrepare, ExitCode: -1,
			Reason: strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(req.Reason, "prepare-failed"), ":"))}
	}
	if p == nil {
		if ranFine(req.Reason) {
			s.dispatch.clearPrepareFailed(req.SuiteID, nodeID)
			return s.store.ClearSuiteProblem(ctx, req.SuiteID, nodeID)
		}
		return nil
	}
	switch p.Stage {
	case api.StagePrepare, api.StageWorkers, api.StageCleanup:
	default:
		return errdefs.Field("problem.stage", "must be %s, %s or %s, got %q", api.StagePrepare, api.StageWorkers, api.StageCleanup, p.Stage)
	}
	if ok, err := s.mayRun(ctx, req.SuiteID, nodeID); err != nil || !ok {
		return err // a node that may not run the suite has nothing to say of it
	}
	if p.Stage == api.StageCleanup {
		// The suite ran here, so its prepare works: the dispatcher need
		// not keep it off the node. The problem is kept all the same.
		s.dispatch.clearPrepareFailed(req.SuiteID, nodeID)
	} else {
		s.dispatch.notePrepareFailed(req.SuiteID, nodeID)
	}
	kept := api.SuiteProblem{NodeID: nodeID, Stage: p.Stage, ExitCode: p.ExitCode,
		Reason: cutTail(p.Reason, api.MaxProblemReason, true), OutputTail: cutTail(p.OutputTail, api.MaxProblemOutput, false),
		At: time.Now().UTC()}
	err := s.store.PutSuiteProblem(ctx, req.SuiteID, kept)
	if errdefs.IsNotFound(err) {
		return nil // the suite or node is gone: nothing to explain
	}
	return err
}

// mayRun reports whether the node may run the suite's tasks (or could,
// but for a stop by hand); a suite or node that is gone may not.
func (s *Server) mayRun(ctx context.Context, suiteID, nodeID string) (bool, error) {
	su, err := s.store.GetSuite(ctx, suiteID)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	n, err := s.store.GetNode(ctx, nodeID)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m := placement(su, n)
	return m == nil || m.kind == misfitStopped, nil
}

// ranFine reports whether a leave reason means the suite ran on the node,
// so its prepare worked.
func ranFine(reason string) bool {
	return reason == "complete" || reason == "cancelled" ||
		strings.HasPrefix(reason, "shutdown") || strings.HasPrefix(reason, "moved on")
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

// apiProblems is a suite's problems in their wire form.
func apiProblems(ps []store.SuiteProblem) []api.SuiteProblem {
	out := make([]api.SuiteProblem, len(ps))
	for i, p := range ps {
		out[i] = p.SuiteProblem
	}
	return out
}

// reasonTTL is how long a suite's waiting reason is reused. Finding it
// reads every node (50 ms with 5,000 on SQLite), and dashboards and
// `suite show --watch` ask for the same suite over and over; a reason a
// couple of seconds old is still the truth for a person reading it.
const reasonTTL = 2 * time.Second

// reasonCache keeps recent waiting reasons by suite.
type reasonCache struct {
	mu sync.Mutex
	m  map[string]cachedReason
}

type cachedReason struct {
	key    string // what the reason depends on in the suite itself
	reason string
	at     time.Time
}

// get returns su's reason from the cache when it is fresh and the suite's
// state and Ready count are the same, else computes and keeps it.
func (c *reasonCache) get(su store.Suite, compute func() (string, error)) (string, error) {
	key := fmt.Sprintf("%s/%d/%v", su.State, su.Counts.Ready, su.Counts.Running > 0)
	now := time.Now()
	c.mu.Lock()
	if r, ok := c.m[su.ID]; ok && r.key == key && now.Sub(r.at) < reasonTTL {
		c.mu.Unlock()
		return r.reason, nil
	}
	c.mu.Unlock()
	reason, err := compute()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 10_000 {
		c.m = map[string]cachedReason{} // bounded: forget all rather than track age
	}
	c.m[su.ID] = cachedReason{key: key, reason: reason, at: now}
	return reason, nil
}
