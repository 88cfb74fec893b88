package capacity

import (
	"math"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// checkCommitment validates a commitment request and returns it with what
// it wants.
func checkCommitment(owner string, r api.Resources, ports []int, ttl time.Duration) (api.Commitment, amount, error) {
	if owner == "" {
		return api.Commitment{}, amount{}, errdefs.Field("owner", "must not be empty; say who commits (e.g. the job id)")
	}
	if ttl <= 0 {
		return api.Commitment{}, amount{}, errdefs.Field("ttl", "must be positive, got %v", ttl)
	}
	if err := checkResources(r); err != nil {
		return api.Commitment{}, amount{}, err
	}
	if err := checkPorts(ports); err != nil {
		return api.Commitment{}, amount{}, err
	}
	want := toAmount(r)
	return api.Commitment{Owner: owner, Resources: want.resources(), Ports: slices.Clone(ports)}, want, nil
}

// checkAllocation validates an allocation request and returns it, with its
// slices copied and CPUs rounded, and what it wants.
func (l *Ledger) checkAllocation(a api.Allocation) (api.Allocation, amount, error) {
	switch a.Kind {
	case api.AllocationPool, api.AllocationService, api.AllocationContainer:
	default:
		return a, amount{}, errdefs.Field("kind", "must be %s, %s or %s, got %q",
			api.AllocationPool, api.AllocationService, api.AllocationContainer, a.Kind)
	}
	if a.Name == "" {
		return a, amount{}, errdefs.Field("name", "must not be empty; name the suite, service or container")
	}
	if len(a.ID) > maxIDLen {
		return a, amount{}, errdefs.Field("id", "is %d bytes long; at most %d", len(a.ID), maxIDLen)
	}
	if err := checkResources(a.Resources); err != nil {
		return a, amount{}, err
	}
	if err := checkPorts(a.Ports); err != nil {
		return a, amount{}, err
	}
	if err := l.checkGPUIndexes(a.GPUIndexes); err != nil {
		return a, amount{}, err
	}
	if n := len(a.GPUIndexes); n > 0 && a.GPUs == 0 {
		a.GPUs = n
	} else if n > 0 && n != a.GPUs {
		return a, amount{}, errdefs.Field("gpus", "is %d, but gpu_indexes lists %d GPUs", a.GPUs, n)
	}
	want := toAmount(a.Resources)
	a.Resources = want.resources()
	a.Ports, a.GPUIndexes = slices.Clone(a.Ports), slices.Clone(a.GPUIndexes)
	return a, want, nil
}

// maxIDLen and maxStateLen cap what callers name: it is stored and quoted
// in messages.
const (
	maxIDLen    = 128
	maxStateLen = 64
)

// checkResources validates an amount asked for.
func checkResources(r api.Resources) error {
	switch {
	case math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) || r.CPUs < 0:
		return errdefs.Field("cpus", "must be a number ≥ 0, got %v", r.CPUs)
	case r.MemoryMB < 0:
		return errdefs.Field("memory_mb", "must not be negative, got %d", r.MemoryMB)
	case r.DiskMB < 0:
		return errdefs.Field("disk_mb", "must not be negative, got %d", r.DiskMB)
	case r.GPUs < 0:
		return errdefs.Field("gpus", "must not be negative, got %d", r.GPUs)
	case r.CPUs > 1<<30:
		return errdefs.Field("cpus", "%v is more than any machine has", r.CPUs)
	}
	return nil
}

// checkPorts validates the ports of a request.
func checkPorts(ports []int) error {
	seen := make(map[int]bool, len(ports))
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return errdefs.Field("ports", "%d is not a port number (1-65535)", p)
		}
		if seen[p] {
			return errdefs.Field("ports", "lists port %d twice", p)
		}
		seen[p] = true
	}
	return nil
}

// checkGPUIndexes checks that the GPUs asked for by index exist.
func (l *Ledger) checkGPUIndexes(idx []int) error {
	seen := make(map[int]bool, len(idx))
	for _, i := range idx {
		if !slices.ContainsFunc(l.hw.GPUs, func(g api.GPU) bool { return g.Index == i }) {
			return errdefs.Field("gpu_indexes", "this node has no GPU %d (it has %v)", i, l.gpuIndexes())
		}
		if seen[i] {
			return errdefs.Field("gpu_indexes", "lists GPU %d twice", i)
		}
		seen[i] = true
	}
	return nil
}

// gpuIndexes returns the indexes of the machine's GPUs, in order.
func (l *Ledger) gpuIndexes() []int {
	idx := make([]int, 0, len(l.hw.GPUs))
	for _, g := range l.hw.GPUs {
		idx = append(idx, g.Index)
	}
	slices.Sort(idx)
	return idx
}
