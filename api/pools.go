package api

import "time"

// PoolSpec declares a pool of machines that nodemgr keeps sized to demand:
// it provisions them from a template on a provider (or from the candidate
// the scheduler ranks first), bootstraps an agent onto each, and destroys
// them when they have been idle for IdleTimeout. It is the body of
// PUT /v1/pools/{pool} and the file of `nodemgr pool apply -f`.
type PoolSpec struct {
	Name string `json:"name"`
	// Template and Provider name the one kind of machine the pool makes;
	// Candidates names several instead, for the scheduler to choose from.
	Template   string          `json:"template,omitempty"`
	Provider   string          `json:"provider,omitempty"`
	Candidates []PoolCandidate `json:"candidates,omitempty"`
	// Policy ranks the candidates: cheapest (default), fastest, spread,
	// binpack, prefer-local.
	Policy string `json:"policy,omitempty"`
	// Tags, Labels and Groups are given to the pool's agents. A suite
	// whose tags they carry, and whose group may use them, is demand.
	Tags   []string          `json:"tags,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Groups []string          `json:"groups,omitempty"`
	// Min machines are kept running whatever the demand; Max is never
	// exceeded (machines on their way count).
	Min int `json:"min"`
	Max int `json:"max"`
	// MaxCPUs and MaxMemoryMB cap the pool's machines together, by the
	// sizes their templates give; 0 is no cap.
	MaxCPUs     float64 `json:"max_cpus,omitempty"`
	MaxMemoryMB int64   `json:"max_memory_mb,omitempty"`
	// IdleTimeout is how long a machine runs no suite, service or
	// container before it is drained and destroyed; default 5m.
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// BootstrapTimeout is how long a provisioned machine's agent has to
	// register before the machine is destroyed and replaced; default 3m.
	// The provider's own launch time is not counted in it.
	BootstrapTimeout Duration `json:"bootstrap_timeout,omitempty"`
	// MaxLaunching caps machines being provisioned or bootstrapped at
	// once; default 4.
	MaxLaunching int `json:"max_launching,omitempty"`
	// MinAge is the least time a machine lives before it may be scaled
	// down, so that bursty demand does not make machines flap; default 1m
	// (capped by IdleTimeout).
	MinAge Duration `json:"min_age,omitempty"`
	// Paused, when true, stops the pool launching machines (min and demand
	// alike); the machines it has stay, and go as their idle timeout says.
	Paused bool `json:"paused,omitempty"`
	// Priority orders pools that compete for the same demand: higher
	// first, then the cheaper (by their best known candidate price), then
	// by name. Default 0.
	Priority int `json:"priority,omitempty"`
}

// PoolPatch is the body of PATCH /v1/pools/{pool}: only the fields
// present change.
type PoolPatch struct {
	Min      *int  `json:"min,omitempty"`
	Max      *int  `json:"max,omitempty"`
	Paused   *bool `json:"paused,omitempty"`
	Priority *int  `json:"priority,omitempty"`
}

// PoolCandidate is one template/provider pair a pool may make machines from.
type PoolCandidate struct {
	Template string `json:"template"`
	Provider string `json:"provider"`
	// Price is per hour, for the cheapest policy: absent is unknown
	// (ranked after priced candidates), 0 is free (ranked first).
	Price *float64 `json:"price,omitempty"`
}

// Pool machine states. A machine moves requested → provisioning →
// bootstrapping → ready → draining → terminating → gone; it is failed
// (with the reason) when provisioning or bootstrapping fails or times out,
// after nodemgr has destroyed what was made.
const (
	MachineRequested     = "requested"
	MachineProvisioning  = "provisioning"
	MachineBootstrapping = "bootstrapping"
	MachineReady         = "ready"
	MachineDraining      = "draining"
	MachineTerminating   = "terminating"
	MachineGone          = "gone"
	MachineFailed        = "failed"
)

// Pool is a pool as the server keeps it: its spec and what it has now.
type Pool struct {
	Spec PoolSpec `json:"spec"`
	// Machines counts the pool's machines that are not gone or failed, by state.
	Machines map[string]int `json:"machines"`
	// Desired is how many machines the pool wants now (demand, within
	// min and max), and Demand says where that number came from.
	Desired int    `json:"desired"`
	Demand  string `json:"demand,omitempty"`
	// Waiting says in one line why the pool does not have Desired machines
	// ready, if it does not.
	Waiting   string    `json:"waiting,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PoolDetail is the body of GET /v1/pools/{pool}: the pool and its live
// machines, and its machines that ended recently.
type PoolDetail struct {
	Pool
	MachineList []PoolMachine `json:"machine_list"`
}

// PoolMachine is one machine of a pool.
type PoolMachine struct {
	ID          string     `json:"id"`
	Pool        string     `json:"pool"`
	Template    string     `json:"template"`
	Provider    string     `json:"provider"`
	State       string     `json:"state"`
	StateReason string     `json:"state_reason,omitempty"`
	Deployment  string     `json:"deployment,omitempty"` // deployment ID
	Node        string     `json:"node,omitempty"`       // node ID, once its agent registered
	CreatedAt   time.Time  `json:"created_at"`
	ReadyAt     *time.Time `json:"ready_at,omitempty"`
	// IdleSince is when the machine last had work: a suite, a service or
	// a container. Absent while it has some.
	IdleSince *time.Time `json:"idle_since,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// PoolList is the body of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
	Next  string `json:"next,omitempty"`
}

// PoolEvent is one decision a pool made, with its reason.
type PoolEvent struct {
	ID      int64     `json:"id"`
	Pool    string    `json:"pool"`
	Machine string    `json:"machine,omitempty"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // scale-up, scale-down, launched, bootstrapped, ready, failed, backoff, waiting, gone ...
	Message string    `json:"message"`
}

// PoolEventList is the body of GET /v1/pools/{pool}/events.
type PoolEventList struct {
	Events []PoolEvent `json:"events"`
	Next   string      `json:"next,omitempty"`
}

// ScheduleRequest is the body of POST /v1/schedule/explain: what one
// machine must have.
type ScheduleRequest struct {
	CPUs     float64  `json:"cpus,omitempty"`
	MemoryMB int64    `json:"memory_mb,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	Arch     string   `json:"arch,omitempty"`
	Policy   string   `json:"policy,omitempty"`
}

// ScheduleVerdict is one candidate as the scheduler judged it.
type ScheduleVerdict struct {
	Pool     string   `json:"pool,omitempty"`
	Template string   `json:"template"`
	Provider string   `json:"provider"`
	Price    *float64 `json:"price,omitempty"` // absent: unknown; 0: free
	CPUs     float64  `json:"cpus,omitempty"`
	MemoryMB int64    `json:"memory_mb,omitempty"`
	BootP50  Duration `json:"boot_p50,omitempty"`
	Feasible bool     `json:"feasible"`
	Reasons  []string `json:"reasons,omitempty"` // why it is infeasible
	Rank     int      `json:"rank,omitempty"`    // 1 is chosen; 0 infeasible
	Why      string   `json:"why,omitempty"`     // its rank's reason
}

// ScheduleExplanation is the answer of POST /v1/schedule/explain: every
// candidate of every pool, feasible first in rank order.
type ScheduleExplanation struct {
	Policy     string            `json:"policy"`
	Candidates []ScheduleVerdict `json:"candidates"`
}
