package ensemble

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/coordinator/schedule"
)

// Limits on a spec, so that one request cannot ask Place for unbounded
// work: at most MaxAllocations × MaxCount replicas.
const (
	MaxAllocations = 100
	MaxCount       = 100
	MaxPorts       = 64 // host ports per replica
	// MaxRestoreDeadline bounds how long a lost node's replicas, and an
	// ensemble that fits nowhere, may wait.
	MaxRestoreDeadline = 24 * time.Hour
)

// The engine's CPU bounds, as workload.CheckContainer has them: a
// replica's resources become its container's limits.
const (
	minCPUs = 0.01
	maxCPUs = 1 << 20
)

// Validate checks a spec before it is placed. It returns an errdefs field
// error (ErrInvalid) naming the first bad field by its path, e.g.
// "allocations[1].count". It checks what the ensemble adds; the container
// job or service spec of each allocation is for workload.CheckContainer and
// workload.CheckService, which the caller runs with the field prefixed.
func Validate(spec api.EnsembleSpec) error {
	switch {
	case spec.Name == "":
		return errdefs.Field("name", "an ensemble needs a name")
	case !workload.DNSLabel.MatchString(spec.Name):
		return errdefs.Field("name", "%q is not a valid name: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", spec.Name)
	}
	switch n := len(spec.Allocations); {
	case n == 0:
		return errdefs.Field("allocations", "an ensemble needs at least one allocation")
	case n > MaxAllocations:
		return errdefs.Field("allocations", "%d allocations; at most %d", n, MaxAllocations)
	}
	seen := map[string]int{}
	for i, a := range spec.Allocations {
		field := fmt.Sprintf("allocations[%d]", i)
		if err := validateAllocation(field, a); err != nil {
			return err
		}
		if j, ok := seen[a.Name]; ok {
			return errdefs.Field(field+".name", "%q is the name of allocations[%d] too; names are unique in an ensemble", a.Name, j)
		}
		seen[a.Name] = i
	}
	switch d := time.Duration(spec.RestoreDeadline); {
	case d < 0:
		return errdefs.Field("restore_deadline", "%v is negative; leave it out for the default", d)
	case d > MaxRestoreDeadline:
		return errdefs.Field("restore_deadline", "%v is over the maximum of %v", d, MaxRestoreDeadline)
	case d > 0 && spec.NoRestore:
		return errdefs.Field("restore_deadline", "is set with no_restore; set one or the other")
	}
	switch d := time.Duration(spec.ProvisionDeadline); {
	case d < 0:
		return errdefs.Field("provision_deadline", "%v is negative; leave it out for the default", d)
	case d > MaxRestoreDeadline:
		return errdefs.Field("provision_deadline", "%v is over the maximum of %v", d, MaxRestoreDeadline)
	}
	if spec.Policy != "" && !slices.Contains(Policies, spec.Policy) {
		return errdefs.Field("policy", "unknown policy %q; want one of %s", spec.Policy, strings.Join(Policies, ", "))
	}
	return nil
}

func validateAllocation(field string, a api.AllocationSpec) error {
	switch {
	case a.Name == "":
		return errdefs.Field(field+".name", "an allocation needs a name")
	case !workload.DNSLabel.MatchString(a.Name):
		return errdefs.Field(field+".name", "%q is not a valid name: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", a.Name)
	}
	if err := validateKind(field, a); err != nil {
		return err
	}
	if a.Count < 0 || a.Count > MaxCount {
		return errdefs.Field(field+".count", "must be 1..%d (left out, 1); got %d", MaxCount, a.Count)
	}
	if err := validateResources(field+".resources", a.Resources); err != nil {
		return err
	}
	published := publishedPorts(a)
	switch {
	case a.Ports < 0 || a.Ports > MaxPorts:
		return errdefs.Field(field+".ports", "must be 0..%d; got %d", MaxPorts, a.Ports)
	case a.Ports > 0 && a.Ports < published:
		return errdefs.Field(field+".ports", "is %d, but the %s publishes %d; leave it out to take what it publishes", a.Ports, kindOf(a), published)
	case published > MaxPorts:
		return errdefs.Field(field+".ports", "the %s publishes %d ports; at most %d", kindOf(a), published, MaxPorts)
	}
	if err := validatePlacement(field+".placement", a.Placement); err != nil {
		return err
	}
	if a.Container != nil {
		return validateContainer(field+".container", a.Container, a.Resources)
	}
	return validateService(field+".service", a.Service, a.Resources)
}

// validateService refuses what the ensemble sets for each replica: its
// coordinate, its commitment, its books (from the allocation's resources)
// and its host port (from the node's allocator). Its limits are its own
// (they need cgroups on the node), but no higher than what it books.
func validateService(field string, spec *api.ServiceSpec, r api.Resources) error {
	switch {
	case spec.Coordinate != "":
		return errdefs.Field(field+".coordinate", "is assigned to each replica (REPLICA.ALLOCATION.ensemble.ENSEMBLE); leave it out")
	case spec.Commitment != "":
		return errdefs.Field(field+".commitment", "is made for each replica when the ensemble is placed; leave it out")
	case spec.Resources != nil:
		return errdefs.Field(field+".resources", "is set from the allocation's resources; leave it out")
	case spec.Port > 0:
		return errdefs.Field(field+".port", "%d names a host port; an ensemble's ports come from each node's port allocator: leave it out (or -1 for none)", spec.Port)
	}
	if l := spec.Limits; l != nil {
		if schedule.MilliCPUs(l.CPUs) > schedule.MilliCPUs(r.CPUs) {
			return errdefs.Field(field+".limits.cpus", "%v is over the allocation's resources.cpus %v: a replica may use no more than it books", l.CPUs, r.CPUs)
		}
		if l.MemoryMB > r.MemoryMB {
			return errdefs.Field(field+".limits.memory_mb", "%d is over the allocation's resources.memory_mb %d: a replica may use no more than it books", l.MemoryMB, r.MemoryMB)
		}
	}
	return nil
}

// validateKind checks that exactly one workload is given, and that Kind,
// when set, names it.
func validateKind(field string, a api.AllocationSpec) error {
	switch {
	case a.Container == nil && a.Service == nil:
		return errdefs.Field(field, "set one of container and service")
	case a.Container != nil && a.Service != nil:
		return errdefs.Field(field, "sets both container and service; an allocation runs one of them")
	}
	switch a.Kind {
	case "", kindOf(a):
		return nil
	case api.AllocationContainer, api.AllocationService:
		return errdefs.Field(field+".kind", "is %q, but %s is set", a.Kind, kindOf(a))
	}
	return errdefs.Field(field+".kind", "%q is not a kind an ensemble runs; use %q or %q", a.Kind, api.AllocationContainer, api.AllocationService)
}

func validateResources(field string, r api.Resources) error {
	switch c := r.CPUs; {
	case math.IsNaN(c) || math.IsInf(c, 0) || c < minCPUs:
		return errdefs.Field(field+".cpus", "must be at least %v cores: the books need what each replica takes; got %v", minCPUs, c)
	case c > maxCPUs:
		return errdefs.Field(field+".cpus", "%v cores is out of range", c)
	}
	switch m := r.MemoryMB; {
	case m < workload.MinContainerMemoryMB:
		return errdefs.Field(field+".memory_mb", "must be at least %d: the books need what each replica takes; got %d", workload.MinContainerMemoryMB, m)
	case m > math.MaxInt64>>20:
		return errdefs.Field(field+".memory_mb", "%d MiB is out of range", m)
	}
	if r.GPUs < 0 || r.GPUs > 1024 {
		return errdefs.Field(field+".gpus", "must be 0..1024; got %d", r.GPUs)
	}
	if r.DiskMB < 0 || r.DiskMB > math.MaxInt64>>20 {
		return errdefs.Field(field+".disk_mb", "must be 0 or more MiB, in range; got %d", r.DiskMB)
	}
	return nil
}

func validatePlacement(field string, p api.Placement) error {
	if err := validate.Tags(field+".tags", p.Tags); err != nil {
		return err
	}
	if err := validate.Groups(field+".groups", p.Groups); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, n := range p.Nodes {
		f := fmt.Sprintf("%s.nodes[%d]", field, i)
		if err := validate.Name(f, n); err != nil {
			return err
		}
		if seen[n] {
			return errdefs.Field(f, "node %q is listed twice", n)
		}
		seen[n] = true
	}
	if p.Spread && p.Pack {
		return errdefs.Field(field, "spread and pack exclude each other; set one")
	}
	return nil
}

// validateContainer refuses what the ensemble sets for each replica: its
// ID, its commitment, its limits (from the allocation's resources) and
// its host ports (from the node's allocator).
func validateContainer(field string, job *api.ContainerJob, r api.Resources) error {
	if job.ID != "" {
		return errdefs.Field(field+".id", "is assigned to each replica; leave it out")
	}
	if job.Commitment != "" {
		return errdefs.Field(field+".commitment", "is made for each replica when the ensemble is placed; leave it out")
	}
	if job.CPUs != 0 && schedule.MilliCPUs(job.CPUs) != schedule.MilliCPUs(r.CPUs) {
		return errdefs.Field(field+".cpus", "is %v, but the allocation's resources.cpus is %v; leave it out: the resources set it", job.CPUs, r.CPUs)
	}
	if job.MemoryMB != 0 && job.MemoryMB != r.MemoryMB {
		return errdefs.Field(field+".memory_mb", "is %d, but the allocation's resources.memory_mb is %d; leave it out: the resources set it", job.MemoryMB, r.MemoryMB)
	}
	for i, p := range job.Ports {
		if p.Host != 0 {
			return errdefs.Field(fmt.Sprintf("%s.ports[%d].host", field, i), "%d names a host port; an ensemble's ports come from each node's port allocator: leave it out", p.Host)
		}
	}
	return nil
}

// kindOf is the kind of the workload a (valid) allocation runs.
func kindOf(a api.AllocationSpec) string {
	if a.Container != nil {
		return api.AllocationContainer
	}
	return api.AllocationService
}

// publishedPorts is how many host ports a's workload publishes: one per
// container port; one for a service unless its port is -1.
func publishedPorts(a api.AllocationSpec) int {
	switch {
	case a.Container != nil:
		return len(a.Container.Ports)
	case a.Service != nil && a.Service.Port != -1:
		return 1
	}
	return 0
}

// portsPerReplica is how many host ports each replica of a takes.
func portsPerReplica(a api.AllocationSpec) int {
	if a.Ports > 0 {
		return a.Ports
	}
	return publishedPorts(a)
}

// replicas is a's count with the default filled in.
func replicas(a api.AllocationSpec) int {
	return max(a.Count, 1)
}
