package overlay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// agents is a server's sessions as the overlay sees them: who is
// connected, and what each was sent.
type agents struct {
	mu    sync.Mutex
	local []string
	got   map[string][]api.OverlayState
	fail  map[string]bool
}

func (a *agents) Local() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.local)
}

func (a *agents) Send(_ context.Context, id string, st api.OverlayState) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail[id] {
		return errors.New("connection reset")
	}
	a.got[id] = append(a.got[id], st)
	return nil
}

// sent gives what node id was sent since the last call.
func (a *agents) sent(id string) []api.OverlayState {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.got[id]
	delete(a.got, id)
	return got
}

func newNetwork(t *testing.T, nodes map[string][]string) (*Network, *agents, store.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ag := &agents{got: map[string][]api.OverlayState{}, fail: map[string]bool{}}
	for id, groups := range nodes {
		if _, err := st.CreateNode(t.Context(), store.Node{ID: id, Name: "node-" + id, MachineID: id, DataDir: "/d", Groups: groups}); err != nil {
			t.Fatal(err)
		}
		ag.local = append(ag.local, id)
	}
	n, err := New(Config{}, st, ag, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return n, ag, st
}

func newKey(t *testing.T) string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func join(t *testing.T, n *Network, id string) api.OverlayState {
	t.Helper()
	st, err := n.Join(t.Context(), id, "10.9.0."+id[1:]+":40000", api.OverlayJoin{PublicKey: newKey(t), ListenPort: 51820, Kind: api.OverlayUserspace})
	if err != nil {
		t.Fatalf("Join(%s) = %v", id, err)
	}
	return st
}

func peerNames(st api.OverlayState) []string {
	var out []string
	for _, p := range st.Peers {
		out = append(out, p.Node)
	}
	return out
}

func TestBlocks(t *testing.T) {
	n, _, _ := newNetwork(t, nil)
	for _, tc := range []struct {
		i           int
		block, addr string
	}{
		{0, "100.64.0.0/24", "100.64.0.1/32"},
		{3, "100.64.3.0/24", "100.64.3.1/32"},
		{256, "100.65.0.0/24", "100.65.0.1/32"},
		{16383, "100.127.255.0/24", "100.127.255.1/32"},
	} {
		if got := n.Block(tc.i).String(); got != tc.block {
			t.Errorf("Block(%d) = %s, want %s", tc.i, got, tc.block)
		}
		if got := n.NodeAddress(tc.i).String(); got != tc.addr {
			t.Errorf("NodeAddress(%d) = %s, want %s", tc.i, got, tc.addr)
		}
	}
	if n.blocks != 16384 {
		t.Errorf("blocks = %d, want 16384 /24s in a /10", n.blocks)
	}
}

func TestConfigIsChecked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		bits   int
	}{
		{"ipv6", "fd00::/64", 0},
		{"host bits", "100.64.0.1/10", 0},
		{"block wider than the prefix", "10.0.0.0/24", 16},
		{"block of one address", "10.0.0.0/16", 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Prefix: netip.MustParsePrefix(tc.prefix), BlockBits: tc.bits}, nil, nil, nil)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "overlay-network" {
				t.Errorf("New(%s, /%d) = %v, want an error on overlay-network", tc.prefix, tc.bits, err)
			}
		})
	}
}

func TestJoinIsChecked(t *testing.T) {
	n, _, st := newNetwork(t, map[string][]string{"n1": {"g"}})
	good := api.OverlayJoin{PublicKey: newKey(t), ListenPort: 51820, Kind: api.OverlayUserspace}
	for _, tc := range []struct {
		name, field string
		edit        func(*api.OverlayJoin)
		remote      string
	}{
		{"short key", "public_key", func(j *api.OverlayJoin) { j.PublicKey = "abc" }, "10.0.0.1:1"},
		{"port zero", "listen_port", func(j *api.OverlayJoin) { j.ListenPort = 0 }, "10.0.0.1:1"},
		{"port too high", "listen_port", func(j *api.OverlayJoin) { j.ListenPort = 70000 }, "10.0.0.1:1"},
		{"unknown kind", "kind", func(j *api.OverlayJoin) { j.Kind = "magic" }, "10.0.0.1:1"},
		{"endpoint no port", "endpoint", func(j *api.OverlayJoin) { j.Endpoint = "10.0.0.1" }, "10.0.0.1:1"},
		{"remote no IP", "endpoint", func(*api.OverlayJoin) {}, "pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := good
			tc.edit(&j)
			_, err := n.Join(t.Context(), "n1", tc.remote, j)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("Join(%+v from %s) = %v, want an error on %s", j, tc.remote, err, tc.field)
			}
		})
	}
	if ms, err := st.ListOverlay(t.Context()); err != nil || len(ms) != 0 {
		t.Errorf("after bad joins the overlay holds %+v, %v; want nothing", ms, err)
	}
	got, err := n.Join(t.Context(), "n1", "[::ffff:10.0.0.7]:4000", good)
	if err != nil || got.Address != "100.64.0.1/32" || got.Block != "100.64.0.0/24" || got.Network != DefaultPrefix {
		t.Fatalf("Join(good) = %+v, %v; want block 0", got, err)
	}
	ms, _ := st.ListOverlay(t.Context())
	if len(ms) != 1 || ms[0].Endpoint != "10.0.0.7:51820" {
		t.Errorf("the stored member = %+v, want the connection's address with the listen port", ms)
	}
}

func TestPeersShareAGroup(t *testing.T) {
	n, _, _ := newNetwork(t, map[string][]string{
		"a1": {"red"}, "b2": {"red"}, "c3": {"blue"}, "d4": {"red", "blue"}, "e5": nil,
	})
	for _, id := range []string{"a1", "b2", "c3", "d4", "e5"} {
		join(t, n, id)
	}
	states, err := n.states(t.Context(), []string{"a1", "b2", "c3", "d4", "e5"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][]string{
		"a1": {"node-b2", "node-d4"},
		"b2": {"node-a1", "node-d4"},
		"c3": {"node-d4"},
		"d4": {"node-a1", "node-b2", "node-c3"},
		"e5": nil,
	} {
		if got := peerNames(states[id]); !slices.Equal(got, want) {
			t.Errorf("peers of %s = %v, want %v", id, got, want)
		}
	}
	for _, tc := range []struct {
		nodes []string
		want  bool
	}{
		{[]string{"a1", "b2", "d4"}, true},
		{[]string{"a1", "a1"}, true},
		{[]string{"a1", "c3"}, false},   // no group in common
		{[]string{"a1", "nope"}, false}, // not on the overlay
		{nil, false},
	} {
		if got := n.Meshed(tc.nodes); got != tc.want {
			t.Errorf("Meshed(%v) = %v, want %v", tc.nodes, got, tc.want)
		}
	}
	list, err := n.List(t.Context(), func(nd store.Node) bool { return slices.Contains(nd.Groups, "blue") })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, on := range list.Nodes {
		names = append(names, on.Node)
	}
	if !slices.Equal(names, []string{"node-c3", "node-d4"}) || !slices.Equal(list.Nodes[1].Peers, []string{"node-c3"}) {
		t.Errorf("List(blue) = %+v; want c3 and d4, d4 with only the peers the caller sees", list.Nodes)
	}
}

func TestRoundsSendWhatChanged(t *testing.T) {
	n, ag, st := newNetwork(t, map[string][]string{"a1": {"g"}, "b2": {"g"}, "c3": {"g"}})
	ctx := t.Context()
	join(t, n, "a1")
	answer := join(t, n, "b2")
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ag.sent("a1"); len(got) != 1 || !slices.Equal(peerNames(got[0]), []string{"node-b2"}) {
		t.Errorf("a1 was sent %+v after b2 joined, want one state with b2", got)
	} else if got[0].Generation <= answer.Generation {
		t.Errorf("a later state has generation %d, b2's join answer %d: an agent would drop it", got[0].Generation, answer.Generation)
	}
	if got := ag.sent("b2"); len(got) != 0 {
		t.Errorf("b2 was sent %+v, want nothing: its join was answered its state", got)
	}
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ag.sent("a1"); len(got) != 0 {
		t.Errorf("a round with nothing new sent a1 %+v", got)
	}

	// A send that fails is tried again at the next round.
	ag.fail["a1"] = true
	join(t, n, "c3")
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ag.sent("b2"); len(got) != 1 || len(got[0].Peers) != 2 {
		t.Errorf("b2 was sent %+v after c3 joined, want a state with two peers", got)
	}
	delete(ag.fail, "a1")
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ag.sent("a1"); len(got) != 1 || len(got[0].Peers) != 2 {
		t.Errorf("a1 was sent %+v after its failed send, want its state with two peers", got)
	}

	// A node that leaves the group leaves its peers.
	if _, err := st.UpdateNode(ctx, "c3", func(nd *store.Node) error { nd.Groups = []string{"other"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	got := ag.sent("c3")
	if len(got) != 1 || len(got[0].Peers) != 0 {
		t.Errorf("c3 was sent %+v after it left the group, want no peers", got)
	}
	if got := ag.sent("a1"); len(got) != 1 || !slices.Equal(peerNames(got[0]), []string{"node-b2"}) {
		t.Errorf("a1 was sent %+v after c3 left the group, want b2 alone", got)
	}
}

func TestNamesFollowReplicas(t *testing.T) {
	n, ag, st := newNetwork(t, map[string][]string{
		"a1": {"red"}, "b2": {"red"}, "c3": {"blue"}, "d4": {"red", "blue"},
	})
	ctx := t.Context()
	addr := map[string]string{}
	for _, id := range []string{"a1", "b2", "c3", "d4"} {
		addr[id] = strings.TrimSuffix(join(t, n, id).Address, "/32")
	}
	e := api.Ensemble{ID: "e-1", Name: "shop", State: api.EnsembleRunning, CreatedAt: time.Now(), Replicas: []api.EnsembleReplica{
		{Allocation: "web", Replica: 1, NodeID: "a1"},
		{Allocation: "web", Replica: 2, NodeID: "c3"},
		{Allocation: "db", Replica: 1, NodeID: "b2"},
	}}
	if err := st.CreateEnsemble(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	last := func(id string) api.OverlayState {
		got := ag.sent(id)
		if len(got) == 0 {
			t.Fatalf("%s was sent nothing after the ensemble changed", id)
		}
		return got[len(got)-1]
	}
	want := map[string][]string{
		"1.web.shop.nodemgr": {addr["a1"]}, "web.shop.nodemgr": {addr["a1"]},
		"1.db.shop.nodemgr": {addr["b2"]}, "db.shop.nodemgr": {addr["b2"]},
	}
	if got := last("a1").Names; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("a1's names = %v, want %v: none on c3, which a1 cannot reach", got, want)
	}
	want = map[string][]string{"2.web.shop.nodemgr": {addr["c3"]}, "web.shop.nodemgr": {addr["c3"]}}
	if got := last("c3").Names; !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("c3's names = %v, want %v", got, want)
	}

	// A restore moves web 1 to d4: the same name leads there.
	if _, err := st.UpdateEnsemble(ctx, "e-1", func(e *api.Ensemble) error {
		e.Replicas[0].NodeID, e.Replicas[0].Restores = "d4", 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.Round(ctx); err != nil {
		t.Fatal(err)
	}
	names := last("a1").Names
	if got := names["1.web.shop.nodemgr"]; !slices.Equal(got, []string{addr["d4"]}) {
		t.Errorf("after the restore 1.web.shop.nodemgr = %v, want d4's %s", got, addr["d4"])
	}
	if got := last("d4").Names["web.shop.nodemgr"]; !slices.Equal(got, sorted(addr["c3"], addr["d4"])) {
		t.Errorf("d4's web.shop.nodemgr = %v, want both replicas", got)
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}
