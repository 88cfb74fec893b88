package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// WhyStore is what Why reads nodes, suites and their problems from.
type WhyStore interface {
	ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error)
	NodesRevision(ctx context.Context) (int64, error)
	GetNode(ctx context.Context, id string) (store.Node, error)
	GetSuite(ctx context.Context, id string) (store.Suite, error)
	SuiteProblems(ctx context.Context, suiteID, nodeID string) ([]store.SuiteProblem, error)
}

// Sessions is what the server knows of its agents' sessions now.
type Sessions interface {
	// Work is what a node's agent works on (its state and suite), and
	// whether it is connected here at all.
	Work(nodeID string) (state, suiteID string, connected bool)
	// Connected is Work for every agent connected here.
	Connected() []AgentWork
}

// AgentWork is what the agent of a node connected here works on.
type AgentWork struct{ NodeID, State, SuiteID string }

// Pools say which pools start machines for a suite; the orchestrator's.
type Pools interface {
	ForSuite(ctx context.Context, suite string) string
}

// Why answers whether a node may take a suite up now, and why a suite
// runs nowhere.
type Why struct {
	store    WhyStore
	sessions Sessions
	prepare  *PrepareFailures
	// pools are the orchestrator's, nil while there is none.
	pools func() Pools

	// known is what describes the registered nodes (whynodes.go), and
	// loading the read of them under way, if any.
	known   atomic.Pointer[registered]
	mu      sync.Mutex
	loading *nodesLoad
}

// NewWhy returns a Why over st and the server's sessions, with the
// prepare failures the dispatcher notes.
func NewWhy(st WhyStore, sessions Sessions, prepare *PrepareFailures, pools func() Pools) *Why {
	return &Why{store: st, sessions: sessions, prepare: prepare, pools: pools}
}

// Why a suite waits. The dispatcher (the server's nextSuite) and the
// suite's waiting_reason ask the same question, WhyNot, so the reason
// shown can never disagree with what the dispatcher does.

// Kinds of misfit, in the order whyNot checks them.
const (
	misfitAssigned = iota + 1 // the suite is explicitly assigned to other nodes
	misfitTags                // the node lacks some of the suite's tags
	misfitGroup               // the node is not in the suite's group
	misfitCores               // the suite's cpu_binding names cores the node does not have
	misfitPrepare             // the node failed to prepare the suite a short while ago
	misfitStopped             // the suite's pool was stopped on the node by hand
)

// Misfit is why one node cannot take a suite up now.
type Misfit struct {
	kind   int
	detail string
}

// Placement says whether a suite may go to a node at all, by its explicit
// assignment, or else by its tags and group; nil when it may. It is the
// store's rule (store.Placement.Fit), which every claim checks too.
func Placement(su store.Suite, n store.Node) *Misfit {
	switch m, missing := su.Placement().Fit(n.ID, n.Tags, n.Groups); m {
	case store.MisfitStopped:
		return &Misfit{kind: misfitStopped}
	case store.MisfitAssigned:
		return &Misfit{kind: misfitAssigned}
	case store.MisfitTags:
		return &Misfit{kind: misfitTags, detail: strings.Join(missing, ",")}
	case store.MisfitGroup:
		return &Misfit{kind: misfitGroup}
	}
	return nil
}

// WhyNot says why node n cannot take suite su up now, or nil when it can.
func (w *Why) WhyNot(su store.Suite, n store.Node) *Misfit {
	if m := Placement(su, n); m != nil {
		return m
	}
	if err := ValidateCoresOn(su.Spec.WorkerSchedule.CPUBinding, n.Name, n.Hardware.Cores); err != nil {
		return &Misfit{kind: misfitCores, detail: errdefs.Message(err)}
	}
	if w.prepare.Recently(su.ID, n.ID) {
		return &Misfit{kind: misfitPrepare}
	}
	return nil
}

// WaitingReason says in one line why a suite with Ready tasks runs
// nowhere, or "" when some node runs it or could take it up now.
func (w *Why) WaitingReason(ctx context.Context, su store.Suite) (string, error) {
	if su.Counts.Ready == 0 || (su.State != api.SuiteOpen && su.State != api.SuiteClosed) {
		return "", nil
	}
	why, err := w.diagnose(ctx, su, false)
	if p := w.pools(); why != "" && p != nil {
		if pools := p.ForSuite(ctx, su.Spec.Name); pools != "" {
			why += "; " + pools
		}
	}
	return why, err
}

// CreationWarning says why no node could run a new suite, or "": it is
// accepted anyway, since nodes may join later.
func (w *Why) CreationWarning(ctx context.Context, su store.Suite) (string, error) {
	return w.diagnose(ctx, su, true)
}

// diagnose says why no node takes su up. Online means connected here:
// only a connected agent asks for suites, so the nodes the sessions name
// are the ones looked at; offline nodes matter only to name those that
// would fit, and are found through the suite's assignment, tags or group.
// New leaves out what only matters once the suite has tasks (prepare
// failures, busy nodes).
func (w *Why) diagnose(ctx context.Context, su store.Suite, new bool) (string, error) {
	reg, err := w.registered(ctx)
	if err != nil {
		return "", fmt.Errorf("list nodes to explain suite %s: %w", su.Spec.Name, err)
	}
	if len(reg.nodes) == 0 {
		return "no node is registered yet: start an agent with a join token (nodemgr join-token create)", nil
	}
	var online []int // indexes into reg.nodes
	for _, a := range w.sessions.Connected() {
		i, ok := reg.at[a.NodeID]
		if !ok {
			continue // not registered (deleted since): not a node to count
		}
		if a.SuiteID == su.ID {
			return "", nil // it runs there
		}
		online = append(online, i)
	}
	if len(online) == 0 {
		return fmt.Sprintf("no node is online (%d registered, none connected)", len(reg.nodes)), nil
	}
	slices.Sort(online)           // by name, as reasons name nodes
	var placed, fit []*store.Node // into reg, which is not changed
	for _, i := range online {
		n := &reg.nodes[i]
		if Placement(su, *n) != nil {
			continue
		}
		placed = append(placed, n)
		if m := w.WhyNot(su, *n); m == nil || m.kind == misfitPrepare {
			fit = append(fit, n)
		}
	}
	switch {
	case len(placed) == 0: // so every node the placement allows is offline
		return noPlacement(su, reg.placed(su)), nil
	case len(fit) == 0:
		return noCores(su, placed), nil
	case new:
		return "", nil
	}
	return w.busyOrFailed(ctx, su, fit)
}

// noPlacement says that no online node matches the suite's assignment,
// tags or group, and names offline nodes that would.
func noPlacement(su store.Suite, offline []*store.Node) string {
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
func noCores(su store.Suite, placed []*store.Node) string {
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
func (w *Why) busyOrFailed(ctx context.Context, su store.Suite, fit []*store.Node) (string, error) {
	var failed, busy []*store.Node
	for _, n := range fit {
		switch m := w.WhyNot(su, *n); {
		case m != nil && m.kind == misfitPrepare:
			failed = append(failed, n)
		case w.Busy(n.ID):
			busy = append(busy, n)
		default:
			return "", nil
		}
	}
	if len(failed) == len(fit) {
		problems, err := w.store.SuiteProblems(ctx, su.ID, "")
		if err != nil {
			return "", fmt.Errorf("explain suite %s: %w", su.Spec.Name, err)
		}
		var each []string
		for _, p := range problems {
			if len(each) < 3 && p.Stage != api.StageCleanup {
				each = append(each, fmt.Sprintf("%s: %s", NodeLabel(p.NodeName, p.NodeID), p.Reason))
			}
		}
		why := fmt.Sprintf("prepare failed on all %d eligible nodes", len(fit))
		if len(each) > 0 {
			why += " (" + strings.Join(each, "; ") + ")"
		}
		return why + fmt.Sprintf("; they retry after %s (see problems)", PrepareBackoff), nil
	}
	return fmt.Sprintf("all %d eligible nodes are busy with other suites (%s)", len(fit), nodeNames(busy, 3)), nil
}

// Busy reports whether a node's agent works on a suite.
func (w *Why) Busy(nodeID string) bool {
	state, cur, connected := w.sessions.Work(nodeID)
	return connected && cur != "" && state != api.AgentIdle
}

func nodeNames(nodes []*store.Node, most int) string {
	var names []string
	for i, n := range nodes {
		if i == most {
			names = append(names, fmt.Sprintf("and %d more", len(nodes)-most))
			break
		}
		names = append(names, NodeLabel(n.Name, n.ID))
	}
	return strings.Join(names, ", ")
}

// NodeLabel is a node as messages name it: by name, else by ID.
func NodeLabel(name, id string) string {
	if name == "" {
		return id
	}
	return name
}

// MayRun reports whether the node may run the suite's tasks (or could,
// but for a stop by hand); a suite or node that is gone may not.
func (w *Why) MayRun(ctx context.Context, suiteID, nodeID string) (bool, error) {
	su, err := w.store.GetSuite(ctx, suiteID)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	n, err := w.store.GetNode(ctx, nodeID)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m := Placement(su, n)
	return m == nil || m.kind == misfitStopped, nil
}
