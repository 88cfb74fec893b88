package deploy

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/ensemble"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// silentAgents is a server to which no agent is connected: every call
// fails as the server's relay does for a node it cannot reach.
type silentAgents struct{}

func (silentAgents) Connected(store.Node) bool { return false }
func (silentAgents) Call(_ context.Context, n store.Node, _, _ string, _, _ any) error {
	return errdefs.Class(errors.New("node "+n.Name+" is not connected"), errdefs.ErrUnavailable)
}
func (a silentAgents) RunContainer(ctx context.Context, n store.Node, _ api.ContainerJob) (api.Container, error) {
	return api.Container{}, a.Call(ctx, n, "", "", nil, nil)
}
func (a silentAgents) DeleteContainer(ctx context.Context, n store.Node, _ string) (api.Container, error) {
	return api.Container{}, a.Call(ctx, n, "", "", nil, nil)
}
func (silentAgents) Host(_, name string) string    { return name }
func (silentAgents) Meshed([]string) bool          { return false }
func (silentAgents) Presence(string) *api.Presence { return nil }

// newRunner is a Runner over a fresh SQLite store with one node, n1, and
// the user admin, logging into logs.
func newRunner(t *testing.T, logs slog.Handler) (*Runner, store.Store, store.Node) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n, err := st.CreateNode(t.Context(), store.Node{ID: "n-1", Name: "n1", MachineID: "m1", DataDir: "/var/lib/nodemgr",
		Status: api.StatusOnline, RegisteredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateUser(t.Context(), store.User{Name: "admin", Admin: true}); err != nil {
		t.Fatal(err)
	}
	r := New(st, silentAgents{}, func() Pools { return nil }, Config{RestoreDeadline: time.Millisecond, ProvisionDeadline: time.Minute}, slog.New(logs))
	return r, st, n
}

var shopSpec = api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db",
	Resources: api.Resources{CPUs: 0.5, MemoryMB: 64}, Container: &api.ContainerJob{Image: "postgres:16"}}}}

// TestFailedEnsembleKeepsCreatedAt: a deploy that fails (its node is not
// connected) records the ensemble failed with the creation time the store
// gave it, not the zero time of the caller's copy (stored as 1754-08-30).
func TestFailedEnsembleKeepsCreatedAt(t *testing.T) {
	r, st, n := newRunner(t, slog.DiscardHandler)
	plan := ensemble.Plan{Ensemble: "shop", Placements: []ensemble.Placement{{Allocation: "db", Kind: api.AllocationContainer,
		Replica: 1, NodeID: n.ID, NodeName: n.Name, Resources: shopSpec.Allocations[0].Resources}}}
	e := api.Ensemble{ID: "e-1", Name: "shop", Spec: shopSpec, State: api.EnsembleDeploying, Owner: "admin", Replicas: planReplicas(plan)}
	before := time.Now()
	if err := st.CreateEnsemble(t.Context(), e); err != nil {
		t.Fatal(err)
	}

	got, err := r.start(t.Context(), e, plan, map[string]store.Node{n.ID: n})
	if err == nil {
		t.Fatalf("start on a node that is not connected = %+v, nil; want an error", got)
	}
	stored, err := st.GetEnsemble(t.Context(), "e-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != api.EnsembleFailed || stored.Reason == "" {
		t.Errorf("stored ensemble is %s (%q), want %s with a reason", stored.State, stored.Reason, api.EnsembleFailed)
	}
	if d := stored.CreatedAt.Sub(before); d < -time.Second || d > time.Minute {
		t.Errorf("stored created_at = %v, want about %v", stored.CreatedAt, before)
	}
	if !got.CreatedAt.Equal(stored.CreatedAt) {
		t.Errorf("start answered created_at %v, want the stored %v", got.CreatedAt, stored.CreatedAt)
	}
}

// TestLostReplicaThatFitsNowhereIsLoggedOnce: a replica whose node is
// lost and that cannot be placed again (no node is connected) is tried
// every tick but logged once, not at every tick.
func TestLostReplicaThatFitsNowhereIsLoggedOnce(t *testing.T) {
	logs := &countingHandler{}
	r, st, n := newRunner(t, logs)
	if _, err := st.SetNodeStatus(t.Context(), n.ID, api.StatusOffline, "test"); err != nil {
		t.Fatal(err)
	}
	e := api.Ensemble{ID: "e-1", Name: "shop", Spec: shopSpec, State: api.EnsembleRunning, Owner: "admin",
		Replicas: []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: n.ID, NodeName: n.Name, Container: "shop-db-1", Status: api.ContainerRunning}}}
	if err := st.CreateEnsemble(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	for range 5 { // five ticks of Loop
		r.restore(t.Context(), e)
	}
	if n := logs.count(slog.LevelWarn, "place a lost node's replica again"); n != 1 {
		t.Errorf("5 failed tries to place the replica again logged %d warnings, want 1", n)
	}
}

// countingHandler counts log records by level and message.
type countingHandler struct {
	mu   sync.Mutex
	seen map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]int{}
	}
	h.seen[r.Level.String()+" "+r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[level.String()+" "+msg]
}

// TestKeepHostPorts: a restored replica asks for the host ports it had,
// where its job lets the node choose and the container port matches.
func TestKeepHostPorts(t *testing.T) {
	had := []api.ContainerPort{{Container: 80, Host: 30201}, {Container: 53, Host: 30202, Protocol: "udp"}}
	for _, tc := range []struct {
		name       string
		ports, had []api.ContainerPort
		want       []api.ContainerPort
	}{
		{"new replica", []api.ContainerPort{{Container: 80}}, nil, []api.ContainerPort{{Container: 80}}},
		{"restored", []api.ContainerPort{{Container: 80}, {Container: 53, Protocol: "udp"}}, had,
			[]api.ContainerPort{{Container: 80, Host: 30201}, {Container: 53, Host: 30202, Protocol: "udp"}}},
		{"a fixed host port stays", []api.ContainerPort{{Container: 80, Host: 8080}}, had, []api.ContainerPort{{Container: 80, Host: 8080}}},
		{"protocol must match", []api.ContainerPort{{Container: 53, Protocol: "tcp"}}, had, []api.ContainerPort{{Container: 53, Protocol: "tcp"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepHostPorts(tc.ports, tc.had); !slices.Equal(got, tc.want) {
				t.Errorf("keepHostPorts(%v, %v) = %v, want %v", tc.ports, tc.had, got, tc.want)
			}
		})
	}
}

// TestAllocEnv: the allocations after db learn its replica 1's host and
// port, and its overlay names; on a meshed ensemble the host is the
// replica's name, which follows it across restores.
func TestAllocEnv(t *testing.T) {
	rep := api.EnsembleReplica{Allocation: "db", Replica: 1, Ports: []api.ContainerPort{{Container: 5432, Host: 30201}}}
	for _, tc := range []struct {
		meshed bool
		want   map[string]string
	}{
		{false, map[string]string{"NODEMGR_ALLOC_DB_HOST": "10.0.0.7", "NODEMGR_ALLOC_DB_PORT": "30201",
			"NODEMGR_ALLOC_DB_ADDR": "10.0.0.7:30201", "NODEMGR_ALLOC_DB_NAME": "db.shop.nodemgr"}},
		{true, map[string]string{"NODEMGR_ALLOC_DB_HOST": "1.db.shop.nodemgr", "NODEMGR_ALLOC_DB_PORT": "30201",
			"NODEMGR_ALLOC_DB_ADDR": "1.db.shop.nodemgr:30201", "NODEMGR_ALLOC_DB_NAME": "db.shop.nodemgr"}},
	} {
		env := map[string]string{}
		setAllocEnv(env, "shop", rep, "10.0.0.7", tc.meshed)
		if !maps.Equal(env, tc.want) {
			t.Errorf("setAllocEnv(meshed %v) = %v, want %v", tc.meshed, env, tc.want)
		}
	}
}
