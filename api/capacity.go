package api

import "time"

// Allocation kinds: every workload on a node holds its resources as one
// allocation of one of these kinds.
const (
	AllocationPool      = "pool"      // a suite's worker pool; Name is the suite id
	AllocationService   = "service"   // a service; Name is its coordinate
	AllocationContainer = "container" // a container job; Name is the job id
)

// Resources is an amount of a node's resources. MB means MiB (2^20 bytes)
// throughout, as in docker's --memory 512m. CPUs are counted in thousandths
// of a core; finer fractions are rounded.
type Resources struct {
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memory_mb"`
	DiskMB   int64   `json:"disk_mb"`
	GPUs     int     `json:"gpus"`
}

// Capability is what a node's machine has, measured when it is onboarded
// (the seed's "registered capability").
type Capability struct {
	Resources
	// CPUScore is the speed of one core: SHA-256 throughput in MiB/s,
	// hashing a 64 KiB buffer over and over. Higher is faster; it compares
	// nodes with each other, not with other benchmarks (CPUs with SHA
	// extensions score several times higher than those without).
	CPUScore   float64   `json:"cpu_score"`
	MeasuredAt time.Time `json:"measured_at"`
}

// Onboarding says whether a node offers its resources to workloads, and
// how much of them: the share of what it registered.
type Onboarding struct {
	Onboarded    bool       `json:"onboarded"`
	SharePercent int        `json:"share_percent,omitempty"` // 10..90
	Registered   Capability `json:"registered"`
	// Offered is Registered × SharePercent, rounded down: CPUs to
	// hundredths, memory and disk to whole MB, GPUs to whole GPUs.
	Offered     Resources `json:"offered"`
	OnboardedAt time.Time `json:"onboarded_at,omitzero"`
}

// Commitment is a reservation made before a workload is placed (the
// seed's "locked capability"), e.g. by a scheduler that is about to
// deploy a job. It holds its resources and ports until it is turned into
// an allocation, released, or it expires by itself. It holds GPUs by
// count; the allocation picks the indexes.
type Commitment struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	Resources
	Ports     []int     `json:"ports,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Allocation is one workload's hold on a node's resources and ports.
type Allocation struct {
	ID   string `json:"id"`   // assigned by the node when empty
	Kind string `json:"kind"` // AllocationPool, AllocationService or AllocationContainer
	Name string `json:"name"` // suite id, service coordinate or container job id
	Resources
	// GPUIndexes are the GPUs held, by nvidia-smi index. Empty in a
	// request lets the node pick Resources.GPUs free ones.
	GPUIndexes []int `json:"gpu_indexes,omitempty"`
	Ports      []int `json:"ports,omitempty"`
	// State is informational ("running", "stopped", ...): the workload's
	// owner sets it; the books do not act on it.
	State     string    `json:"state,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// NodeResources is a node's books: what it offers, what is committed and
// allocated, and what is free (GET .../resources, `nodemgr node resources`).
type NodeResources struct {
	Onboarding
	Committed Resources `json:"committed"`
	Allocated Resources `json:"allocated"`
	// Free is Offered − Committed − Allocated, never negative.
	Free Resources `json:"free"`
	// MachineFree is what the machine really has free now, whoever uses
	// the rest: MemAvailable from /proc/meminfo, the disk space available
	// under the agent's data dir, and idle CPUs estimated as cores minus
	// the 1-minute load average. GPUs are not measured (0). It is absent
	// where it could not be measured, and MachineFreeError says why.
	MachineFree      *Resources    `json:"machine_free,omitempty"`
	MachineFreeError string        `json:"machine_free_error,omitempty"`
	Usage            *MachineUsage `json:"usage,omitempty"` // derived from MachineFree
	Commitments      []Commitment  `json:"commitments"`
	Allocations      []Allocation  `json:"allocations"`
	// AsOf is set when the server answers from its copy of the books
	// because the agent is not connected: when the agent reported them.
	AsOf *time.Time `json:"as_of,omitempty"`
}

// MethodResourcesReport (agent → server request, body NodeResources)
// gives the server a copy of the node's books, which it shows while the
// agent is not connected.
const MethodResourcesReport = "resources.report"

// MachineUsage is how busy the whole machine is, by all its processes.
type MachineUsage struct {
	CPUPercent   float64 `json:"cpu_percent"` // 1-minute load average over cores, capped at 100
	MemoryUsedMB int64   `json:"memory_used_mb"`
	DiskUsedMB   int64   `json:"disk_used_mb"`
}

// UsageSample is a node's machine usage at one time, as its heartbeats
// carried it.
type UsageSample struct {
	At           time.Time `json:"at"`
	CPUPercent   float64   `json:"cpu_percent"`
	MemoryUsedMB int64     `json:"memory_used_mb"`
}

// UsageHistory is the body of GET /v1/nodes/{node}/usage: the last hour
// of a node's usage, one sample per minute (the latest heartbeat of each
// minute), oldest first. The server that the agent is connected to keeps
// them in memory only: after a restart, or on another replica, the list is
// shorter or empty.
type UsageHistory struct {
	Node    string        `json:"node"`
	Samples []UsageSample `json:"samples"`
}

// OnboardRequest is the body of an onboard request: the share of the
// machine to offer.
type OnboardRequest struct {
	SharePercent int `json:"share_percent"` // 10..90
}

// CommitRequest locks resources and ports on a node for a while, for a
// workload about to be placed there (POST .../commitments). A container
// job that names the commitment turns it into its allocation.
type CommitRequest struct {
	Owner     string   `json:"owner"` // who commits, e.g. a scheduler's job id
	Resources          // what to lock
	Ports     []int    `json:"ports,omitempty"`
	TTL       Duration `json:"ttl"` // how long the lock holds if unused
}

// AllocationList is the body of GET /v1/nodes/{node}/allocations.
type AllocationList struct {
	Allocations []Allocation `json:"allocations"`
}
