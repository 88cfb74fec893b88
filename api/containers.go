package api

import (
	"strings"
	"time"
)

// Container commands: the seed's node engine message verbs. The agent
// acts only on deploy and delete; the server carries out move and
// replicate as deletes and deploys on the nodes involved.
const (
	ContainerDeploy    = "deploy"
	ContainerDelete    = "delete"
	ContainerMove      = "move"
	ContainerReplicate = "replicate"
)

// Container technologies. Only docker runs today; unikernel is named by
// the seed and refused with a clear message.
const (
	TechnologyDocker    = "docker"
	TechnologyUnikernel = "unikernel"
)

// Container statuses. A job goes creating → running → completed | failed |
// dead, and any of them → undeployed when it is deleted. The seed spells
// them in capitals, as agents before nodemgr's single casing of states
// did: ContainerStatus reads either.
const (
	ContainerCreating   = "creating"
	ContainerRunning    = "running"
	ContainerCompleted  = "completed"  // exited with code 0
	ContainerFailed     = "failed"     // exited non-zero, could not be started, or removed outside nodemgr
	ContainerDead       = "dead"       // killed for want of memory, or dead in the engine
	ContainerUndeployed = "undeployed" // deleted
	// ContainerUnknown is the server's word for a job not yet ended
	// whose node is offline: what it last reported (Reason says) may no
	// longer hold. No agent reports it, and the server keeps the last
	// report; the status shows again once the node is back.
	ContainerUnknown = "unknown"
)

// ContainerStatus is a container status in the one casing of states;
// agents and records before it spell them in capitals.
func ContainerStatus(s string) string { return strings.ToLower(s) }

// ContainerJob describes a container to run on a node (the seed's "job").
// It runs until its command exits, and again only as its Restart policy
// says.
type ContainerJob struct {
	// ID names the job on the node; empty lets the server (or the agent,
	// when it is deployed locally) assign a short unique one.
	ID   string `json:"id,omitempty" yaml:"id"`
	Name string `json:"name" yaml:"name"` // a DNS label: a-z, 0-9, '-'
	// Image must be on the node already (docker load / docker import), or
	// pullable by the node's engine.
	Image      string `json:"image" yaml:"image"`
	Technology string `json:"technology,omitempty" yaml:"technology"` // docker (default)
	// Command replaces the image's command; empty keeps it.
	Command []string          `json:"command,omitempty" yaml:"command"`
	Env     map[string]string `json:"env,omitempty" yaml:"env"`
	// CPUs limits the container's CPU time, in cores (0.5 is half a core);
	// 0 takes the node's default (the agent's container_defaults): the
	// node books what the engine enforces.
	CPUs float64 `json:"cpus,omitempty" yaml:"cpus"`
	// MemoryMB limits the container's memory (swap included), at least 6
	// (the engine's minimum); 0 takes the node's default.
	MemoryMB int64             `json:"memory_mb,omitempty" yaml:"memory_mb"`
	Ports    []ContainerPort   `json:"ports,omitempty" yaml:"ports"`
	Labels   map[string]string `json:"labels,omitempty" yaml:"labels"`
	// Commitment names resources locked on the node beforehand (nodemgr
	// node commit); the job's allocation is made from them.
	Commitment string `json:"commitment,omitempty" yaml:"commitment"`
	// Restart says whether the agent starts the job's container again
	// when it exits; by default it runs once.
	Restart ContainerRestart `json:"restart,omitzero" yaml:"restart"`
	// StopTimeout is how long a stop (delete, move, allocation stop) lets
	// the container exit on SIGTERM before SIGKILL; 0: the agent's
	// default (10s). At most 1h.
	StopTimeout Duration `json:"stop_timeout,omitempty" yaml:"stop_timeout"`
	// Volumes mounts named volumes, or directories of the job's runtime
	// dir, into the container.
	Volumes []ContainerVolume `json:"volumes,omitempty" yaml:"volumes"`
	// PullPolicy says when the node's engine pulls the image: never (the
	// default: it must be on the node), if-not-present, or always.
	PullPolicy string `json:"pull_policy,omitempty" yaml:"pull_policy"`
}

// Container restart policies, as services have them.
const (
	ContainerRestartNever     = "never"      // run once (default)
	ContainerRestartOnFailure = "on-failure" // again after a non-zero exit or an OOM kill
	ContainerRestartAlways    = "always"     // again after any exit
)

// ContainerRestart is a container job's restart policy. The agent, not
// the engine, restarts the container, so that the job's status, its
// restarts and the node's books stay right.
type ContainerRestart struct {
	Policy string `json:"policy,omitempty" yaml:"policy"` // never (default), on-failure, always
	// MaxRetries bounds the restarts; once spent, the job keeps the status
	// of its last exit. 0: 3 for on-failure, no bound for always.
	MaxRetries int `json:"max_retries,omitempty" yaml:"max_retries"`
}

// Image pull policies.
const (
	PullNever        = "never"
	PullIfNotPresent = "if-not-present"
	PullAlways       = "always"
)

// ContainerVolume mounts Source at Target in the container. Source is a
// named volume (a-z, 0-9, '_', '.', '-'; the engine makes it, and it
// outlives the job), or a path: a relative one ("./data", "data/x") is
// inside the job's runtime dir on the node, an absolute one must be
// inside it too. Host paths outside the runtime dir are refused.
type ContainerVolume struct {
	Source   string `json:"source" yaml:"source"`
	Target   string `json:"target" yaml:"target"` // an absolute path in the container
	ReadOnly bool   `json:"read_only,omitempty" yaml:"read_only"`
}

// ContainerPort publishes a container port on the node.
type ContainerPort struct {
	Container int `json:"container" yaml:"container"`
	// Host is the node's port; 0 takes one from the node's port allocator.
	// In a Container's Ports it is the port actually bound.
	Host     int    `json:"host,omitempty" yaml:"host"`
	Protocol string `json:"protocol,omitempty" yaml:"protocol"` // tcp (default) or udp
}

// ContainerCommand is the seed's message from the server to a node:
// {command, job, cluster, worker}. For move and replicate, Worker lists
// the target node IDs.
type ContainerCommand struct {
	Command string       `json:"command" yaml:"command"`
	Job     ContainerJob `json:"job" yaml:"job"`
	Cluster []string     `json:"cluster,omitempty" yaml:"cluster"`
	Worker  []string     `json:"worker,omitempty" yaml:"worker"`
}

// ContainerList is the body of GET /v1/containers: one page, and where the
// next starts.
type ContainerList struct {
	Containers []Container `json:"containers"`
	Next       string      `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// Container is a job and its live status on a node.
type Container struct {
	Job  ContainerJob `json:"job"`
	Node string       `json:"node,omitempty"` // the node's ID
	// NodeName is the node's name, as the server knows it now; the agent's
	// local API leaves it out.
	NodeName    string `json:"node_name,omitempty"`
	Status      string `json:"status"`
	ContainerID string `json:"container_id,omitempty"` // the engine's ID
	ExitCode    *int   `json:"exit_code,omitempty"`
	// Reason says why the job is FAILED or DEAD, e.g. "exit code 3" or
	// "out of memory".
	Reason     string          `json:"reason,omitempty"`
	Ports      []ContainerPort `json:"ports,omitempty"` // with the host ports bound
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Usage      *ContainerUsage `json:"usage,omitempty"` // the latest sample, while it runs
	// Restarts counts the times the agent started the container again
	// (the job's restart policy).
	Restarts int `json:"restarts,omitempty"`
	// RuntimeDir is the job's directory on the node that relative volume
	// sources are in; set when the job has such a volume.
	RuntimeDir string `json:"runtime_dir,omitempty"`
}

// ContainerUsage is one sample of what a running container uses.
type ContainerUsage struct {
	// CPUPercent is CPU time over the last sampling interval, where 100 is
	// one full core; 0 on the first sample.
	CPUPercent       float64   `json:"cpu_percent"`
	MemoryBytes      uint64    `json:"memory_bytes"` // without the page cache
	MemoryLimitBytes uint64    `json:"memory_limit_bytes,omitempty"`
	At               time.Time `json:"at"`
}

// ContainerFinal reports whether status is one a job does not leave on its
// own: COMPLETED, FAILED, DEAD or UNDEPLOYED.
func ContainerFinal(status string) bool {
	switch status {
	case ContainerCompleted, ContainerFailed, ContainerDead, ContainerUndeployed:
		return true
	}
	return false
}

// MethodContainersReport (agent → server request, body ContainerReport)
// carries container status changes and usage samples; after hello it
// carries every job the agent has.
const MethodContainersReport = "containers.report"

// ContainerReport is what an agent reports about its containers.
type ContainerReport struct {
	Containers []Container `json:"containers"`
}
