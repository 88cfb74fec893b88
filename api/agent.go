package api

import (
	"encoding/json"
	"time"
)

// ProtocolVersion is the version of the agent ↔ server protocol this build
// speaks. A frame with another major version is refused.
const ProtocolVersion = 1

// Frame types on the agent WebSocket.
const (
	FrameRequest  = "req"    // a call that expects one response with the same ID
	FrameResponse = "resp"   // the answer to a request
	FrameNotify   = "notify" // server → agent push with a sequence number
	FrameAck      = "ack"    // agent → server: every notification up to Seq is handled
)

// Frame is one WebSocket text message. Requests and responses are multiplexed
// by ID; notifications are ordered by Seq and acknowledged cumulatively.
type Frame struct {
	V      int             `json:"v"`
	Type   string          `json:"type"`
	ID     uint64          `json:"id,omitempty"`
	Seq    uint64          `json:"seq,omitempty"`
	Method string          `json:"method,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Agent → server request methods.
const (
	MethodHello     = "hello"     // first request on a connection
	MethodHeartbeat = "heartbeat" // periodic liveness and state
	MethodGoodbye   = "goodbye"   // the agent is leaving on purpose
	MethodRenew     = "credential.renew"
	// MethodNotices tells the server every notice the machine's provider
	// gives now (Notices): sent when one appears, and in Hello.
	MethodNotices = "node.notices"
)

// Server → agent request and notification methods.
const (
	MethodPing     = "ping"          // request: are you there? (offline confirmation)
	NotifyShutdown = "node.shutdown" // notification: ShutdownRequest
	NotifyUpdate   = "node.update"   // notification: NodeUpdate (tags/labels changed)
)

// RegisterRequest is the body of POST /v1/agent/register, authenticated by a
// join token. A node is keyed by (machine_id, data_dir): registering again from
// the same machine and data dir returns the same node.
type RegisterRequest struct {
	MachineID    string            `json:"machine_id"`
	DataDir      string            `json:"data_dir"`
	Name         string            `json:"name"`
	Tags         []string          `json:"tags,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Groups       []string          `json:"groups,omitempty"`
	Hardware     Hardware          `json:"hardware"`
	AgentVersion string            `json:"agent_version"`
}

// RegisterResponse carries the node's identity and its credential.
type RegisterResponse struct {
	NodeID     string    `json:"node_id"`
	Credential string    `json:"credential"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Hello is the agent's first request on a connection. Tags, labels and groups
// are not in it: the agent's configured ones are merged in at registration,
// and from then on the server's copy (edited with `nodemgr node tag|label`)
// is the truth, pushed to the agent with NotifyUpdate.
type Hello struct {
	AgentVersion string   `json:"agent_version"`
	Name         string   `json:"name"`
	Hardware     Hardware `json:"hardware"`
	State        string   `json:"state"`
	SuiteID      string   `json:"suite_id,omitempty"` // the suite being worked on
	// Holding lists the tasks the agent still holds (buffered, running, or
	// with a report on its way). The server gives every other task it
	// thinks runs on this node back to the queue: after an agent restart
	// that is all of them.
	Holding []string `json:"holding,omitempty"`
	// LastSeq is the highest notification sequence the agent has handled; the
	// server replays everything after it that is not yet acknowledged.
	LastSeq uint64 `json:"last_seq"`
	// Keepalive is how often the agent pings the server on the connection
	// (WebSocket pings). The server counts an agent that pinged for three
	// periods of silence as gone, as if its connection had dropped; 0: an
	// agent that does not ping, judged by its heartbeats alone.
	Keepalive Duration `json:"keepalive,omitempty"`
	// Notices are the provider's notices the agent hears now; the server
	// keeps exactly these (none: it forgets the ones it had, as a machine
	// that was stopped and started again no longer has them).
	Notices []Notice `json:"notices,omitempty"`
}

// Notice kinds.
const (
	// NoticeInterruption: the provider takes the machine back at Time
	// (EC2's spot/instance-action). The agent drains.
	NoticeInterruption = "interruption"
	// NoticeRebalance: the provider says the machine is at raised risk
	// of interruption (EC2's rebalance recommendation). The agent keeps
	// working; the server may prepare a replacement.
	NoticeRebalance = "rebalance"
)

// Notice is something a machine's provider announced about it.
type Notice struct {
	Kind string `json:"kind"` // NoticeInterruption or NoticeRebalance
	// Action is what happens to the machine at Time: terminate, stop or
	// hibernate (interruptions only).
	Action string `json:"action,omitempty"`
	// Time is when the action happens (interruption), or when the
	// recommendation was made (rebalance).
	Time time.Time `json:"time"`
}

// Equal says whether two notices say the same (times compared as
// instants).
func (n Notice) Equal(o Notice) bool {
	return n.Kind == o.Kind && n.Action == o.Action && n.Time.Equal(o.Time)
}

// Message says the notice in a few words, for node show and events.
func (n Notice) Message() string {
	at := n.Time.UTC().Format(time.RFC3339)
	if n.Kind == NoticeInterruption {
		return "spot interruption: " + n.Action + " at " + at
	}
	return "rebalance recommendation at " + at
}

// Notices is the body of MethodNotices.
type Notices struct {
	Notices []Notice `json:"notices"`
}

// Welcome answers Hello.
type Welcome struct {
	NodeID            string    `json:"node_id"`
	HeartbeatInterval Duration  `json:"heartbeat_interval"`
	CredentialExpires time.Time `json:"credential_expires"`
	ServerVersion     string    `json:"server_version"`
	// ReclaimAfter is how long the server waits for a node it lost touch
	// with (connection dropped, or silent) before its tasks go to others.
	// An agent out of touch for a keepalive period less than that (three
	// periods at most) starts none of the tasks it holds until a new
	// welcome says which are still its own.
	ReclaimAfter Duration `json:"reclaim_after,omitempty"`
	// Revoked are tasks of Hello.Holding that are no longer this node's:
	// taken back while it was away and given to another node (or ended).
	// The agent drops them unstarted and stops those it runs.
	Revoked []string `json:"revoked,omitempty"`
	// IdlePoll is how often an idle agent asks for a suite when nothing
	// woke it: the server wakes idle agents whenever a suite may have
	// work for them, so this is a safety net. Absent (older servers): 5s.
	IdlePoll Duration `json:"idle_poll,omitempty"`
	// TakesHeld says the server takes Held in tasks.fetch and
	// tasks.report; older servers refuse fields they do not know.
	TakesHeld bool `json:"takes_held,omitempty"`
	// TaskLogMax is how many bytes of each attempt's output the server
	// keeps as its full log (TaskResult.Log). Absent (older servers, or
	// a server that keeps none): the agent sends the tails only.
	TaskLogMax int64 `json:"task_log_max,omitempty"`
	// ParksFetch says the server takes TasksFetch.WaitMS.
	ParksFetch bool `json:"parks_fetch,omitempty"`
	// Overlay is the prefix of the server's overlay network: an agent
	// started with the overlay on joins it (MethodOverlayJoin). Absent:
	// an older server, which has none.
	Overlay string `json:"overlay,omitempty"`
}

// Heartbeat is the periodic liveness report.
type Heartbeat struct {
	State   string `json:"state"`
	SuiteID string `json:"suite_id,omitempty"` // the suite being worked on
	// Usage is how busy the machine is now, for the dashboard's charts;
	// absent from agents older than it, or where it cannot be measured.
	Usage *MachineUsage `json:"usage,omitempty"`
	// Overlay is the node's overlay links now, for the per-peer metrics;
	// sent only to servers whose welcome offered an overlay.
	Overlay []OverlayLink `json:"overlay,omitempty"`
}

// MaxHeartbeatLinks bounds Heartbeat.Overlay.
const MaxHeartbeatLinks = 4096

// HeartbeatAck answers a heartbeat.
type HeartbeatAck struct {
	ServerTime time.Time `json:"server_time"`
}

// Goodbye tells the server the agent is leaving on purpose.
type Goodbye struct {
	Reason string `json:"reason"`
}

// NodeUpdate tells the agent its tags, labels or groups changed on the server.
type NodeUpdate struct {
	Tags   []string          `json:"tags"`
	Labels map[string]string `json:"labels"`
	Groups []string          `json:"groups"`
}

// Duration is a time.Duration that travels as a Go duration string ("30s").
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalText lets YAML files (suite specs) write durations as "30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }
