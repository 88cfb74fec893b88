package api

import "time"

// EnsembleSpec is one manifest of several allocations — containers and
// services, each with a replica count, resources, ports and placement
// constraints — deployed across nodes as one (the seed's ensemble). It is
// placed all or nothing: every replica finds a node, or none is deployed.
//
// In YAML (nodemgr ensemble deploy -f):
//
//	name: shop
//	allocations:
//	  - name: db
//	    resources: {cpus: 2, memory_mb: 2048}
//	    placement: {tags: [ssd]}
//	    container: {image: postgres:16, ports: [{container: 5432}]}
//	  - name: web
//	    count: 3
//	    resources: {cpus: 0.5, memory_mb: 256}
//	    placement: {spread: true}
//	    container: {image: shop-web:1, ports: [{container: 8080}]}
type EnsembleSpec struct {
	Name        string           `json:"name" yaml:"name"` // a DNS label: a-z, 0-9, '-'
	Allocations []AllocationSpec `json:"allocations" yaml:"allocations"`
	// RestoreDeadline is how long the replicas of a lost node (offline)
	// wait for it to come back before they are placed on other nodes; 0
	// takes the server's default (the seed's: 5 minutes while running).
	RestoreDeadline Duration `json:"restore_deadline,omitempty" yaml:"restore_deadline"`
	// NoRestore leaves the replicas of a lost node where they are: the
	// ensemble is degraded until the node comes back or it is shut down.
	NoRestore bool `json:"no_restore,omitempty" yaml:"no_restore"`
	// Policy ranks the nodes that fit: binpack (the default: the fullest
	// first) or spread (the emptiest first).
	Policy string `json:"policy,omitempty" yaml:"policy"`
	// ProvisionDeadline is how long an ensemble that fits on no node
	// waits for the machines the pools start for it before it fails; 0
	// takes the server's default (10 minutes).
	ProvisionDeadline Duration `json:"provision_deadline,omitempty" yaml:"provision_deadline"`
}

// AllocationSpec is one workload of an ensemble: Count replicas of a
// container job or a service, each booking Resources and Ports on the node
// it is placed on. Exactly one of Container and Service is set.
type AllocationSpec struct {
	// Name is unique in the ensemble and a DNS label; the others find this
	// one's address and ports under it (NODEMGR_ALLOC_<NAME>_ADDR).
	Name string `json:"name" yaml:"name"`
	// Kind is AllocationContainer or AllocationService; empty takes the
	// kind of whichever of Container and Service is set.
	Kind  string `json:"kind,omitempty" yaml:"kind"`
	Count int    `json:"count,omitempty" yaml:"count"` // replicas, 1..100; 0 is 1
	// Resources is what each replica books on its node (CPUs, memory_mb,
	// gpus, disk_mb); CPUs and memory are required. A container's limits
	// are set from it.
	Resources Resources `json:"resources" yaml:"resources"`
	// Ports is how many host ports each replica takes from its node's port
	// allocator, 0..64; left out, what the workload publishes: one per
	// container port, one for a service unless its port is -1.
	Ports     int       `json:"ports,omitempty" yaml:"ports"`
	Placement Placement `json:"placement,omitzero" yaml:"placement"`

	Container *ContainerJob `json:"container,omitempty" yaml:"container"`
	Service   *ServiceSpec  `json:"service,omitempty" yaml:"service"`
}

// Placement constrains the nodes an allocation's replicas may go to, and
// how they are ranked. A node must carry every tag, be one of Nodes (by ID
// or name) when Nodes is set, and be in one of Groups when Groups is set.
type Placement struct {
	Tags   []string `json:"tags,omitempty" yaml:"tags"`
	Nodes  []string `json:"nodes,omitempty" yaml:"nodes"`
	Groups []string `json:"groups,omitempty" yaml:"groups"`
	// Spread puts no two replicas of the allocation on one node.
	Spread bool `json:"spread,omitempty" yaml:"spread"`
	// Pack ranks the allocation's nodes by binpack whatever the policy, so
	// its replicas fill the fullest nodes that fit, together where they
	// can. Not with Spread.
	Pack bool `json:"pack,omitempty" yaml:"pack"`
}

// States of an ensemble.
const (
	EnsembleWaiting   = "waiting"   // fits on no node yet; pools are starting machines for it
	EnsembleDeploying = "deploying" // committing and deploying its replicas
	EnsembleRunning   = "running"   // every replica runs
	EnsembleDegraded  = "degraded"  // some replica does not run (its node is lost, it exited)
	EnsembleFailed    = "failed"    // the deploy failed and was undone
	EnsembleShutDown  = "shut-down" // shut down by hand; its books are free
)

// Ensemble is a stored ensemble: its spec, where each replica went, and
// how it is.
type Ensemble struct {
	ID    string       `json:"id"`
	Name  string       `json:"name"`
	Spec  EnsembleSpec `json:"spec"`
	State string       `json:"state"`
	// Reason says why the ensemble failed or is degraded.
	Reason   string            `json:"reason,omitempty"`
	Owner    string            `json:"owner"`
	Replicas []EnsembleReplica `json:"replicas"`
	// Allocations sums the replicas up by allocation, in the spec's order
	// (filled in for running and degraded ensembles).
	Allocations []AllocationStatus `json:"allocations,omitempty"`
	// Lost are replicas that were placed again elsewhere while their node
	// was gone; each is deleted when its node comes back.
	Lost      []EnsembleReplica `json:"lost,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// AllocationStatus is how an allocation of an ensemble is: running while
// every replica runs, degraded while some do not.
type AllocationStatus struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // container or service
	State    string `json:"state"`
	Replicas int    `json:"replicas"`
	Running  int    `json:"running"`
}

// EnsembleReplica is one replica of an allocation on its node.
type EnsembleReplica struct {
	Allocation string `json:"allocation"`
	Replica    int    `json:"replica"` // 1-based
	NodeID     string `json:"node_id"`
	NodeName   string `json:"node_name"`
	// Why the node was chosen ("binpack: leaves 0.5 CPUs free; best of 3").
	Why       string `json:"why,omitempty"`
	Container string `json:"container,omitempty"` // the container job's id, for a container
	Service   string `json:"service,omitempty"`   // the service's coordinate, for a service
	// Status is the container's or service's state as last reported;
	// ContainerUnknown or ServiceUnknown while its node is offline.
	Status string `json:"status,omitempty"`
	// Ports are the host ports bound: a container's by its ports, a
	// service's one port with container 0.
	Ports []ContainerPort `json:"ports,omitempty"`
	// Restores counts the times the replica was placed again because its
	// node was lost.
	Restores int `json:"restores,omitempty"`
}

// EnsembleList is the body of GET /v1/ensembles.
type EnsembleList struct {
	Ensembles []Ensemble `json:"ensembles"`
}
