package ensemble

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// BenchmarkPlace places 10,000 replicas on the books of 1,000 nodes (of
// assorted sizes, tags and groups, one in twenty offline), three ways:
//
//   - calls=10000: 10,000 ensembles of one single-replica allocation, one
//     Place call each, the books updated with each plan's commits, as the
//     server sees deploys arrive one by one;
//   - calls=1000: 1,000 ensembles of five allocations (two of them spread)
//     and ten replicas, the books updated likewise;
//   - calls=1: one ensemble of 100 allocations × 100 replicas.
//
// It reports placements per second, the resetting of the books excluded.
func BenchmarkPlace(b *testing.B) {
	const nodes, placements = 1000, 10_000
	rng := rand.New(rand.NewPCG(7, 7))
	books := randomNodes(rng, nodes)

	sizes := []api.Resources{{CPUs: 0.25, MemoryMB: 256}, {CPUs: 0.5, MemoryMB: 512}, {CPUs: 1, MemoryMB: 1024}, {CPUs: 2, MemoryMB: 4096}}
	alloc := func(i, count int) api.AllocationSpec {
		a := api.AllocationSpec{
			Name: fmt.Sprintf("a%d", i), Count: count, Resources: sizes[i%len(sizes)],
			Container: &api.ContainerJob{Image: "shop-web:1", Ports: []api.ContainerPort{{Container: 8080}}},
		}
		switch i % 8 {
		case 1:
			a.Placement.Tags = []string{"ssd"}
		case 2:
			a.Placement.Spread = true
		case 3:
			a.Placement.Groups = []string{"ops", "ml"}
		}
		return a
	}
	var one, five []api.EnsembleSpec
	for i := range placements {
		one = append(one, api.EnsembleSpec{Name: "e", Allocations: []api.AllocationSpec{alloc(i, 1)}})
	}
	for i := range placements / 10 {
		s := api.EnsembleSpec{Name: "e"}
		for j, count := range []int{3, 3, 2, 1, 1} {
			a := alloc(i+j, count)
			a.Placement.Spread = j < 2
			s.Allocations = append(s.Allocations, a)
		}
		five = append(five, s)
	}
	big := api.EnsembleSpec{Name: "big"}
	for i := range MaxAllocations {
		big.Allocations = append(big.Allocations, alloc(i, MaxCount))
	}

	for _, bc := range []struct {
		name  string
		specs []api.EnsembleSpec
	}{
		{"calls=10000", one},
		{"calls=1000", five},
		{"calls=1", []api.EnsembleSpec{big}},
	} {
		for _, policy := range Policies {
			b.Run(bc.name+"/"+policy, func(b *testing.B) {
				placed := 0
				for b.Loop() {
					b.StopTimer()
					ns := cloneNodes(books)
					index := make(map[string]int, len(ns))
					for i, n := range ns {
						index[n.ID] = i
					}
					b.StartTimer()
					for _, spec := range bc.specs {
						plan, err := Place(ns, spec, policy)
						if err != nil {
							b.Fatalf("Place: %v", err)
						}
						placed += len(plan.Placements)
						for _, c := range plan.Commits {
							n := &ns[index[c.NodeID]]
							n.Free = toAmount(n.Free).sub(toAmount(c.Resources)).resources()
							n.FreePorts -= c.Ports
						}
					}
				}
				b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
			})
		}
	}
}
