package api

import "time"

// The overlay network: nodes that share a group form an encrypted
// WireGuard mesh. The server gives each node an address block of the
// overlay's prefix and tells it the others' public keys, endpoints and
// blocks; a node's private key never leaves it.
const (
	// MethodOverlayJoin (agent → server request, body OverlayJoin) puts
	// the node on the overlay, or updates its key and endpoint; the
	// answer is its OverlayState. Sent after every hello by an agent
	// started with the overlay on.
	MethodOverlayJoin = "overlay.join"
	// MethodOverlayState (server → agent request, body OverlayState)
	// carries the node's whole desired state whenever it changes: a peer
	// joined, left, moved, or a group changed. The agent converges on it.
	MethodOverlayState = "overlay.state"
	// MethodOverlayRelay (agent → server request, body OverlayPackets)
	// carries WireGuard packets to a peer the agent cannot reach over UDP;
	// the server passes them on with MethodOverlayRelayed, at most once.
	MethodOverlayRelay = "overlay.relay"
	// MethodOverlayRelayed (server → agent request, body OverlayPackets)
	// delivers packets a peer relayed.
	MethodOverlayRelayed = "overlay.relayed"
)

// OverlayPackets are WireGuard packets relayed through the server:
// ciphertext, which the server cannot read.
type OverlayPackets struct {
	// Peer is the node they go to (overlay.relay) or come from
	// (overlay.relayed).
	Peer    string   `json:"peer"`
	Packets [][]byte `json:"packets"` // base64 on the wire
}

// Bounds of one OverlayPackets.
const (
	OverlayRelayMaxPackets = 64
	OverlayRelayMaxPacket  = 65535
)

// OverlayZone is the DNS zone of the overlay's names.
const OverlayZone = "nodemgr"

// Overlay device kinds.
const (
	OverlayKernel    = "kernel"    // the kernel's WireGuard
	OverlayUserspace = "userspace" // wireguard-go on a TUN device
)

// OverlayJoin is what an agent tells the server of its side of the mesh.
type OverlayJoin struct {
	PublicKey  string `json:"public_key"`  // base64, as wg prints it
	ListenPort int    `json:"listen_port"` // UDP, 1..65535
	Kind       string `json:"kind"`        // OverlayKernel or OverlayUserspace
	// Endpoint is the host:port peers should send to; empty: the address
	// the agent's connection to the server comes from, with ListenPort.
	Endpoint string `json:"endpoint,omitempty"`
}

// OverlayState is a node's place on the overlay: the desired state the
// agent converges its device on.
type OverlayState struct {
	// Generation orders the states one server sends a node: they may
	// arrive out of order (a join's answer and a push), and the agent
	// applies none older than the last it applied on the session.
	Generation uint64        `json:"generation"`
	Network    string        `json:"network"` // the overlay's prefix, e.g. 100.64.0.0/10
	Block      string        `json:"block"`   // this node's block, e.g. 100.64.3.0/24
	Address    string        `json:"address"` // this node's own address, e.g. 100.64.3.1/32
	Peers      []OverlayPeer `json:"peers"`
	// Names are the stable names the node's DNS server answers, each with
	// its addresses: every live ensemble replica on this node or a peer,
	// as REPLICA.ALLOCATION.ENSEMBLE.nodemgr, and each allocation's
	// replicas together as ALLOCATION.ENSEMBLE.nodemgr.
	Names map[string][]string `json:"names,omitempty"`
}

// OverlayPeer is another node of the mesh, as the server knows it.
type OverlayPeer struct {
	NodeID    string `json:"node_id"`
	Node      string `json:"node"` // its name
	PublicKey string `json:"public_key"`
	Endpoint  string `json:"endpoint,omitempty"` // host:port
	Block     string `json:"block"`
}

// OverlayNode is one node of the overlay, for `nodemgr network`.
type OverlayNode struct {
	NodeID    string    `json:"node_id"`
	Node      string    `json:"node"`
	Groups    []string  `json:"groups"`
	Status    string    `json:"status"` // the node's status
	Block     string    `json:"block"`
	Address   string    `json:"address"`
	PublicKey string    `json:"public_key"`
	Endpoint  string    `json:"endpoint"`
	Kind      string    `json:"kind"`
	JoinedAt  time.Time `json:"joined_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Peers are the nodes it shares a group with (names), from the
	// server's books; Links say how its device sees them now, when asked
	// for one node and the node is online.
	Peers []string      `json:"peers"`
	Links []OverlayLink `json:"links,omitempty"`
}

// OverlayList is the answer of GET /v1/network.
type OverlayList struct {
	Network string        `json:"network"`
	Nodes   []OverlayNode `json:"nodes"`
}

// OverlayLink is a node's WireGuard peer as its device sees it: the
// agent's local API answers GET /v1/overlay with a list of them.
type OverlayLink struct {
	Node          string     `json:"node,omitempty"`    // the peer's name, where the agent knows it
	NodeID        string     `json:"node_id,omitempty"` // the peer's ID, likewise
	PublicKey     string     `json:"public_key"`
	Endpoint      string     `json:"endpoint,omitempty"`
	AllowedIPs    []string   `json:"allowed_ips"`
	LastHandshake *time.Time `json:"last_handshake,omitempty"` // absent: never
	RxBytes       int64      `json:"rx_bytes"`
	TxBytes       int64      `json:"tx_bytes"`
}

// OverlayDevice is the agent's local answer to GET /v1/overlay.
type OverlayDevice struct {
	Interface  string        `json:"interface"`
	Kind       string        `json:"kind"`
	PublicKey  string        `json:"public_key"`
	ListenPort int           `json:"listen_port"`
	State      *OverlayState `json:"state,omitempty"` // absent until the server sent one
	// DNS is where the node's DNS server answers the overlay's names
	// (ip:53); absent while it does not.
	DNS   string        `json:"dns,omitempty"`
	Links []OverlayLink `json:"links"`
}
