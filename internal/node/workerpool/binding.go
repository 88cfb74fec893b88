package workerpool

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// planCPUs gives each of n workers its cores under b; nil b (or no cores)
// means no pinning, and every entry is nil.
//
//   - RoundRobin (the default): worker i gets cores[i % len(cores)].
//   - Exclusive: the cores split into n disjoint contiguous slices whose
//     sizes differ by at most one; fewer cores than workers is an error.
//   - Shared: every worker gets all the cores.
func planCPUs(b *api.CPUBinding, n int) ([][]int, error) {
	plan := make([][]int, n)
	if b == nil || len(b.Cores) == 0 {
		return plan, nil
	}
	seen := map[int]bool{}
	for _, c := range b.Cores {
		if c < 0 {
			return nil, fmt.Errorf("cpu_binding: core %d is negative", c)
		}
		if seen[c] {
			return nil, fmt.Errorf("cpu_binding: core %d is listed twice", c)
		}
		seen[c] = true
	}
	cores := b.Cores
	switch b.Strategy {
	case "", api.BindRoundRobin:
		for i := range plan {
			plan[i] = []int{cores[i%len(cores)]}
		}
	case api.BindExclusive:
		if len(cores) < n {
			return nil, fmt.Errorf("cpu_binding: Exclusive needs at least one core per worker: %d workers, %d cores", n, len(cores))
		}
		for i := range plan {
			plan[i] = slices.Clone(cores[i*len(cores)/n : (i+1)*len(cores)/n])
		}
	case api.BindShared:
		for i := range plan {
			plan[i] = slices.Clone(cores)
		}
	default:
		return nil, fmt.Errorf("cpu_binding: unknown strategy %q (want %s, %s or %s)",
			b.Strategy, api.BindRoundRobin, api.BindExclusive, api.BindShared)
	}
	return plan, nil
}

// formatCPUs writes cores the way the kernel does in Cpus_allowed_list:
// "0-3,8,10-11".
func formatCPUs(cores []int) string {
	c := slices.Clone(cores)
	slices.Sort(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}
