package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// newNode is a minimal node whose name is its ID, on a machine of its own.
func newNode(id string) store.Node {
	return store.Node{ID: id, Name: id, MachineID: "machine-" + id, DataDir: "/var/lib/nodemgr"}
}

func mustCreateNode(t testing.TB, s store.Store, n store.Node) store.Node {
	t.Helper()
	got, err := s.CreateNode(t.Context(), n)
	if err != nil {
		t.Fatalf("CreateNode(%q) = %v, want nil", n.ID, err)
	}
	return got
}

func mustGetNode(t *testing.T, s store.Store, id string) store.Node {
	t.Helper()
	n, err := s.GetNode(t.Context(), id)
	if err != nil {
		t.Fatalf("GetNode(%q) = %v, want nil", id, err)
	}
	return n
}

func ids(nodes []store.Node) []string {
	return idsOf(nodes, func(n store.Node) string { return n.ID })
}

func testCreateNodeCreates(t *testing.T, s store.Store) {
	in := store.Node{
		ID:        "n1",
		Name:      "alpha",
		MachineID: "m1",
		DataDir:   "/var/lib/a",
		Tags:      []string{"gpu", "fast"},
		Labels:    map[string]string{"zone": "a"},
		Groups:    []string{"ml"},
		Hardware: api.Hardware{
			Hostname: "alpha", OS: "linux", Arch: "amd64", Kernel: "6.8", CPUModel: "EPYC",
			Cores: 64, MemoryBytes: 1 << 40, DiskBytes: 1 << 42,
			GPUs: []api.GPU{{Index: 0, UUID: "GPU-1", Name: "H100", MemoryBytes: 80 << 30, Driver: "550"}},
		},
		Status:        api.StatusOnline,
		StatusReason:  "registered",
		AgentState:    api.AgentIdle,
		AgentVersion:  "1.2.3",
		LastHeartbeat: t0,
	}
	got := mustCreateNode(t, s, in)
	if diff := cmp.Diff(in, got, ignoreStamps); diff != "" {
		t.Errorf("CreateNode(%q) mismatch (-want +got):\n%s", in.ID, diff)
	}
	if !recent(got.RegisteredAt) || !recent(got.UpdatedAt) {
		t.Errorf("CreateNode(%q) registered at %v, updated at %v, want both about now", in.ID, got.RegisteredAt, got.UpdatedAt)
	}
	if diff := cmp.Diff(got, mustGetNode(t, s, in.ID)); diff != "" {
		t.Errorf("GetNode(%q) differs from what CreateNode returned (-create +get):\n%s", in.ID, diff)
	}

	// A registration time the caller gives is kept.
	n2 := newNode("n2")
	n2.RegisteredAt = t0
	if got := mustCreateNode(t, s, n2); !got.RegisteredAt.Equal(t0) {
		t.Errorf("CreateNode(%q).RegisteredAt = %v, want %v", n2.ID, got.RegisteredAt, t0)
	}

	if _, err := s.CreateNode(t.Context(), store.Node{MachineID: "m9", DataDir: "/d"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CreateNode(%q) = %v, want %v", "", err, errdefs.ErrInvalid)
	}
}

// testCreateNodeRefusesSameMachine: a second registration from the same
// machine and data dir never adopts the node there (a join token must not
// take over a node), and the node is left as it was.
func testCreateNodeRefusesSameMachine(t *testing.T, s store.Store) {
	first := mustCreateNode(t, s, store.Node{
		ID: "n1", Name: "old", MachineID: "m1", DataDir: "/d",
		Tags: []string{"a"}, Groups: []string{"g1"},
	})
	_, err := s.CreateNode(t.Context(), store.Node{
		ID: "other", Name: "new", MachineID: "m1", DataDir: "/d", Groups: []string{"g2"},
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("CreateNode(%q) on the same machine and data dir = %v, want %v", "other", err, errdefs.ErrConflict)
	}
	if !strings.Contains(err.Error(), "n1") {
		t.Errorf("CreateNode(%q) = %q, want the existing node's ID in the error", "other", err)
	}
	if diff := cmp.Diff(first, mustGetNode(t, s, "n1")); diff != "" {
		t.Errorf("GetNode(%q) changed by a refused CreateNode (-before +after):\n%s", "n1", diff)
	}
	if _, err := s.GetNode(t.Context(), "other"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode(%q) = %v, want %v", "other", err, errdefs.ErrNotFound)
	}

	// Another data dir on the same machine is another node.
	other := mustCreateNode(t, s, store.Node{ID: "n2", MachineID: "m1", DataDir: "/e"})
	if other.ID != "n2" {
		t.Errorf("CreateNode(%q) on a new data dir: ID = %q, want %q", "n2", other.ID, "n2")
	}
}

func testCreateNodeIDConflict(t *testing.T, s store.Store) {
	mustCreateNode(t, s, store.Node{ID: "n1", MachineID: "m1", DataDir: "/d"})
	_, err := s.CreateNode(t.Context(), store.Node{ID: "n1", MachineID: "m2", DataDir: "/d"})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreateNode(%q) on another machine = %v, want %v", "n1", err, errdefs.ErrConflict)
	}
	if got := mustGetNode(t, s, "n1"); got.MachineID != "m1" {
		t.Errorf("GetNode(%q).MachineID = %q, want %q", "n1", got.MachineID, "m1")
	}
}

func testCreateNodeEmptyReadsBackEmpty(t *testing.T, s store.Store) {
	upserted := mustCreateNode(t, s, newNode("n1"))
	listed, err := s.ListNodes(t.Context(), store.NodeFilter{})
	if err != nil || len(listed) != 1 {
		t.Fatalf("ListNodes() = %v, %v, want 1 node", listed, err)
	}
	for _, c := range []struct {
		how string
		n   store.Node
	}{
		{"CreateNode", upserted},
		{"GetNode", mustGetNode(t, s, "n1")},
		{"ListNodes", listed[0]},
	} {
		if c.n.Tags == nil || len(c.n.Tags) != 0 {
			t.Errorf("%s(%q).Tags = %#v, want empty, not nil", c.how, "n1", c.n.Tags)
		}
		if c.n.Labels == nil || len(c.n.Labels) != 0 {
			t.Errorf("%s(%q).Labels = %#v, want empty, not nil", c.how, "n1", c.n.Labels)
		}
		if c.n.Groups == nil || len(c.n.Groups) != 0 {
			t.Errorf("%s(%q).Groups = %#v, want empty, not nil", c.how, "n1", c.n.Groups)
		}
		if c.n.Hardware.GPUs == nil || len(c.n.Hardware.GPUs) != 0 {
			t.Errorf("%s(%q).Hardware.GPUs = %#v, want empty, not nil", c.how, "n1", c.n.Hardware.GPUs)
		}
		if !c.n.LastHeartbeat.IsZero() {
			t.Errorf("%s(%q).LastHeartbeat = %v, want zero", c.how, "n1", c.n.LastHeartbeat)
		}
	}
}

func testGetNodeNotFound(t *testing.T, s store.Store) {
	if _, err := s.GetNode(t.Context(), "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
}

func testListNodes(t *testing.T, s store.Store) {
	if got, err := s.ListNodes(t.Context(), store.NodeFilter{}); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListNodes() on an empty store = %#v, %v, want empty, not nil", got, err)
	}
	// Names sort in another order than IDs: lists go by name, then ID.
	for _, n := range []store.Node{
		{ID: "n1", Name: "d", Status: api.StatusSuspect},
		{ID: "n2", Name: "c", Status: api.StatusOffline, Groups: []string{"ml"}},
		{ID: "n3", Name: "b", Status: api.StatusOnline, Groups: []string{"db"}},
		{ID: "n4", Name: "a", Status: api.StatusOnline, Groups: []string{"ml", "web"}},
		{ID: "n0", Name: "d", Status: api.StatusOnline},
	} {
		n.MachineID, n.DataDir = "m-"+n.ID, "/d"
		mustCreateNode(t, s, n)
	}
	tests := []struct {
		name   string
		filter store.NodeFilter
		want   []string
	}{
		{"all", store.NodeFilter{}, []string{"n4", "n3", "n2", "n0", "n1"}},
		{"status", store.NodeFilter{Status: api.StatusOnline}, []string{"n4", "n3", "n0"}},
		{"group", store.NodeFilter{Groups: []string{"ml"}}, []string{"n4", "n2"}},
		{"any of groups", store.NodeFilter{Groups: []string{"db", "web"}}, []string{"n4", "n3"}},
		{"status and group", store.NodeFilter{Status: api.StatusOffline, Groups: []string{"ml"}}, []string{"n2"}},
		{"no such group", store.NodeFilter{Groups: []string{"nope"}}, []string{}},
		{"no such status", store.NodeFilter{Status: "gone"}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListNodes(t.Context(), tc.filter)
			checkListed(t, fmt.Sprintf("ListNodes(%+v)", tc.filter), got, err, ids, tc.want)
		})
	}
}

func testUpdateNode(t *testing.T, s store.Store) {
	before := mustCreateNode(t, s, newNode("n1"))
	got, err := s.UpdateNode(t.Context(), "n1", func(n *store.Node) error {
		n.Name = "renamed"
		n.Tags = append(n.Tags, "x")
		n.Labels["zone"] = "b"
		n.Groups = []string{"ml"}
		n.Status = api.StatusOffline
		n.StatusReason = "drained"
		n.LastHeartbeat = t0
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateNode(%q) = %v, want nil", "n1", err)
	}
	want := before
	want.Name = "renamed"
	want.Tags = []string{"x"}
	want.Labels = map[string]string{"zone": "b"}
	want.Groups = []string{"ml"}
	want.Status = api.StatusOffline
	want.StatusReason = "drained"
	want.LastHeartbeat = t0
	if diff := cmp.Diff(want, got, ignoreStamps); diff != "" {
		t.Errorf("UpdateNode(%q) mismatch (-want +got):\n%s", "n1", diff)
	}
	if !got.RegisteredAt.Equal(before.RegisteredAt) || got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("UpdateNode(%q): registered %v, updated %v; want registered %v, updated at or after %v",
			"n1", got.RegisteredAt, got.UpdatedAt, before.RegisteredAt, before.UpdatedAt)
	}
	if diff := cmp.Diff(got, mustGetNode(t, s, "n1")); diff != "" {
		t.Errorf("GetNode(%q) differs from what UpdateNode returned (-update +get):\n%s", "n1", diff)
	}

	called := false
	_, err = s.UpdateNode(t.Context(), "ghost", func(*store.Node) error { called = true; return nil })
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("UpdateNode(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
	if called {
		t.Errorf("UpdateNode(%q) called fn for a missing node", "ghost")
	}
}

func testUpdateNodeAborts(t *testing.T, s store.Store) {
	before := mustCreateNode(t, s, newNode("n1"))
	errBoom := errors.New("boom")
	_, err := s.UpdateNode(t.Context(), "n1", func(n *store.Node) error {
		n.Name = "changed"
		n.Status = api.StatusOffline
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Errorf("UpdateNode(%q) with a failing fn = %v, want %v", "n1", err, errBoom)
	}
	if diff := cmp.Diff(before, mustGetNode(t, s, "n1")); diff != "" {
		t.Errorf("GetNode(%q) after an aborted update changed (-before +after):\n%s", "n1", diff)
	}

	_, err = s.UpdateNode(t.Context(), "n1", func(n *store.Node) error {
		n.ID = "n2"
		return nil
	})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("UpdateNode(%q) changing the ID = %v, want %v", "n1", err, errdefs.ErrInvalid)
	}
	if diff := cmp.Diff(before, mustGetNode(t, s, "n1")); diff != "" {
		t.Errorf("GetNode(%q) after a refused update changed (-before +after):\n%s", "n1", diff)
	}
}

func testUpdateNodeConflict(t *testing.T, s store.Store) {
	first := mustCreateNode(t, s, newNode("n1"))
	before := mustCreateNode(t, s, newNode("n2"))
	_, err := s.UpdateNode(t.Context(), "n2", func(n *store.Node) error {
		n.MachineID, n.DataDir = first.MachineID, first.DataDir
		return nil
	})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("UpdateNode(%q) onto another node's machine and data dir = %v, want %v", "n2", err, errdefs.ErrConflict)
	}
	if diff := cmp.Diff(before, mustGetNode(t, s, "n2")); diff != "" {
		t.Errorf("GetNode(%q) after a conflicting update changed (-before +after):\n%s", "n2", diff)
	}
}

func testRecordHeartbeats(t *testing.T, s store.Store) {
	for _, n := range []store.Node{
		{ID: "a", Status: api.StatusOffline, StatusReason: "shut down", AgentState: api.AgentShuttingDown},
		{ID: "b", Status: api.StatusSuspect, StatusReason: "late"},
		{ID: "c", Status: api.StatusOffline, StatusReason: "gone"},
	} {
		n.Name, n.MachineID, n.DataDir = n.ID, "m-"+n.ID, "/d"
		mustCreateNode(t, s, n)
	}
	cBefore := mustGetNode(t, s, "c")
	// b's beat comes after it became suspect.
	bAt := mustGetNode(t, s, "b").UpdatedAt.Add(2 * time.Second)

	if err := s.RecordHeartbeats(t.Context(), nil); err != nil {
		t.Errorf("RecordHeartbeats(nil) = %v, want nil", err)
	}
	batch := []store.Heartbeat{
		{NodeID: "a", At: t0.Add(time.Second), AgentState: api.AgentExecuting},
		{NodeID: "ghost", At: t0, AgentState: api.AgentIdle},
		{NodeID: "b", At: bAt, AgentState: api.AgentIdle},
	}
	if err := s.RecordHeartbeats(t.Context(), batch); err != nil {
		t.Fatalf("RecordHeartbeats(%d with an unknown ID) = %v, want nil", len(batch), err)
	}

	checkStatus := func(id string, at time.Time, state, status, reason string) {
		t.Helper()
		n := mustGetNode(t, s, id)
		if n.Status != status || n.StatusReason != reason || n.AgentState != state || !n.LastHeartbeat.Equal(at) {
			t.Errorf("GetNode(%q) = status %q, reason %q, agent state %q, last heartbeat %v; want %q, %q, %q, %v",
				id, n.Status, n.StatusReason, n.AgentState, n.LastHeartbeat, status, reason, state, at)
		}
	}
	// An offline node keeps its status, and has no agent state: a late
	// batch must not revive it, nor make it look busy.
	check := func(id string, at time.Time) {
		t.Helper()
		checkStatus(id, at, api.AgentShuttingDown, api.StatusOffline, "shut down")
	}
	check("a", t0.Add(time.Second))
	// A suspect node is back online.
	checkStatus("b", bAt, api.AgentIdle, api.StatusOnline, "")
	if diff := cmp.Diff(cBefore, mustGetNode(t, s, "c")); diff != "" {
		t.Errorf("GetNode(%q) changed without a heartbeat (-before +after):\n%s", "c", diff)
	}

	// A heartbeat older than the last one (a batch that arrived late)
	// does not move the node back in time.
	if err := s.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: "a", At: t0, AgentState: api.AgentCleanup}}); err != nil {
		t.Fatalf("RecordHeartbeats(old) = %v, want nil", err)
	}
	check("a", t0.Add(time.Second))

	if err := s.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: "a", At: t0.Add(time.Minute), AgentState: api.AgentCleanup}}); err != nil {
		t.Fatalf("RecordHeartbeats(new) = %v, want nil", err)
	}
	check("a", t0.Add(time.Minute))

	// A beat from before a node became suspect (a batch written late)
	// leaves it suspect; a later one brings it back.
	mustCreateNode(t, s, store.Node{ID: "d", Name: "d", MachineID: "m-d", DataDir: "/d", Status: api.StatusOnline})
	if _, err := s.SetNodeStatus(t.Context(), "d", api.StatusSuspect, "connection lost"); err != nil {
		t.Fatal(err)
	}
	suspectAt := mustGetNode(t, s, "d").UpdatedAt
	if err := s.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: "d", At: suspectAt.Add(-time.Millisecond), AgentState: api.AgentIdle}}); err != nil {
		t.Fatal(err)
	}
	if n := mustGetNode(t, s, "d"); n.Status != api.StatusSuspect || n.StatusReason != "connection lost" {
		t.Errorf("GetNode(d) after a beat older than its suspicion = %s (%q), want still suspect", n.Status, n.StatusReason)
	}
	if err := s.RecordHeartbeats(t.Context(), []store.Heartbeat{{NodeID: "d", At: suspectAt.Add(time.Second), AgentState: api.AgentIdle}}); err != nil {
		t.Fatal(err)
	}
	if n := mustGetNode(t, s, "d"); n.Status != api.StatusOnline {
		t.Errorf("GetNode(d) after a beat newer than its suspicion = %s, want online", n.Status)
	}

	// A node going offline forgets what its agent was doing.
	if _, err := s.SetNodeStatus(t.Context(), "b", api.StatusOffline, "gone"); err != nil {
		t.Fatal(err)
	}
	if n := mustGetNode(t, s, "b"); n.AgentState != "" || n.CurrentSuite != "" {
		t.Errorf("GetNode(b) offline = agent state %q, suite %q; want none", n.AgentState, n.CurrentSuite)
	}
}

func testRecordHeartbeatsLargeBatch(t *testing.T, s store.Store) {
	const nodes, rounds = 200, 20
	for i := range nodes {
		mustCreateNode(t, s, newNode(fmt.Sprintf("n%03d", i)))
	}
	var batch []store.Heartbeat
	for r := range rounds {
		for i := range nodes {
			batch = append(batch, store.Heartbeat{
				NodeID:     fmt.Sprintf("n%03d", i),
				At:         t0.Add(time.Duration(r) * time.Second),
				AgentState: fmt.Sprintf("state-%d", r),
			})
		}
	}
	if err := s.RecordHeartbeats(t.Context(), batch); err != nil {
		t.Fatalf("RecordHeartbeats(%d) = %v, want nil", len(batch), err)
	}
	online, err := s.ListNodes(t.Context(), store.NodeFilter{Status: api.StatusOnline})
	if err != nil {
		t.Fatalf("ListNodes(online) = %v", err)
	}
	if len(online) != nodes {
		t.Errorf("ListNodes(online) = %d nodes, want %d", len(online), nodes)
	}
	wantAt := t0.Add((rounds - 1) * time.Second)
	wantState := fmt.Sprintf("state-%d", rounds-1)
	for _, n := range online {
		if !n.LastHeartbeat.Equal(wantAt) || n.AgentState != wantState {
			t.Errorf("node %s: last heartbeat %v, agent state %q; want %v, %q", n.ID, n.LastHeartbeat, n.AgentState, wantAt, wantState)
		}
	}
}

func testSetNodeStatus(t *testing.T, s store.Store) {
	tests := []struct {
		name        string
		from, to    string
		onlyIf      []string
		wantChanged bool
	}{
		{"unconditional", api.StatusOnline, api.StatusOffline, nil, true},
		{"same status", api.StatusOnline, api.StatusOnline, nil, true},
		{"onlyIf matches", api.StatusOnline, api.StatusSuspect, []string{api.StatusOnline}, true},
		{"onlyIf one of several", api.StatusSuspect, api.StatusOffline, []string{api.StatusOnline, api.StatusSuspect}, true},
		{"onlyIf misses", api.StatusOffline, api.StatusSuspect, []string{api.StatusOnline}, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(fmt.Sprintf("n%d", i))
			n.Status, n.StatusReason = tc.from, "initial"
			mustCreateNode(t, s, n)

			changed, err := s.SetNodeStatus(t.Context(), n.ID, tc.to, "because", tc.onlyIf...)
			if err != nil || changed != tc.wantChanged {
				t.Fatalf("SetNodeStatus(%q, %q, onlyIf %q) = %v, %v, want %v, nil", n.ID, tc.to, tc.onlyIf, changed, err, tc.wantChanged)
			}
			want := [2]string{tc.from, "initial"}
			if tc.wantChanged {
				want = [2]string{tc.to, "because"}
			}
			got := mustGetNode(t, s, n.ID)
			if [2]string{got.Status, got.StatusReason} != want {
				t.Errorf("GetNode(%q) status, reason = %q, %q, want %q", n.ID, got.Status, got.StatusReason, want)
			}
		})
	}

	for _, onlyIf := range [][]string{nil, {api.StatusOnline}} {
		if _, err := s.SetNodeStatus(t.Context(), "ghost", api.StatusOffline, "", onlyIf...); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("SetNodeStatus(%q, onlyIf %q) = %v, want %v", "ghost", onlyIf, err, errdefs.ErrNotFound)
		}
	}
}

func testStaleNodes(t *testing.T, s store.Store) {
	// The cutoff is t0. Names are IDs, so lists come in ID order.
	for _, n := range []store.Node{
		{ID: "exact", Status: api.StatusOnline, LastHeartbeat: t0},
		{ID: "fresh", Status: api.StatusOnline, LastHeartbeat: t0.Add(time.Minute)},
		{ID: "never-new", Status: api.StatusOnline, RegisteredAt: t0.Add(time.Minute)},
		{ID: "never-old", Status: api.StatusOnline, RegisteredAt: t0.Add(-time.Hour)},
		{ID: "old", Status: api.StatusOnline, LastHeartbeat: t0.Add(-10 * time.Minute)},
		{ID: "old-offline", Status: api.StatusOffline, LastHeartbeat: t0.Add(-10 * time.Minute)},
		{ID: "old-suspect", Status: api.StatusSuspect, LastHeartbeat: t0.Add(-10 * time.Minute)},
	} {
		n.Name, n.MachineID, n.DataDir = n.ID, "m-"+n.ID, "/d"
		if n.RegisteredAt.IsZero() {
			n.RegisteredAt = t0.Add(-24 * time.Hour)
		}
		mustCreateNode(t, s, n)
	}
	tests := []struct {
		name     string
		statuses []string
		want     []string
	}{
		// A node that never sent a heartbeat counts from its registration.
		{"online", []string{api.StatusOnline}, []string{"never-old", "old"}},
		{"online or suspect", []string{api.StatusOnline, api.StatusSuspect}, []string{"never-old", "old", "old-suspect"}},
		{"any status", nil, []string{"never-old", "old", "old-offline", "old-suspect"}},
		{"offline", []string{api.StatusOffline}, []string{"old-offline"}},
		{"no such status", []string{"gone"}, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.StaleNodes(t.Context(), t0, tc.statuses...)
			checkListed(t, fmt.Sprintf("StaleNodes(%v, %q)", t0, tc.statuses), got, err, ids, tc.want)
		})
	}
}

// The replica a node said hello to is stored with it; the leader lists
// the replicas of live nodes, and a replica's nodes, to find those whose
// server died.
func testNodeReplicas(t *testing.T, s store.Store) {
	ctx := t.Context()
	for id, rep := range map[string]string{"n1": "s1#a", "n2": "s1#a", "n3": "s2#b", "n4": "s3#c", "n5": ""} {
		mustCreateNode(t, s, newNode(id))
		if _, err := s.UpdateNode(ctx, id, func(n *store.Node) error { n.Replica, n.Status = rep, api.StatusOnline; return nil }); err != nil {
			t.Fatalf("UpdateNode(%s): %v", id, err)
		}
	}
	if _, err := s.SetNodeStatus(ctx, "n4", api.StatusOffline, "gone"); err != nil {
		t.Fatal(err)
	}
	if got := mustGetNode(t, s, "n3").Replica; got != "s2#b" {
		t.Errorf("GetNode(n3).Replica = %q, want s2#b", got)
	}
	got, err := s.NodeReplicas(ctx, api.StatusOnline, api.StatusSuspect)
	if err != nil {
		t.Fatalf("NodeReplicas: %v", err)
	}
	if want := []string{"s1#a", "s2#b"}; !slices.Equal(got, want) {
		t.Errorf("NodeReplicas(online, suspect) = %v, want %v: each once, none of offline nodes or of none", got, want)
	}
	nodes, err := s.ListNodes(ctx, store.NodeFilter{Replica: "s1#a"})
	if err != nil {
		t.Fatalf("ListNodes(replica s1#a): %v", err)
	}
	if want := []string{"n1", "n2"}; !slices.Equal(ids(nodes), want) {
		t.Errorf("ListNodes(replica s1#a) = %v, want %v", ids(nodes), want)
	}
}

func testDeleteNode(t *testing.T, s store.Store) {
	for _, id := range []string{"n1", "n2"} {
		mustCreateNode(t, s, newNode(id))
		mustEnqueue(t, s, id, "ping")
		mustCreateToken(t, s, nodeToken("cred-"+id, id))
	}

	if err := s.DeleteNode(t.Context(), "n1"); err != nil {
		t.Fatalf("DeleteNode(%q) = %v, want nil", "n1", err)
	}
	if _, err := s.GetNode(t.Context(), "n1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetNode(%q) after delete = %v, want %v", "n1", err, errdefs.ErrNotFound)
	}
	if _, err := s.Pending(t.Context(), "n1", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pending(%q) after delete = %v, want %v", "n1", err, errdefs.ErrNotFound)
	}
	if _, err := s.TokenByHash(t.Context(), hash("cred-n1")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TokenByHash(cred-n1) after delete = %v, want %v", err, errdefs.ErrNotFound)
	}
	if got, err := s.ListTokens(t.Context(), store.TokenFilter{NodeID: "n1"}); err != nil || len(got) != 0 {
		t.Errorf("ListTokens(node n1) after delete = %d tokens, %v, want none", len(got), err)
	}
	if err := s.DeleteNode(t.Context(), "n1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteNode(%q) again = %v, want %v", "n1", err, errdefs.ErrNotFound)
	}

	// The other node keeps what is its own.
	mustGetNode(t, s, "n2")
	if got, err := s.Pending(t.Context(), "n2", 0); err != nil || len(got) != 1 {
		t.Errorf("Pending(%q) = %d notifications, %v, want 1", "n2", len(got), err)
	}
	if _, err := s.TokenByHash(t.Context(), hash("cred-n2")); err != nil {
		t.Errorf("TokenByHash(cred-n2) = %v, want nil", err)
	}
}

// testNodesRevision: the revision moves with every write that adds,
// removes or redescribes a node, and with no other: a server keeps the
// nodes' names, tags, groups and hardware while it reads the same one.
func testNodesRevision(t *testing.T, s store.Store) {
	ctx := t.Context()
	last, err := s.NodesRevision(ctx)
	if err != nil {
		t.Fatalf("NodesRevision() of a new store = %v, want nil", err)
	}
	update := func(fn func(*store.Node)) func() error {
		return func() error {
			_, err := s.UpdateNode(ctx, "n1", func(n *store.Node) error { fn(n); return nil })
			return err
		}
	}
	steps := []struct {
		name  string
		write func() error
		moves bool
	}{
		{"create", func() error { _, err := s.CreateNode(ctx, newNode("n1")); return err }, true},
		{"create another", func() error { _, err := s.CreateNode(ctx, newNode("n2")); return err }, true},
		{"heartbeats", func() error {
			return s.RecordHeartbeats(ctx, []store.Heartbeat{{NodeID: "n1", At: t0, AgentState: api.AgentExecuting, SuiteID: "s1"}})
		}, false},
		{"status", func() error { _, err := s.SetNodeStatus(ctx, "n1", api.StatusSuspect, "late"); return err }, false},
		{"offline", func() error { _, err := s.SetNodeStatus(ctx, "n1", api.StatusOffline, "gone"); return err }, false},
		{"hello", update(func(n *store.Node) {
			n.Status, n.AgentState, n.AgentVersion, n.CurrentSuite = api.StatusOnline, api.AgentIdle, "v2", ""
			n.LastHeartbeat, n.Replica = t0.Add(time.Minute), "r1/x"
		}), false},
		{"nothing", update(func(*store.Node) {}), false},
		{"name", update(func(n *store.Node) { n.Name = "renamed" }), true},
		{"tags", update(func(n *store.Node) { n.Tags = []string{"gpu"} }), true},
		{"labels", update(func(n *store.Node) { n.Labels = map[string]string{"zone": "a"} }), true},
		{"groups", update(func(n *store.Node) { n.Groups = []string{"ml"} }), true},
		{"cores", update(func(n *store.Node) { n.Hardware.Cores = 16 }), true},
		{"refused create", func() error {
			if _, err := s.CreateNode(ctx, newNode("n1")); !errors.Is(err, errdefs.ErrConflict) {
				return fmt.Errorf("CreateNode(%q) again = %v, want %v", "n1", err, errdefs.ErrConflict)
			}
			return nil
		}, false},
		{"delete", func() error { return s.DeleteNode(ctx, "n2") }, true},
	}
	for _, step := range steps {
		if err := step.write(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		rev, err := s.NodesRevision(ctx)
		if err != nil {
			t.Fatalf("NodesRevision() after %s = %v, want nil", step.name, err)
		}
		if moved := rev != last; moved != step.moves {
			t.Errorf("NodesRevision() after %s = %d, was %d: moved %v, want %v", step.name, rev, last, moved, step.moves)
		}
		last = rev
	}
}

// testHeldTasks: the tasks the agents hold unstarted reach the store with
// their heartbeats and are summed by suite, over the online nodes that
// work on it; an offline node's count is not, and a beat keeps it.
func testHeldTasks(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"n1", "n2", "n3"} {
		n := newNode(id)
		n.Status = api.StatusOnline
		mustCreateNode(t, s, n)
	}
	beat := func(at time.Time, hbs ...store.Heartbeat) {
		t.Helper()
		for i := range hbs {
			hbs[i].At, hbs[i].AgentState = at, api.AgentExecuting
		}
		if err := s.RecordHeartbeats(ctx, hbs); err != nil {
			t.Fatalf("RecordHeartbeats() = %v", err)
		}
	}
	want := func(when string, ids []string, want map[string]int) {
		t.Helper()
		got, err := s.HeldTasks(ctx, ids)
		if err != nil {
			t.Fatalf("HeldTasks(%v) %s = %v", ids, when, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("HeldTasks(%v) %s (-want +got):\n%s", ids, when, diff)
		}
	}
	beat(t0.Add(time.Minute), store.Heartbeat{NodeID: "n1", SuiteID: "s1", Held: 5},
		store.Heartbeat{NodeID: "n2", SuiteID: "s1", Held: 3}, store.Heartbeat{NodeID: "n3", SuiteID: "s2", Held: 2})
	want("after the beats", []string{"s1", "s2", "s3"}, map[string]int{"s1": 8, "s2": 2})
	want("of one suite", []string{"s2"}, map[string]int{"s2": 2})
	want("of none", nil, map[string]int{})

	if _, err := s.SetNodeStatus(ctx, "n2", api.StatusOffline, "lost"); err != nil {
		t.Fatal(err)
	}
	beat(t0.Add(2*time.Minute), store.Heartbeat{NodeID: "n1", SuiteID: "s1", Held: 1})
	want("with n2 offline and n1 holding 1", []string{"s1"}, map[string]int{"s1": 1})
	beat(t0.Add(3*time.Minute), store.Heartbeat{NodeID: "n1", SuiteID: ""})
	want("with n1 idle", []string{"s1"}, map[string]int{})
}
