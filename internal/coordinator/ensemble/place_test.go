package ensemble

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

// books is an online node with unknown free ports, named and identified
// by name.
func books(name string, cpus float64, memMB int64, tags ...string) NodeBooks {
	return NodeBooks{
		ID: "id-" + name, Name: name, Tags: tags, Online: true, FreePorts: -1,
		Free: api.Resources{CPUs: cpus, MemoryMB: memMB, DiskMB: 100_000},
	}
}

// with returns b changed by f.
func with(b NodeBooks, f func(*NodeBooks)) NodeBooks {
	f(&b)
	return b
}

// container is an allocation of count replicas of a container, each
// taking cpus and memMB.
func container(name string, count int, cpus float64, memMB int64) api.AllocationSpec {
	return api.AllocationSpec{
		Name: name, Count: count,
		Resources: api.Resources{CPUs: cpus, MemoryMB: memMB},
		Container: &api.ContainerJob{Image: "busybox:1.36"},
	}
}

func allocWith(a api.AllocationSpec, f func(*api.AllocationSpec)) api.AllocationSpec {
	f(&a)
	return a
}

func spread(a api.AllocationSpec) api.AllocationSpec {
	return allocWith(a, func(a *api.AllocationSpec) { a.Placement.Spread = true })
}

func ensemble(allocs ...api.AllocationSpec) api.EnsembleSpec {
	return api.EnsembleSpec{Name: "shop", Allocations: allocs}
}

// where is one line per placement: "ALLOCATION/REPLICA NODE".
func where(p Plan) []string {
	var out []string
	for _, pl := range p.Placements {
		out = append(out, fmt.Sprintf("%s/%d %s", pl.Allocation, pl.Replica, pl.NodeName))
	}
	return out
}

// three are nodes of three sizes; big and small have SSDs.
var three = []NodeBooks{
	books("big", 8, 16384, "linux", "ssd"),
	books("mid", 4, 8192, "linux"),
	books("small", 3, 6144, "linux", "ssd"),
}

// placeCase is an ensemble placed on nodes by a policy, and what comes of
// it: the placements for TestPlace, the reasons for TestPlaceWhy.
type placeCase struct {
	name   string
	nodes  []NodeBooks
	spec   api.EnsembleSpec
	policy string
	want   []string
}

func TestPlace(t *testing.T) {
	gpuNodes := []NodeBooks{
		with(books("gpu", 8, 16384), func(b *NodeBooks) { b.Free.GPUs = 2 }),
		books("cpu", 8, 16384),
	}
	tests := []placeCase{
		{
			name:  "two tiers, web spread over three sizes",
			nodes: three,
			spec: ensemble(
				spread(container("web", 3, 0.5, 512)),
				allocWith(container("db", 1, 2, 4096), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} }),
			),
			// db first (largest), on the fullest SSD node; then web fills
			// what small has left and goes on to the others, one each.
			want: []string{"web/1 small", "web/2 mid", "web/3 big", "db/1 small"},
		},
		{
			name: "five allocations, two tiers",
			nodes: []NodeBooks{
				books("big", 16, 32768, "ssd"),
				books("mid", 8, 16384),
				books("small", 4, 8192, "ssd"),
			},
			spec: ensemble(
				spread(container("web", 3, 1, 1024)),
				spread(container("api", 2, 1, 1024)),
				allocWith(container("db", 1, 2, 4096), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} }),
				container("cache", 1, 1, 2048),
				container("worker", 2, 0.5, 256),
			),
			want: []string{
				"web/1 small", "web/2 mid", "web/3 big",
				"api/1 mid", "api/2 big",
				"db/1 small",
				"cache/1 small",
				"worker/1 mid", "worker/2 mid",
			},
		},
		{
			name:  "binpack fills the fullest node that fits",
			nodes: three,
			spec:  ensemble(container("app", 3, 3, 1024)),
			want:  []string{"app/1 small", "app/2 mid", "app/3 big"},
		},
		{
			name:   "spread takes the emptiest node",
			nodes:  three,
			spec:   ensemble(container("app", 3, 3, 1024)),
			policy: Spread,
			want:   []string{"app/1 big", "app/2 big", "app/3 mid"},
		},
		{
			name:   "pack ranks by binpack under the spread policy",
			nodes:  three,
			spec:   ensemble(allocWith(container("app", 3, 3, 1024), func(a *api.AllocationSpec) { a.Placement.Pack = true })),
			policy: Spread,
			want:   []string{"app/1 small", "app/2 mid", "app/3 big"},
		},
		{
			name:  "named nodes, by name and by ID",
			nodes: three,
			spec: ensemble(
				allocWith(container("a", 2, 1, 512), func(a *api.AllocationSpec) { a.Placement.Nodes = []string{"big"} }),
				allocWith(container("b", 1, 1, 512), func(a *api.AllocationSpec) { a.Placement.Nodes = []string{"id-mid", "nope"} }),
			),
			want: []string{"a/1 big", "a/2 big", "b/1 mid"},
		},
		{
			name:  "tags: every one, on the node",
			nodes: append(three, books("tiny", 1, 1024, "linux", "ssd", "edge")),
			spec: ensemble(
				allocWith(container("e", 1, 1, 1024), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd", "edge"} }),
				allocWith(container("s", 2, 0.5, 512), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} }),
			),
			want: []string{"e/1 tiny", "s/1 small", "s/2 small"},
		},
		{
			name: "groups: one of them",
			nodes: []NodeBooks{
				with(books("a", 4, 4096), func(b *NodeBooks) { b.Groups = []string{"ops"} }),
				with(books("b", 4, 4096), func(b *NodeBooks) { b.Groups = []string{"dev", "ml"} }),
				books("c", 1, 1024),
			},
			spec: ensemble(allocWith(container("x", 1, 1, 512), func(a *api.AllocationSpec) { a.Placement.Groups = []string{"ml", "qa"} })),
			want: []string{"x/1 b"},
		},
		{
			name: "offline nodes take nothing",
			nodes: []NodeBooks{
				with(books("down", 1, 1024), func(b *NodeBooks) { b.Online = false }),
				books("up", 8, 8192),
			},
			spec: ensemble(container("x", 1, 1, 512)),
			want: []string{"x/1 up"},
		},
		{
			name:  "no double booking across allocations",
			nodes: []NodeBooks{books("a", 4, 8192), books("b", 3, 8192)},
			spec:  ensemble(container("x", 1, 3, 512), container("y", 1, 3, 512)),
			want:  []string{"x/1 b", "y/1 a"},
		},
		{
			name:   "largest first, so the small one does not take its room",
			nodes:  []NodeBooks{books("a", 4, 8192), books("b", 2, 8192)},
			spec:   ensemble(container("small", 1, 2, 512), container("large", 1, 4, 512)),
			policy: Spread, // would put small on a if it went first
			want:   []string{"small/1 b", "large/1 a"},
		},
		{
			name: "ports: what the allocator has free",
			nodes: []NodeBooks{
				with(books("a", 4, 4096), func(b *NodeBooks) { b.FreePorts = 1 }),
				with(books("b", 8, 8192), func(b *NodeBooks) { b.FreePorts = 4 }),
			},
			spec: ensemble(allocWith(container("x", 2, 1, 512), func(a *api.AllocationSpec) {
				a.Container.Ports = []api.ContainerPort{{Container: 80}, {Container: 443}}
			})),
			want: []string{"x/1 b", "x/2 b"},
		},
		{
			name: "spread skips a node holding a replica already",
			nodes: []NodeBooks{
				with(books("a", 4, 4096), func(b *NodeBooks) { b.Held = map[string]int{"web": 1} }),
				books("b", 8, 8192),
			},
			spec: ensemble(spread(container("web", 1, 1, 512))),
			want: []string{"web/1 b"},
		},
		{
			name:  "binpack keeps GPU nodes for GPU work",
			nodes: gpuNodes,
			spec:  ensemble(container("cpu-only", 1, 1, 512), allocWith(container("train", 1, 1, 512), func(a *api.AllocationSpec) { a.Resources.GPUs = 1 })),
			want:  []string{"cpu-only/1 cpu", "train/1 gpu"},
		},
		{
			name:  "ties go by name",
			nodes: []NodeBooks{books("n2", 4, 4096), books("n1", 4, 4096), books("n3", 4, 4096)},
			spec:  ensemble(spread(container("x", 3, 1, 512))),
			want:  []string{"x/1 n1", "x/2 n2", "x/3 n3"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Place(tc.nodes, tc.spec, tc.policy)
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			if diff := cmp.Diff(tc.want, where(plan)); diff != "" {
				t.Errorf("Place placements (-want +got):\n%s", diff)
			}
			checkNoOvercommit(t, tc.nodes, plan)
		})
	}
}

// checkNoOvercommit checks that the plan's commits sum its placements and
// fit in every node's free books.
func checkNoOvercommit(t *testing.T, nodes []NodeBooks, plan Plan) {
	t.Helper()
	sums := map[string]amount{}
	ports := map[string]int{}
	for _, p := range plan.Placements {
		sums[p.NodeID] = sums[p.NodeID].add(toAmount(p.Resources))
		ports[p.NodeID] += p.Ports
	}
	if len(plan.Commits) != len(sums) {
		t.Errorf("plan has %d commits, its placements use %d nodes", len(plan.Commits), len(sums))
	}
	for _, c := range plan.Commits {
		if got := toAmount(c.Resources); got != sums[c.NodeID] || c.Ports != ports[c.NodeID] {
			t.Errorf("commit on %s = %+v, %d ports; placements sum to %+v, %d ports", c.NodeName, c.Resources, c.Ports, sums[c.NodeID].resources(), ports[c.NodeID])
		}
	}
	for _, n := range nodes {
		if !toAmount(n.Free).covers(sums[n.ID]) {
			t.Errorf("node %s: plan takes %+v, only %+v free", n.Name, sums[n.ID].resources(), n.Free)
		}
		if n.FreePorts >= 0 && ports[n.ID] > n.FreePorts {
			t.Errorf("node %s: plan takes %d ports, only %d free", n.Name, ports[n.ID], n.FreePorts)
		}
	}
}

func TestPlaceCommitsAndWhy(t *testing.T) {
	spec := ensemble(
		allocWith(spread(container("web", 3, 0.5, 512)), func(a *api.AllocationSpec) {
			a.Container.Ports = []api.ContainerPort{{Container: 8080}}
		}),
		allocWith(container("db", 1, 2, 4096), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} }),
	)
	plan, err := Place(three, spec, "")
	if err != nil {
		t.Fatalf("Place: %v", err)
	}
	want := Plan{
		Ensemble: "shop",
		Policy:   Binpack,
		Placements: []Placement{
			{Allocation: "web", Kind: api.AllocationContainer, Replica: 1, NodeID: "id-small", NodeName: "small", Resources: api.Resources{CPUs: 0.5, MemoryMB: 512}, Ports: 1,
				Why: "binpack: leaves 0.5 CPUs, 1536 MB memory free; best of 3 nodes that fit"},
			{Allocation: "web", Kind: api.AllocationContainer, Replica: 2, NodeID: "id-mid", NodeName: "mid", Resources: api.Resources{CPUs: 0.5, MemoryMB: 512}, Ports: 1,
				Why: "binpack: leaves 3.5 CPUs, 7680 MB memory free; best of 2 nodes that fit"},
			{Allocation: "web", Kind: api.AllocationContainer, Replica: 3, NodeID: "id-big", NodeName: "big", Resources: api.Resources{CPUs: 0.5, MemoryMB: 512}, Ports: 1,
				Why: "binpack: leaves 7.5 CPUs, 15872 MB memory free; the only node that fits"},
			{Allocation: "db", Kind: api.AllocationContainer, Replica: 1, NodeID: "id-small", NodeName: "small", Resources: api.Resources{CPUs: 2, MemoryMB: 4096}, Ports: 0,
				Why: "binpack: leaves 1 CPU, 2048 MB memory free; best of 2 nodes that fit"},
		},
		Commits: []Commit{
			{NodeID: "id-big", NodeName: "big", Resources: api.Resources{CPUs: 0.5, MemoryMB: 512}, Ports: 1, Replicas: 1},
			{NodeID: "id-mid", NodeName: "mid", Resources: api.Resources{CPUs: 0.5, MemoryMB: 512}, Ports: 1, Replicas: 1},
			{NodeID: "id-small", NodeName: "small", Resources: api.Resources{CPUs: 2.5, MemoryMB: 4608}, Ports: 1, Replicas: 2},
		},
	}
	if diff := cmp.Diff(want, plan); diff != "" {
		t.Errorf("Place (-want +got):\n%s", diff)
	}
}

func TestPlaceNoFit(t *testing.T) {
	ssd := func(a api.AllocationSpec) api.AllocationSpec {
		return allocWith(a, func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} })
	}
	many := []NodeBooks{books("a", 1, 1024), books("b", 1, 1024)}
	for i := range 6 {
		many = append(many, with(books(fmt.Sprintf("z%d", i), 8, 100), func(b *NodeBooks) { b.Online = i%3 != 0 }))
	}
	tests := []struct {
		name    string
		nodes   []NodeBooks
		spec    api.EnsembleSpec
		policy  string
		want    string
		wantRep int
	}{
		{
			name: "each node says what it lacks",
			nodes: []NodeBooks{
				books("n1", 0.5, 8192, "ssd"),
				books("n2", 8, 8192),
				books("n3", 8, 8192, "ssd"),
			},
			spec:    ensemble(ssd(spread(container("db", 2, 2, 1024)))),
			want:    "allocation db replica 2 of 2: no node fits: n1 has 0.5 of 2 CPUs free; n3 already holds a replica (spread); n2 lacks tag ssd",
			wantRep: 2,
		},
		{
			name:    "what the ensemble took is counted and told",
			nodes:   []NodeBooks{books("a", 4, 8192)},
			spec:    ensemble(container("x", 1, 3, 512), container("y", 1, 3, 512)),
			want:    "allocation y replica 1 of 1: no node fits: a has 1 of 3 CPUs free (3 went to this ensemble)",
			wantRep: 1,
		},
		{
			name: "every dimension short",
			nodes: []NodeBooks{with(books("a", 1, 100), func(b *NodeBooks) {
				b.Free.DiskMB = 10
				b.FreePorts = 0
			})},
			spec: ensemble(allocWith(container("x", 1, 1, 512), func(a *api.AllocationSpec) {
				a.Resources.GPUs = 1
				a.Resources.DiskMB = 20
				a.Ports = 2
				a.Placement.Nodes = []string{"other"}
				a.Placement.Groups = []string{"ops"}
			})),
			want: "allocation x replica 1 of 1: no node fits: a is not one of the named nodes and is in none of the groups ops and " +
				"has 100 of 512 MB memory free and has 0 of 1 GPU free and has 10 of 20 MB disk free and has 0 of 2 ports free",
			wantRep: 1,
		},
		{
			name:    "a node holding a replica before the plan (spread)",
			nodes:   []NodeBooks{with(books("a", 4, 4096), func(b *NodeBooks) { b.Held = map[string]int{"web": 1} })},
			spec:    ensemble(spread(container("web", 1, 1, 512))),
			want:    "allocation web replica 1 of 1: no node fits: a already holds a replica (spread)",
			wantRep: 1,
		},
		{
			name:    "no nodes",
			spec:    ensemble(container("x", 1, 1, 512)),
			want:    "allocation x replica 1 of 1: no node fits: there are no nodes",
			wantRep: 1,
		},
		{
			name:  "the nodes not told are counted",
			nodes: many,
			spec:  ensemble(container("x", 1, 2, 512)),
			// Online nodes short of one thing come first; the offline
			// ones last, and here among those counted.
			want: "allocation x replica 1 of 1: no node fits: a has 1 of 2 CPUs free; b has 1 of 2 CPUs free; " +
				"z1 has 100 of 512 MB memory free; z2 has 100 of 512 MB memory free; z4 has 100 of 512 MB memory free; " +
				"and 3 more nodes: 2 offline, 1 short of memory",
			wantRep: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Place(tc.nodes, tc.spec, tc.policy)
			if err == nil {
				t.Fatalf("Place = %v, want an error", where(plan))
			}
			if !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Place error %v is not a conflict", err)
			}
			var nf *NoFitError
			if !errors.As(err, &nf) {
				t.Fatalf("Place error %T, want *NoFitError", err)
			}
			if nf.Replica != tc.wantRep {
				t.Errorf("NoFitError.Replica = %d, want %d", nf.Replica, tc.wantRep)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Place error\n got %q\nwant %q", got, tc.want)
			}
			if len(nf.Rejections) != len(tc.nodes) {
				t.Errorf("NoFitError has %d rejections, want one per node (%d)", len(nf.Rejections), len(tc.nodes))
			}
			if !cmp.Equal(plan, Plan{}, cmpopts.EquateEmpty()) {
				t.Errorf("Place returned a plan with its error: %v", where(plan))
			}
		})
	}
}

func TestPlaceRefusesBadInput(t *testing.T) {
	tests := []struct {
		name      string
		nodes     []NodeBooks
		spec      api.EnsembleSpec
		policy    string
		wantField string
	}{
		{"unknown policy", three, ensemble(container("x", 1, 1, 512)), "cheapest", "policy"},
		{"invalid spec", three, ensemble(container("x", 101, 1, 512)), "", "allocations[0].count"},
		{"two nodes, one ID, both used", []NodeBooks{books("a", 1, 1024), books("a", 2, 1024)}, ensemble(spread(container("x", 2, 1, 512))), "", "nodes[1].id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Place(tc.nodes, tc.spec, tc.policy)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField {
				t.Errorf("Place error = %v, want a field error on %s", err, tc.wantField)
			}
		})
	}
}

// TestPlaceDeterministic places one spec on the same nodes in many
// orders, and checks that the plan is the same and the input untouched.
func TestPlaceDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := randomNodes(rng, 60)
	spec := ensemble(
		spread(container("web", 8, 1, 1024)),
		container("api", 6, 2, 2048),
		allocWith(container("db", 3, 4, 8192), func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ssd"} }),
		allocWith(container("gpu", 2, 2, 4096), func(a *api.AllocationSpec) { a.Resources.GPUs = 1 }),
		allocWith(container("cache", 4, 0.5, 512), func(a *api.AllocationSpec) { a.Placement.Pack = true }),
	)
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			want, err := Place(nodes, spec, policy)
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			checkNoOvercommit(t, nodes, want)
			for i := range 20 {
				shuffled := cloneNodes(nodes)
				rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
				before := cloneNodes(shuffled)
				got, err := Place(shuffled, spec, policy)
				if err != nil {
					t.Fatalf("Place (order %d): %v", i, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("Place (order %d) differs (-first +now):\n%s", i, diff)
				}
				if diff := cmp.Diff(before, shuffled); diff != "" {
					t.Fatalf("Place changed its input (-before +after):\n%s", diff)
				}
			}
		})
	}
}

func cloneNodes(ns []NodeBooks) []NodeBooks {
	out := make([]NodeBooks, len(ns))
	for i, n := range ns {
		n.Tags = append([]string(nil), n.Tags...)
		n.Groups = append([]string(nil), n.Groups...)
		out[i] = n
	}
	return out
}

// randomNodes makes n nodes of assorted sizes, tags and groups, some
// offline, some with GPUs.
func randomNodes(rng *rand.Rand, n int) []NodeBooks {
	sizes := []struct {
		cpus float64
		mem  int64
	}{{2, 4096}, {4, 8192}, {8, 16384}, {16, 65536}, {64, 262144}}
	tags := []string{"ssd", "edge", "linux", "arm64"}
	nodes := make([]NodeBooks, n)
	for i := range nodes {
		s := sizes[rng.IntN(len(sizes))]
		b := NodeBooks{
			ID:        fmt.Sprintf("node-%04d", i),
			Name:      fmt.Sprintf("n%04d", i),
			Online:    rng.IntN(20) != 0,
			Free:      api.Resources{CPUs: s.cpus, MemoryMB: s.mem, DiskMB: 500_000},
			FreePorts: 100 + rng.IntN(1000),
			Groups:    []string{[]string{"ops", "dev", "ml"}[rng.IntN(3)]},
		}
		for _, t := range tags {
			if rng.IntN(2) == 0 {
				b.Tags = append(b.Tags, t)
			}
		}
		if rng.IntN(8) == 0 {
			b.Free.GPUs = 1 + rng.IntN(4)
		}
		nodes[i] = b
	}
	return nodes
}

// TestPlaceYAML reads a spec as a user writes it and places it.
func TestPlaceYAML(t *testing.T) {
	data, err := os.ReadFile("testdata/two-tier.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec api.EnsembleSpec
	if err := yamlfield.Unmarshal(data, "two-tier.yaml", &spec); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	plan, err := Place(three, spec, "")
	if err != nil {
		t.Fatalf("Place: %v", err)
	}
	want := []string{"db/1 small", "web/1 small", "web/2 mid", "web/3 big", "queue/1 mid"}
	if diff := cmp.Diff(want, where(plan)); diff != "" {
		t.Errorf("Place placements (-want +got):\n%s", diff)
	}
	if got := strings.Join([]string{plan.Placements[0].Kind, plan.Placements[4].Kind}, ","); got != "container,service" {
		t.Errorf("kinds = %s, want container,service", got)
	}
}

func TestPlaceWhy(t *testing.T) {
	tests := []placeCase{
		{
			name:   "pack says so",
			nodes:  three,
			spec:   ensemble(allocWith(container("x", 1, 1, 512), func(a *api.AllocationSpec) { a.Placement.Pack = true })),
			policy: Spread,
			want:   []string{"binpack (pack): leaves 2 CPUs, 5632 MB memory free; best of 3 nodes that fit"},
		},
		{
			name:   "a tie says it went by name",
			nodes:  []NodeBooks{books("n2", 4, 4096), books("n1", 4, 4096), books("n3", 8, 4096)},
			spec:   ensemble(container("x", 2, 1, 512)),
			policy: Binpack,
			want: []string{
				"binpack: leaves 3 CPUs, 3584 MB memory free; best of 3 nodes that fit; tied, then by name",
				"binpack: leaves 2 CPUs, 3072 MB memory free; best of 3 nodes that fit",
			},
		},
		{
			name:   "GPUs told where binpack ranks by them",
			nodes:  []NodeBooks{with(books("g", 4, 4096), func(b *NodeBooks) { b.Free.GPUs = 2 })},
			spec:   ensemble(allocWith(container("x", 1, 1, 512), func(a *api.AllocationSpec) { a.Resources.GPUs = 1 })),
			policy: Binpack,
			want:   []string{"binpack: leaves 3 CPUs, 3584 MB memory, 1 GPU free; the only node that fits"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := Place(tc.nodes, tc.spec, tc.policy)
			if err != nil {
				t.Fatalf("Place: %v", err)
			}
			var got []string
			for _, p := range plan.Placements {
				got = append(got, p.Why)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Place whys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAllowsAgreesWithReasons holds the hot path's allows to the error's
// staticReasons: a node is allowed exactly when there is no reason.
func TestAllowsAgreesWithReasons(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes := randomNodes(rng, 200)
	pick := func(from []string) []string {
		var out []string
		for _, s := range from {
			if rng.IntN(3) == 0 {
				out = append(out, s)
			}
		}
		return out
	}
	for range 200 {
		pl := api.Placement{
			Tags:   pick([]string{"ssd", "edge", "linux", "arm64", "none"}),
			Groups: pick([]string{"ops", "dev", "ml", "qa"}),
			Nodes:  pick([]string{"n0001", "node-0002", "n0003", "n0150", "node-0199"}),
		}
		for i := range nodes {
			if got, want := allows(&nodes[i], &pl), len(staticReasons(&nodes[i], &pl)) == 0; got != want {
				t.Fatalf("allows(%s, %+v) = %v, staticReasons says %v", nodes[i].Name, pl, got, want)
			}
		}
	}
}

// TestPlaceProperties places random specs on random nodes and checks what
// every plan must hold: each replica placed once, on a node its
// constraints allow, spread replicas apart, no node over its books; and
// that a refusal is a *NoFitError.
func TestPlaceProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sizes := []api.Resources{{CPUs: 0.25, MemoryMB: 256}, {CPUs: 1, MemoryMB: 1024}, {CPUs: 4, MemoryMB: 8192, DiskMB: 1000}, {CPUs: 2, MemoryMB: 2048, GPUs: 1}}
	fits, refused := 0, 0
	for trial := range 300 {
		nodes := randomNodes(rng, 5+rng.IntN(40))
		for i := range nodes {
			if rng.IntN(4) == 0 {
				nodes[i].Held = map[string]int{"a0": 1}
			}
			if rng.IntN(3) == 0 {
				nodes[i].FreePorts = rng.IntN(4)
			}
		}
		var spec api.EnsembleSpec
		spec.Name = "e"
		for j := range 1 + rng.IntN(6) {
			a := container(fmt.Sprintf("a%d", j), 1+rng.IntN(12), 0, 0)
			a.Resources = sizes[rng.IntN(len(sizes))]
			a.Ports = rng.IntN(3)
			switch rng.IntN(5) {
			case 0:
				a.Placement.Spread = true
			case 1:
				a.Placement.Pack = true
			}
			if rng.IntN(3) == 0 {
				a.Placement.Tags = []string{"ssd"}
			}
			if rng.IntN(5) == 0 {
				a.Placement.Groups = []string{"ops", "ml"}
			}
			if rng.IntN(6) == 0 {
				a.Placement.Nodes = []string{nodes[0].Name, nodes[1].ID}
			}
			spec.Allocations = append(spec.Allocations, a)
		}
		policy := Policies[rng.IntN(len(Policies))]
		plan, err := Place(nodes, spec, policy)
		if err != nil {
			var nf *NoFitError
			if !errors.As(err, &nf) {
				t.Fatalf("trial %d: Place error %v, want a *NoFitError", trial, err)
			}
			refused++
			continue
		}
		fits++
		checkNoOvercommit(t, nodes, plan)
		byID := map[string]*NodeBooks{}
		for i := range nodes {
			byID[nodes[i].ID] = &nodes[i]
		}
		count := map[string]int{}
		on := map[string]bool{}
		for _, p := range plan.Placements {
			a := spec.Allocations[0]
			for _, x := range spec.Allocations {
				if x.Name == p.Allocation {
					a = x
				}
			}
			count[a.Name]++
			n := byID[p.NodeID]
			if !allows(n, &a.Placement) {
				t.Errorf("trial %d: %s/%d on %s, which its placement does not allow", trial, a.Name, p.Replica, n.Name)
			}
			if a.Placement.Spread {
				key := a.Name + "@" + n.ID
				if on[key] || n.Held[a.Name] > 0 {
					t.Errorf("trial %d: spread %s has two replicas on %s", trial, a.Name, n.Name)
				}
				on[key] = true
			}
		}
		for _, a := range spec.Allocations {
			if count[a.Name] != a.Count {
				t.Errorf("trial %d: %s placed %d times, want %d", trial, a.Name, count[a.Name], a.Count)
			}
		}
	}
	if fits == 0 || refused == 0 {
		t.Errorf("%d plans and %d refusals: the trials should give some of each", fits, refused)
	}
	t.Logf("%d plans, %d refusals", fits, refused)
}

// TestShortfall counts the replicas that fit nowhere, by allocation, after
// placing all the others as Place would; a spec that fits counts none.
func TestShortfall(t *testing.T) {
	tests := []struct {
		name string
		spec api.EnsembleSpec
		want map[string]int
	}{
		{"fits", api.EnsembleSpec{Name: "ok", Allocations: []api.AllocationSpec{container("web", 3, 1, 512)}}, map[string]int{}},
		{"spread over more nodes than there are", api.EnsembleSpec{Name: "s", Allocations: []api.AllocationSpec{
			spread(container("web", 5, 1, 512)), container("db", 1, 2, 1024),
		}}, map[string]int{"web": 2}},
		{"too big for any node", api.EnsembleSpec{Name: "b", Allocations: []api.AllocationSpec{
			container("huge", 2, 16, 1024), container("web", 2, 1, 512),
		}}, map[string]int{"huge": 2}},
		{"the books run out part way", api.EnsembleSpec{Name: "p", Allocations: []api.AllocationSpec{
			container("web", 20, 1, 512),
		}}, map[string]int{"web": 5}}, // 8 + 4 + 3 CPUs hold 15
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Shortfall(three, tc.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("Shortfall = %v, want %v", got, tc.want)
			}
			if _, err := Place(three, tc.spec, ""); (err == nil) != (len(tc.want) == 0) {
				t.Errorf("Place = %v, but Shortfall counts %v", err, got)
			}
		})
	}
	if _, err := Shortfall(three, api.EnsembleSpec{}, ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Shortfall of an invalid spec = %v, want ErrInvalid", err)
	}
}
