package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// agentsHere are the sessions of the agents connected to a server: node
// ID → what its agent works on.
type agentsHere map[string]AgentWork

func (a agentsHere) Work(nodeID string) (state, suiteID string, connected bool) {
	w, ok := a[nodeID]
	return w.State, w.SuiteID, ok
}

func (a agentsHere) Connected() []AgentWork {
	var out []AgentWork
	for _, w := range a { // in no order, as the hub's map
		out = append(out, w)
	}
	return out
}

func (a agentsHere) connect(nodeID, state, suiteID string) {
	a[nodeID] = AgentWork{NodeID: nodeID, State: state, SuiteID: suiteID}
}

// fleet is a WhyStore of nodes in memory, for comparing Why's answers
// over many fleets; each change of nodes is a new revision.
type fleet struct {
	nodes []store.Node // by name, then ID
	rev   int64
}

func (f *fleet) ListNodes(context.Context, store.NodeFilter) ([]store.Node, error) {
	return slices.Clone(f.nodes), nil
}

func (f *fleet) NodesRevision(context.Context) (int64, error) { return f.rev, nil }

func (f *fleet) GetNode(_ context.Context, id string) (store.Node, error) {
	for _, n := range f.nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return store.Node{}, errdefs.ErrNotFound
}

func (f *fleet) GetSuite(context.Context, string) (store.Suite, error) {
	return store.Suite{}, errdefs.ErrNotFound
}

func (f *fleet) SuiteProblems(_ context.Context, suiteID, _ string) ([]store.SuiteProblem, error) {
	return []store.SuiteProblem{{SuiteProblem: api.SuiteProblem{NodeID: "n0", Stage: api.StagePrepare, Reason: "exit status 3"}}}, nil
}

// walkDiagnose is diagnose as it was before Why kept the nodes: read
// every node and ask the sessions about each. Why's answers must stay
// word for word what it said.
func walkDiagnose(ctx context.Context, w *Why, su store.Suite, new bool) (string, error) {
	nodes, err := w.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return "", fmt.Errorf("list nodes to explain suite %s: %w", su.Spec.Name, err)
	}
	if len(nodes) == 0 {
		return "no node is registered yet: start an agent with a join token (nodemgr join-token create)", nil
	}
	var online, placedOffline, placed, fit []*store.Node
	for i := range nodes {
		n := &nodes[i]
		_, cur, connected := w.sessions.Work(n.ID)
		if connected {
			if cur == su.ID {
				return "", nil // it runs there
			}
			online = append(online, n)
		}
		if Placement(su, *n) != nil {
			continue
		}
		if !connected {
			placedOffline = append(placedOffline, n)
			continue
		}
		placed = append(placed, n)
		if m := w.WhyNot(su, *n); m == nil || m.kind == misfitPrepare {
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
	return w.busyOrFailed(ctx, su, fit)
}

// TestWhySaysWhatTheWalkSaid compares Why's answers with those of a walk
// of every node (walkDiagnose) over random fleets and suites: nodes with
// and without tags, groups, cores and agents, duplicate names, sessions
// of nodes since deleted, suites with tags, groups, assignments (some to
// unknown nodes), stops by hand and core bindings, prepare failures.
func TestWhySaysWhatTheWalkSaid(t *testing.T) {
	rnd := rand.New(rand.NewPCG(30, 1))
	pick := func(from ...string) []string {
		var out []string
		for _, s := range from {
			if rnd.IntN(3) == 0 {
				out = append(out, s)
			}
		}
		return out
	}
	kinds := map[string]int{}
	for round := range 3000 {
		f := &fleet{rev: int64(round)}
		agents := agentsHere{}
		prepare := &PrepareFailures{}
		su := store.Suite{ID: "s-x", Spec: api.SuiteSpec{Name: "x", Tags: pick("gpu", "ssd"), WorkerSchedule: api.WorkerSchedule{WorkerCount: 1}},
			State: api.SuiteOpen, Counts: api.TaskCounts{Ready: 1}}
		if rnd.IntN(3) == 0 {
			su.Spec.Group = []string{"ml", "web"}[rnd.IntN(2)]
		}
		if rnd.IntN(3) == 0 {
			su.Spec.WorkerSchedule.CPUBinding = &api.CPUBinding{Cores: [][]int{{0}, {0, 7}, {3}}[rnd.IntN(3)]}
		}
		var ids []string
		for i := range rnd.IntN(12) {
			id := fmt.Sprintf("n%d", i)
			ids = append(ids, id)
			n := store.Node{ID: id, Name: fmt.Sprintf("node-%d", rnd.IntN(8)), Tags: pick("gpu", "ssd", "gpu"), Groups: pick("ml", "web"),
				Hardware: api.Hardware{Cores: []int{0, 1, 2, 8}[rnd.IntN(4)]}}
			if rnd.IntN(5) == 0 {
				n.Name = "" // named by ID
			}
			f.nodes = append(f.nodes, n)
			if rnd.IntN(2) == 0 {
				switch rnd.IntN(6) {
				case 0:
					agents.connect(id, api.AgentExecuting, su.ID)
				case 1, 2:
					agents.connect(id, api.AgentExecuting, "s-other")
				case 3:
					agents.connect(id, api.AgentIdle, "s-other") // done with it, asking again
				default:
					agents.connect(id, api.AgentIdle, "")
				}
			}
			if rnd.IntN(4) == 0 {
				prepare.Note(su.ID, id)
			}
		}
		if rnd.IntN(5) == 0 {
			agents.connect("ghost", api.AgentIdle, "") // its node was deleted
		}
		slices.SortFunc(f.nodes, func(a, b store.Node) int { return strings.Compare(a.Name+"\x00"+a.ID, b.Name+"\x00"+b.ID) })
		if rnd.IntN(4) == 0 {
			su.AssignedNodes = append(pick(ids...), pick("unknown")...)
		}
		if rnd.IntN(4) == 0 {
			su.StoppedNodes = pick(ids...)
		}
		w := NewWhy(f, agents, prepare, func() Pools { return nil })
		for _, new := range []bool{false, true} {
			want, err := walkDiagnose(t.Context(), w, su, new)
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.diagnose(t.Context(), su, new)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("round %d: diagnose(new %v) = %q, want %q\nsuite %+v, assigned %v, stopped %v\nnodes %+v\nagents %+v",
					round, new, got, want, su.Spec, su.AssignedNodes, su.StoppedNodes, f.nodes, agents)
			}
			if want == "" {
				kinds[""]++
			}
			for _, k := range answers {
				if want != "" && strings.Contains(want, k) {
					kinds[k]++
				}
			}
		}
	}
	// Every kind of answer came up, and often enough to mean something.
	for _, k := range append(answers, "") {
		if kinds[k] < 5 {
			t.Errorf("answers with %q: %d, want at least 5", k, kinds[k])
		}
	}
}

// answers are parts of each kind of waiting reason.
var answers = []string{"no node is registered yet", "no node is online", "no online node has tags", "no online node in group",
	"no online node is in group", "none of its assigned nodes", "it was stopped by hand on every online node",
	"no node can run it", "prepare failed on all", "are busy with other suites",
	"(offline ones that would: ", " more)", "; stopped by hand on"}

// TestWhySeesNodeChanges: Why keeps the nodes between answers, and a node
// added, retagged, renamed, resized, regrouped or deleted after an answer
// changes the next one. On PostgreSQL the writes go through another
// store on the same database, as another replica's would.
func TestWhySeesNodeChanges(t *testing.T) {
	stores := map[string]func(t *testing.T) (writer, reader store.Store){
		"sqlite": func(t *testing.T) (store.Store, store.Store) {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, s
		},
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.NewDatabase(t)
			open := func() store.Store {
				s, err := postgres.Open(t.Context(), url, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			return open(), open()
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			writer, reader := stores[name](t)
			testWhySeesNodeChanges(t, writer, reader)
		})
	}
}

func testWhySeesNodeChanges(t *testing.T, writer, reader store.Store) {
	ctx := t.Context()
	create := func(id string, tags []string, cores int) func() error {
		return func() error {
			_, err := writer.CreateNode(ctx, store.Node{ID: id, Name: id, MachineID: "m-" + id, DataDir: "/d", Tags: tags,
				Hardware: api.Hardware{Cores: cores}})
			return err
		}
	}
	update := func(id string, fn func(*store.Node)) func() error {
		return func() error {
			_, err := writer.UpdateNode(ctx, id, func(n *store.Node) error { fn(n); return nil })
			return err
		}
	}
	agents := agentsHere{}
	agents.connect("n1", api.AgentIdle, "")
	counted := &listCounter{Store: reader}
	w := NewWhy(counted, agents, &PrepareFailures{}, func() Pools { return nil })
	suites := []store.Suite{
		{ID: "s-gpu", Spec: api.SuiteSpec{Name: "gpu", Tags: []string{"gpu"}}},
		{ID: "s-wide", Spec: api.SuiteSpec{Name: "wide", WorkerSchedule: api.WorkerSchedule{CPUBinding: &api.CPUBinding{Cores: []int{0, 7}}}}},
		{ID: "s-ml", Spec: api.SuiteSpec{Name: "ml", Group: "ml"}},
	}
	steps := []struct {
		name  string
		write func() error
		want  [3]string // for suites gpu, wide, ml
	}{
		{"none registered", nil, [3]string{
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)",
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)",
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)"}},
		{"n1 joins", create("n1", nil, 2), [3]string{
			"no online node has tags [gpu]",
			"no node can run it: cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2",
			"no online node is in group ml"}},
		{"n2 joins offline with gpu", create("n2", []string{"gpu"}, 8), [3]string{
			"no online node has tags [gpu] (offline ones that would: n2)",
			"no node can run it: cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2",
			"no online node is in group ml"}},
		{"n2 renamed", update("n2", func(n *store.Node) { n.Name = "big" }), [3]string{
			"no online node has tags [gpu] (offline ones that would: big)",
			"no node can run it: cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2",
			"no online node is in group ml"}},
		{"n1 tagged gpu", update("n1", func(n *store.Node) { n.Tags = []string{"gpu"} }), [3]string{
			"",
			"no node can run it: cpu_binding cores [0,7] need 8 cores; the largest online node it may use has 2",
			"no online node is in group ml"}},
		{"n1 untagged, grown to 8 cores", update("n1", func(n *store.Node) { n.Tags, n.Hardware.Cores = nil, 8 }), [3]string{
			"no online node has tags [gpu] (offline ones that would: big)",
			"",
			"no online node is in group ml"}},
		{"n1 into group ml", update("n1", func(n *store.Node) { n.Groups = []string{"ml"} }), [3]string{
			"no online node has tags [gpu] (offline ones that would: big)",
			"",
			""}},
		{"n1 beats, suspect, back", func() error {
			if err := writer.RecordHeartbeats(ctx, []store.Heartbeat{{NodeID: "n1", At: time.Now(), AgentState: api.AgentIdle}}); err != nil {
				return err
			}
			if _, err := writer.SetNodeStatus(ctx, "n1", api.StatusSuspect, "late"); err != nil {
				return err
			}
			return update("n1", func(n *store.Node) { n.Status, n.LastHeartbeat = api.StatusOnline, time.Now() })()
		}, [3]string{
			"no online node has tags [gpu] (offline ones that would: big)",
			"",
			""}},
		{"n2 deleted", func() error { return writer.DeleteNode(ctx, "n2") }, [3]string{
			"no online node has tags [gpu]",
			"",
			""}},
		{"n1 deleted", func() error { return writer.DeleteNode(ctx, "n1") }, [3]string{
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)",
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)",
			"no node is registered yet: start an agent with a join token (nodemgr join-token create)"}},
	}
	for _, step := range steps {
		if step.write != nil {
			if err := step.write(); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		before := counted.lists.Load()
		for i, su := range suites {
			su.State, su.Counts.Ready = api.SuiteOpen, 1
			got, err := w.WaitingReason(ctx, su)
			if err != nil {
				t.Fatalf("%s: WaitingReason(%s) = %v", step.name, su.Spec.Name, err)
			}
			if got != step.want[i] {
				t.Errorf("after %s: WaitingReason(%s) = %q, want %q", step.name, su.Spec.Name, got, step.want[i])
			}
		}
		// The nodes are read once after a change that describes them
		// anew, and not at all after one that does not (liveness).
		want := int64(1)
		if strings.HasPrefix(step.name, "n1 beats") {
			want = 0
		}
		if got := counted.lists.Load() - before; got != want {
			t.Errorf("after %s: %d answers read the nodes %d times, want %d", step.name, len(suites), got, want)
		}
	}
}

// listCounter is a store that counts the calls of ListNodes.
type listCounter struct {
	store.Store
	lists atomic.Int64
}

func (c *listCounter) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	c.lists.Add(1)
	return c.Store.ListNodes(ctx, f)
}

// gatedFleet is a fleet whose ListNodes waits for release, counting calls.
type gatedFleet struct {
	*fleet
	release chan struct{}
	revs    atomic.Int64 // NodesRevision calls
	lists   atomic.Int64 // ListNodes calls
}

func (g *gatedFleet) NodesRevision(ctx context.Context) (int64, error) {
	g.revs.Add(1)
	return g.fleet.NodesRevision(ctx)
}

func (g *gatedFleet) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	g.lists.Add(1)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.fleet.ListNodes(ctx, f)
}

// TestWhyReadsChangedNodesOnce: answers that find the same new revision at
// once share one read of the nodes; one that gives up waiting (its client
// left) gets its context's error, and neither stops the read the others
// wait for.
func TestWhyReadsChangedNodesOnce(t *testing.T) {
	g := &gatedFleet{fleet: &fleet{nodes: []store.Node{{ID: "n1", Name: "n1"}}, rev: 7}, release: make(chan struct{})}
	w := NewWhy(g, agentsHere{}, &PrepareFailures{}, func() Pools { return nil })
	su := store.Suite{ID: "s-x", Spec: api.SuiteSpec{Name: "x"}, State: api.SuiteOpen, Counts: api.TaskCounts{Ready: 1}}
	const want = "no node is online (1 registered, none connected)"

	// The first caller starts the read, then leaves.
	first, leave := context.WithCancel(t.Context())
	left := make(chan error)
	go func() {
		_, err := w.WaitingReason(first, su)
		left <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); g.lists.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first caller did not read the nodes within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	const callers = 8
	got := make(chan string, callers)
	for range callers {
		go func() {
			why, err := w.WaitingReason(t.Context(), su)
			if err != nil {
				why = err.Error()
			}
			got <- why
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); g.revs.Load() < callers+1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers read the revision within 10s", g.revs.Load(), callers+1)
		}
		time.Sleep(time.Millisecond)
	}
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("WaitingReason of a caller that left = %v, want %v", err, context.Canceled)
	}
	close(g.release)
	for range callers {
		if why := <-got; why != want {
			t.Errorf("WaitingReason = %q, want %q", why, want)
		}
	}
	if n := g.lists.Load(); n != 1 {
		t.Errorf("%d answers at once read the nodes %d times, want once", callers+1, n)
	}
}
