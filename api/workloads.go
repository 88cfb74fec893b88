package api

import (
	"encoding/json"
	"time"
)

// Artifact is one artifact version installed on a node, read-only under
// <prefix>/software/<group>/<artifact>/<version>.
type Artifact struct {
	ID          string    `json:"id"`           // group:artifact:version
	Path        string    `json:"path"`         // the installed tree
	Source      string    `json:"source"`       // URL of the archive it came from
	Checksum    string    `json:"checksum"`     // "sha256:<hex>" or "md5:<hex>", as verified
	Size        int64     `json:"size"`         // bytes unpacked
	Files       int       `json:"files"`        // entries unpacked
	InstalledAt time.Time `json:"installed_at"` // UTC
	// UsedBy lists the coordinates of the services that run from it; an
	// artifact in use cannot be removed.
	UsedBy []string `json:"used_by,omitempty"`
}

// ArtifactInstall is the body of an artifact install request.
type ArtifactInstall struct {
	ID string `json:"id"` // group:artifact:version
}

// ServiceSpec describes a supervised service (nodee's "start service"):
// a process started from an installed artifact, identified by its
// coordinate instance.service.user.cell, running in its own runtime dir
// <prefix>/runtime/<cell>/<user>/<service>/<instance>.
type ServiceSpec struct {
	Coordinate string `json:"coordinate" yaml:"coordinate"` // instance.service.user.cell
	Artifact   string `json:"artifact" yaml:"artifact"`     // group:artifact:version, installed on the node
	// Command is the argv; a relative argv[0] is resolved in the artifact's
	// tree ("bin/server"), an absolute one is used as it is.
	Command []string `json:"command" yaml:"command"`
	// Options are passed as --key=value arguments after Command, in key
	// order, and as NODEMGR_OPT_<KEY> environment variables.
	Options map[string]string `json:"options,omitempty" yaml:"options"`
	Env     map[string]string `json:"env,omitempty" yaml:"env"`
	// Port is the port the service should listen on: 0 takes a free one
	// from the node's port allocator, -1 takes none. The service finds it in
	// PORT and NODEMGR_PORT.
	Port int `json:"port,omitempty" yaml:"port"`
	// ExpectedMemoryMB is what the service is expected to use; it is
	// reported beside the measured RSS.
	ExpectedMemoryMB int64 `json:"expected_memory_mb,omitempty" yaml:"expected_memory_mb"`
	// Files pre-populate the runtime dir before the first start.
	Files   []ServiceFile `json:"files,omitempty" yaml:"files"`
	Restart RestartPolicy `json:"restart" yaml:"restart"`
	Drain   DrainSpec     `json:"drain" yaml:"drain"`
	// StopGrace is how long stop waits after SIGTERM before SIGKILL
	// (default 10s).
	StopGrace Duration `json:"stop_grace,omitempty" yaml:"stop_grace"`
	Logs      LogSpec  `json:"logs" yaml:"logs"`
	// User runs the service as this user of the node (its uid, gid and
	// supplementary groups); empty runs it as the agent's user. The
	// runtime dir is given to it; the software tree stays root's and
	// read-only.
	User string `json:"user,omitempty" yaml:"user"`
	// Limits are enforced with cgroups; nil: none.
	Limits *ServiceLimits `json:"limits,omitempty" yaml:"limits"`
	// Resources is what the service holds in the node's books while it
	// runs or is about to; left out, its expected_memory_mb of memory.
	Resources *Resources `json:"resources,omitempty" yaml:"resources"`
	// Commitment names a commitment of the node's books that the service's
	// first start books from (an ensemble locks each replica's resources
	// before it deploys). It is used up there: a later restart books
	// afresh, and the stored spec does not keep it.
	Commitment string `json:"commitment,omitempty" yaml:"commitment"`
}

// ServiceLimits caps what a service's processes, all of them, may use:
// over MemoryMB the kernel's OOM killer kills one of them (the supervisor
// records the OOM kill), and their CPU time is throttled to CPUs cores.
// Zero is no limit.
type ServiceLimits struct {
	MemoryMB int64   `json:"memory_mb,omitempty" yaml:"memory_mb"`
	CPUs     float64 `json:"cpus,omitempty" yaml:"cpus"`
}

// ServiceFile is one file put into a runtime dir before the service starts:
// copied from the artifact's tree (From) or downloaded (URL). An existing
// file is kept unless Overwrite is set, so saved state survives restarts.
type ServiceFile struct {
	Path      string `json:"path" yaml:"path"`                     // relative to the runtime dir
	From      string `json:"from,omitempty" yaml:"from"`           // relative to the artifact's tree
	URL       string `json:"url,omitempty" yaml:"url"`             // http(s)
	Mode      string `json:"mode,omitempty" yaml:"mode"`           // octal, default "0644"
	Overwrite bool   `json:"overwrite,omitempty" yaml:"overwrite"` // replace an existing file
}

// Restart policies.
const (
	RestartAlways    = "always"     // restart whenever it exits (default)
	RestartOnFailure = "on-failure" // restart unless it exits 0
	RestartNever     = "never"
)

// RestartPolicy says when a service that exits on its own is started again.
// A run shorter than MinPeriod counts as a quick death; after MaxRestarts
// quick deaths in a row the service is marked failed and left alone. The
// wait before a restart starts at Delay and doubles with each quick death,
// up to a minute.
type RestartPolicy struct {
	Policy      string   `json:"policy,omitempty" yaml:"policy"`             // always (default), on-failure, never
	MinPeriod   Duration `json:"min_period,omitempty" yaml:"min_period"`     // default 10s
	MaxRestarts int      `json:"max_restarts,omitempty" yaml:"max_restarts"` // default 5
	Delay       Duration `json:"delay,omitempty" yaml:"delay"`               // default 1s
}

// DrainSpec says how a service is asked to stop taking new work before it
// is stopped: run Command (in the runtime dir, with the service's
// environment) or send Signal; then wait up to Timeout (default 30s) for
// the service to exit by itself before stopping it.
type DrainSpec struct {
	Command []string `json:"command,omitempty" yaml:"command"`
	Signal  string   `json:"signal,omitempty" yaml:"signal"` // e.g. SIGUSR1
	Timeout Duration `json:"timeout,omitempty" yaml:"timeout"`
}

// LogSpec caps a service's log: <runtime dir>/logs/service.log is rotated
// to service.log.1 ... service.log.<Keep> when it passes MaxSizeMB.
type LogSpec struct {
	MaxSizeMB int `json:"max_size_mb,omitempty" yaml:"max_size_mb"` // default 10
	Keep      int `json:"keep,omitempty" yaml:"keep"`               // default 3
}

// Service states.
const (
	ServiceStarting   = "starting"
	ServiceRunning    = "running"
	ServiceDraining   = "draining"
	ServiceStopping   = "stopping"
	ServiceStopped    = "stopped"    // stopped on request
	ServiceRestarting = "restarting" // exited; waiting to be started again
	ServiceExited     = "exited"     // exited, and the policy does not restart it
	ServiceFailed     = "failed"     // died too often; left alone
	// ServiceUnknown is the server's word for an ensemble's service
	// replica whose node is offline; no agent reports it.
	ServiceUnknown = "unknown"
)

// Service is a service's spec and its live status.
type Service struct {
	Spec       ServiceSpec `json:"spec"`
	State      string      `json:"state"`
	PID        int         `json:"pid,omitempty"`
	Port       int         `json:"port,omitempty"`
	RuntimeDir string      `json:"runtime_dir"`
	RSSBytes   uint64      `json:"rss_bytes,omitempty"`
	Restarts   int         `json:"restarts"` // starts after the first
	StartedAt  *time.Time  `json:"started_at,omitempty"`
	// LastExit says how the last run ended, e.g. "exit status 3" or
	// "signal: killed"; "unknown" when the process was adopted after an
	// agent restart and its status could not be collected.
	LastExit   string     `json:"last_exit,omitempty"`
	LastExitAt *time.Time `json:"last_exit_at,omitempty"`
	Reason     string     `json:"reason,omitempty"` // why it is failed or stopped
}

// ServiceSummary is a service as the node's presence record lists it.
type ServiceSummary struct {
	Coordinate string `json:"coordinate"`
	Artifact   string `json:"artifact"`
	State      string `json:"state"`
	PID        int    `json:"pid,omitempty"`
	Port       int    `json:"port,omitempty"`
}

// Presence is what a node publishes about itself (nodee's ephemeral
// ZooKeeper record): its status, the services running on it, what is
// installed, and where its local API listens. The agent sends it when it
// changes; the server keeps it with the node while the session lives.
type Presence struct {
	Services  []ServiceSummary `json:"services"`
	Artifacts []string         `json:"artifacts"`
	LocalAPI  LocalAPI         `json:"local_api"`
	UpdatedAt time.Time        `json:"updated_at"`
}

// LocalAPI says where an agent's local API listens.
type LocalAPI struct {
	Socket string `json:"socket,omitempty"` // unix socket path
	TCP    string `json:"tcp,omitempty"`    // host:port, token required
	// CAFingerprint is the pin ("sha256:<hex>") of the CA the TCP
	// listener's certificate comes from, when it speaks HTTPS: on any
	// address but loopback.
	CAFingerprint string `json:"ca_fingerprint,omitempty"`
}

// AgentStatus is the answer of the agent's local API to GET /v1/status.
type AgentStatus struct {
	NodeID    string   `json:"node_id,omitempty"`
	Name      string   `json:"name"`
	Server    string   `json:"server,omitempty"`
	Connected bool     `json:"connected"`
	State     string   `json:"state"`
	SuiteID   string   `json:"suite_id,omitempty"`
	Hardware  Hardware `json:"hardware"`
	Presence  Presence `json:"presence"`
	Version   string   `json:"version"`
}

// Agent ↔ server methods for workloads.
const (
	// MethodPresence (agent → server request, body Presence) publishes the
	// node's presence record; sent after hello and whenever it changes.
	MethodPresence = "presence"
	// MethodLocalAPI (server → agent request, body LocalRequest) carries a
	// request for the agent's local API over the session, so the server
	// serves /v1/nodes/{node}/artifacts and /services with the very code
	// the agent's own socket serves.
	MethodLocalAPI = "local.api"
)

// LocalRequest is an HTTP request for an agent's local API.
type LocalRequest struct {
	Method string          `json:"method"`
	Path   string          `json:"path"` // e.g. /v1/services/1.web.ops.prod/stop
	Query  string          `json:"query,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

// LocalResponse is the local API's answer to a LocalRequest.
type LocalResponse struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body,omitempty"` // base64 on the wire: logs need not be UTF-8
	// Headers are the answer's own headers (Nodemgr-*), passed on as they are.
	Headers map[string]string `json:"headers,omitempty"`
}

// HeaderLogCursor, on a piece of a service's or a container's log, marks
// where the piece ends: ask with after=<it> for what comes next. It is a
// byte offset in a service's log file, the time of the last line of a
// container's; either way opaque to the asker.
const HeaderLogCursor = "Nodemgr-Log-Cursor"

// HeaderPrefix starts the headers of nodemgr's own that a relayed answer
// keeps.
const HeaderPrefix = "Nodemgr-"

// ArtifactList is the body of GET /v1/nodes/{node}/artifacts.
type ArtifactList struct {
	Artifacts []Artifact `json:"artifacts"`
}

// ServiceList is the body of GET /v1/nodes/{node}/services.
type ServiceList struct {
	Services []Service `json:"services"`
}
