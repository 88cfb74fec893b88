// Package overlay is the server's side of the overlay network: the
// encrypted WireGuard mesh that the agents of nodes sharing a group form,
// so that workloads on different nodes reach each other on addresses of
// their own, whatever network lies between the nodes.
//
// The server gives each node that joins a block of the overlay's prefix
// (a /24 of 100.64.0.0/10 by default), kept for as long as the node
// exists, and tells every node the public keys, endpoints and blocks of
// the nodes it shares a group with: its peers. Nodes with no group in
// common are not peers, so neither can reach the other's block. Private
// keys never leave the nodes (package internal/node/overlay holds them).
//
// A node's state is sent whole, level-triggered: in the answer to its
// join, and again whenever it changes, by the replica that holds the
// node's session. Each replica reads the store's revisions of the nodes
// and of the overlay every Interval, so a join through another replica
// reaches its nodes within one.
package overlay

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// Defaults.
const (
	DefaultPrefix    = "100.64.0.0/10" // the shared address space (RFC 6598), as Tailscale uses
	DefaultBlockBits = 24              // 253 workload addresses per node
	DefaultInterval  = time.Second
)

// Config is the overlay's shape.
type Config struct {
	Prefix    netip.Prefix  // IPv4; zero: DefaultPrefix
	BlockBits int           // each node's block is a /BlockBits; 0: DefaultBlockBits
	Interval  time.Duration // how often changes made elsewhere are looked for; 0: DefaultInterval
}

// Store is what the overlay needs of the server's store.
type Store interface {
	JoinOverlay(ctx context.Context, m store.OverlayMember, blocks int) (store.OverlayMember, error)
	ListOverlay(ctx context.Context) ([]store.OverlayMember, error)
	OverlayRevision(ctx context.Context) (int64, error)
	ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error)
	NodesRevision(ctx context.Context) (int64, error)
	ListEnsembles(ctx context.Context, all bool) ([]api.Ensemble, error)
}

// Agents reaches the agents connected to this server.
type Agents interface {
	// Local lists the nodes with a session on this server.
	Local() []string
	// Send tells a node its overlay state.
	Send(ctx context.Context, nodeID string, st api.OverlayState) error
}

// Network is one server's view of the overlay.
type Network struct {
	cfg    Config
	blocks int
	store  Store
	agents Agents
	log    *slog.Logger
	kick   chan struct{}

	mu   sync.Mutex
	sent map[string][32]byte // node → digest of the state it was last sent
	seen [2]int64            // the revisions the last round read
	// reading is held while states are read and numbered, so that a
	// higher generation is never an older view of the store.
	reading    sync.Mutex
	generation uint64
	// reach is each member's peers as the last states read them: who may
	// relay packets to whom.
	reach map[string]map[string]bool
	// addrs is each member's own overlay address, likewise.
	addrs map[string]netip.Addr
}

// New checks cfg and makes the network.
func New(cfg Config, st Store, agents Agents, log *slog.Logger) (*Network, error) {
	if !cfg.Prefix.IsValid() {
		cfg.Prefix = netip.MustParsePrefix(DefaultPrefix)
	}
	if cfg.BlockBits == 0 {
		cfg.BlockBits = DefaultBlockBits
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if !cfg.Prefix.Addr().Is4() {
		return nil, errdefs.Field("overlay-network", "%s: want an IPv4 prefix such as %s", cfg.Prefix, DefaultPrefix)
	}
	if cfg.Prefix != cfg.Prefix.Masked() {
		return nil, errdefs.Field("overlay-network", "%s has host bits set: did you mean %s?", cfg.Prefix, cfg.Prefix.Masked())
	}
	if cfg.BlockBits < cfg.Prefix.Bits() || cfg.BlockBits > 30 {
		return nil, errdefs.Field("overlay-network", "a node's block /%d must lie inside %s and hold at least two addresses", cfg.BlockBits, cfg.Prefix)
	}
	return &Network{
		cfg:    cfg,
		blocks: 1 << min(cfg.BlockBits-cfg.Prefix.Bits(), 24),
		store:  st,
		agents: agents,
		log:    log,
		kick:   make(chan struct{}, 1),
		sent:   map[string][32]byte{},
	}, nil
}

// Prefix is the overlay's prefix.
func (n *Network) Prefix() netip.Prefix { return n.cfg.Prefix }

// Block is the prefix of block i.
func (n *Network) Block(i int) netip.Prefix {
	a := n.cfg.Prefix.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) << (32 - n.cfg.BlockBits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), n.cfg.BlockBits)
}

// NodeAddress is the address of the node itself in block i: the first.
func (n *Network) NodeAddress(i int) netip.Prefix {
	return netip.PrefixFrom(n.Block(i).Addr().Next(), 32)
}

// Join puts node nodeID on the overlay, or updates its key and endpoint,
// and gives its state. remote is the address its session comes from.
func (n *Network) Join(ctx context.Context, nodeID string, remote string, j api.OverlayJoin) (api.OverlayState, error) {
	endpoint, err := checkJoin(j, remote)
	if err != nil {
		return api.OverlayState{}, err
	}
	_, err = n.store.JoinOverlay(ctx, store.OverlayMember{
		NodeID: nodeID, PublicKey: j.PublicKey, ListenPort: j.ListenPort, Endpoint: endpoint, Kind: j.Kind,
	}, n.blocks)
	if err != nil {
		return api.OverlayState{}, err
	}
	states, err := n.states(ctx, []string{nodeID})
	if err != nil {
		return api.OverlayState{}, err
	}
	st := states[nodeID]
	n.noteSent(nodeID, st)
	n.Kick() // its peers learn of it now
	return st, nil
}

// checkJoin validates what an agent says of its side and gives the
// endpoint peers should use.
func checkJoin(j api.OverlayJoin, remote string) (string, error) {
	if k, err := base64.StdEncoding.DecodeString(j.PublicKey); err != nil || len(k) != 32 {
		return "", errdefs.Field("public_key", "%q is not a base64 WireGuard key (32 bytes)", j.PublicKey)
	}
	if j.ListenPort < 1 || j.ListenPort > 65535 {
		return "", errdefs.Field("listen_port", "%d is not a UDP port (1..65535)", j.ListenPort)
	}
	if j.Kind != api.OverlayKernel && j.Kind != api.OverlayUserspace {
		return "", errdefs.Field("kind", "%q: want %s or %s", j.Kind, api.OverlayKernel, api.OverlayUserspace)
	}
	if j.Endpoint != "" {
		ap, err := netip.ParseAddrPort(j.Endpoint)
		if err != nil || ap.Port() == 0 {
			return "", errdefs.Field("endpoint", "%q: want ip:port", j.Endpoint)
		}
		return ap.String(), nil
	}
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", errdefs.Field("endpoint", "none given, and the connection's address %q is no IP: give the agent --overlay-endpoint", remote)
	}
	return net.JoinHostPort(addr.Unmap().String(), strconv.Itoa(j.ListenPort)), nil
}

// MayRelay says whether node from may send packets to node to through
// the server: whether they are peers, as of the last states read.
func (n *Network) MayRelay(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reach[from][to]
}

// AddressOf is node's own overlay address, if it is on the overlay, as
// of the last states read.
func (n *Network) AddressOf(node string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.addrs[node]
	return a, ok
}

// Meshed says whether every one of nodes is on the overlay and a peer of
// every other (or the same node), as of the last states read: workloads
// on them reach each other inside WireGuard, and by name.
func (n *Network) Meshed(nodes []string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, a := range nodes {
		if _, ok := n.addrs[a]; !ok {
			return false
		}
		for _, b := range nodes[i+1:] {
			if a != b && !n.reach[a][b] {
				return false
			}
		}
	}
	return len(nodes) > 0
}

// Kick makes the next round start now.
func (n *Network) Kick() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run sends the connected nodes their states whenever they change, until
// ctx ends.
func (n *Network) Run(ctx context.Context) {
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	for {
		if err := n.Round(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("overlay: send nodes their peers", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.kick:
		}
	}
}

// Round sends each connected node its state where it differs from what
// the node was last sent. It reads the states only when the store's
// revisions moved since the last round that sent everything: a failed
// send is tried again next round.
func (n *Network) Round(ctx context.Context) error {
	nodesRev, err := n.store.NodesRevision(ctx)
	if err != nil {
		return err
	}
	overlayRev, err := n.store.OverlayRevision(ctx)
	if err != nil {
		return err
	}
	local := n.agents.Local()
	n.mu.Lock()
	n.forgetGone(local)
	fresh := [2]int64{nodesRev, overlayRev}
	same := fresh == n.seen
	n.mu.Unlock()
	if same {
		return nil
	}
	states, err := n.states(ctx, local)
	if err != nil {
		return err
	}
	failed := false
	for _, id := range local {
		st, ok := states[id]
		if !ok || n.wasSent(id, st) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := n.agents.Send(sctx, id, st)
		cancel()
		if err != nil {
			failed = true
			n.log.Info("overlay: send a node its peers", "node", id, "err", err)
			continue
		}
		n.noteSent(id, st)
	}
	if !failed {
		n.mu.Lock()
		n.seen = fresh
		n.mu.Unlock()
	}
	return nil
}

// forgetGone drops what was sent to nodes no longer connected: a node
// that comes back joins again and is answered its state. Called with mu.
func (n *Network) forgetGone(local []string) {
	for id := range n.sent {
		if !slices.Contains(local, id) {
			delete(n.sent, id)
		}
	}
}

func (n *Network) noteSent(id string, st api.OverlayState) {
	n.mu.Lock()
	n.sent[id] = digest(st)
	n.mu.Unlock()
}

func (n *Network) wasSent(id string, st api.OverlayState) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	d, ok := n.sent[id]
	return ok && d == digest(st)
}

// digest tells states apart by what they say, whatever their generation.
func digest(st api.OverlayState) [32]byte {
	st.Generation = 0
	b, _ := json.Marshal(st)
	return sha256.Sum256(b)
}

// states gives the overlay state of each of ids that is on the overlay,
// all of one new generation.
func (n *Network) states(ctx context.Context, ids []string) (map[string]api.OverlayState, error) {
	n.reading.Lock()
	defer n.reading.Unlock()
	v, err := n.view(ctx)
	if err != nil {
		return nil, err
	}
	n.generation++
	reach := make(map[string]map[string]bool, len(v.order))
	addrs := make(map[string]netip.Addr, len(v.order))
	for _, m := range v.order {
		addrs[m.NodeID] = n.NodeAddress(m.Block).Addr()
		reach[m.NodeID] = map[string]bool{}
		for _, p := range v.peers(m) {
			reach[m.NodeID][p.NodeID] = true
		}
	}
	n.mu.Lock()
	n.reach, n.addrs = reach, addrs
	n.mu.Unlock()
	out := make(map[string]api.OverlayState, len(ids))
	for _, id := range ids {
		if m, ok := v.members[id]; ok {
			st := v.state(m)
			st.Generation = n.generation
			out[id] = st
		}
	}
	return out, nil
}

// view is the overlay's members and their nodes, read once.
type view struct {
	n         *Network
	members   map[string]store.OverlayMember
	order     []store.OverlayMember // by block
	nodes     map[string]store.Node
	ensembles []api.Ensemble // the live ones
}

func (n *Network) view(ctx context.Context) (*view, error) {
	ms, err := n.store.ListOverlay(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the overlay: %w", err)
	}
	ns, err := n.store.ListNodes(ctx, store.NodeFilter{})
	if err != nil {
		return nil, fmt.Errorf("read the overlay's nodes: %w", err)
	}
	es, err := n.store.ListEnsembles(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("read the overlay's ensembles: %w", err)
	}
	v := &view{n: n, members: make(map[string]store.OverlayMember, len(ms)), order: ms, nodes: make(map[string]store.Node, len(ns)), ensembles: es}
	for _, m := range ms {
		v.members[m.NodeID] = m
	}
	for _, nd := range ns {
		v.nodes[nd.ID] = nd
	}
	return v, nil
}

// peers are the members that share a group with m's node, by block.
func (v *view) peers(m store.OverlayMember) []store.OverlayMember {
	self, ok := v.nodes[m.NodeID]
	if !ok {
		return nil
	}
	var out []store.OverlayMember
	for _, o := range v.order {
		other, ok := v.nodes[o.NodeID]
		if o.NodeID != m.NodeID && ok && shareGroup(self.Groups, other.Groups) {
			out = append(out, o)
		}
	}
	return out
}

func (v *view) state(m store.OverlayMember) api.OverlayState {
	st := api.OverlayState{
		Network: v.n.cfg.Prefix.String(),
		Block:   v.n.Block(m.Block).String(),
		Address: v.n.NodeAddress(m.Block).String(),
		Peers:   []api.OverlayPeer{},
	}
	reach := map[string]bool{m.NodeID: true}
	for _, p := range v.peers(m) {
		st.Peers = append(st.Peers, api.OverlayPeer{
			NodeID: p.NodeID, Node: v.nodes[p.NodeID].Name, PublicKey: p.PublicKey,
			Endpoint: p.Endpoint, Block: v.n.Block(p.Block).String(),
		})
		reach[p.NodeID] = true
	}
	st.Names = v.names(reach)
	return st
}

// names are the names of the live ensembles' replicas on the nodes of
// reach (a node and its peers: no name leads anywhere the node cannot
// go), each with its node's overlay address.
func (v *view) names(reach map[string]bool) map[string][]string {
	out := map[string][]string{}
	add := func(name, addr string) {
		if !slices.Contains(out[name], addr) {
			out[name] = append(out[name], addr)
		}
	}
	for _, e := range v.ensembles {
		for _, rep := range e.Replicas {
			m, ok := v.members[rep.NodeID]
			if !ok || !reach[rep.NodeID] {
				continue
			}
			addr := v.n.NodeAddress(m.Block).Addr().String()
			alloc := rep.Allocation + "." + e.Name + "." + api.OverlayZone
			add(strconv.Itoa(rep.Replica)+"."+alloc, addr)
			add(alloc, addr)
		}
	}
	for _, addrs := range out {
		slices.Sort(addrs)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func shareGroup(a, b []string) bool {
	for _, g := range a {
		if slices.Contains(b, g) {
			return true
		}
	}
	return false
}

// List gives the overlay's members whose nodes pass keep (the caller's
// view), by block.
func (n *Network) List(ctx context.Context, keep func(store.Node) bool) (api.OverlayList, error) {
	v, err := n.view(ctx)
	if err != nil {
		return api.OverlayList{}, err
	}
	out := api.OverlayList{Network: n.cfg.Prefix.String(), Nodes: []api.OverlayNode{}}
	for _, m := range v.order {
		nd, ok := v.nodes[m.NodeID]
		if !ok || !keep(nd) {
			continue
		}
		out.Nodes = append(out.Nodes, v.node(m, nd, keep))
	}
	return out, nil
}

func (v *view) node(m store.OverlayMember, nd store.Node, keep func(store.Node) bool) api.OverlayNode {
	on := api.OverlayNode{
		NodeID: m.NodeID, Node: nd.Name, Groups: nd.Groups, Status: nd.Status,
		Block: v.n.Block(m.Block).String(), Address: v.n.NodeAddress(m.Block).String(),
		PublicKey: m.PublicKey, Endpoint: m.Endpoint, Kind: m.Kind,
		JoinedAt: m.JoinedAt, UpdatedAt: m.UpdatedAt, Peers: []string{},
	}
	if on.Groups == nil {
		on.Groups = []string{}
	}
	for _, p := range v.peers(m) {
		if pn := v.nodes[p.NodeID]; keep(pn) {
			on.Peers = append(on.Peers, pn.Name)
		}
	}
	return on
}
