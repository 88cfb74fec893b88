package agent

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/overlay"
)

// Relaying through the server: a peer that WireGuard has not reached over
// UDP for relayAfter since its endpoint was set (NAT on both sides, a
// firewall) is given its relay endpoint, and its packets go through the
// agents' sessions. The other side answers the same way by itself:
// WireGuard roams to where it last heard from. A relayed peer goes back to
// UDP when the server gives it another endpoint, or the agent restarts.

// relayStale is how old a peer's last handshake may be before its session
// is dead: WireGuard gives up a session after 180 s.
const relayStale = 180 * time.Second

// relayQueueLen bounds the packets waiting to go to the server; beyond
// it they are dropped, as a full link drops them.
const relayQueueLen = 1024

// relayState is which peers go through the server. Guarded by
// overlayNode.mu.
type relayState struct {
	relayed  map[string]bool         // node ID → relayed
	endpoint map[string]string       // node ID → the endpoint the server gave
	since    map[string]time.Time    // node ID → when that endpoint was first given
	blocks   map[string]netip.Prefix // node ID → block, also in Agent.relayBlocks
}

// relayPacket is one packet on its way to the server.
type relayPacket struct {
	to     string // the peer's node ID
	packet []byte
}

// follow takes the peers of a new state: a peer whose endpoint changed
// is tried over UDP again.
func (r *relayState) follow(peers []api.OverlayPeer, now time.Time) {
	if r.relayed == nil {
		r.relayed, r.endpoint, r.since = map[string]bool{}, map[string]string{}, map[string]time.Time{}
	}
	blocks := make(map[string]netip.Prefix, len(peers))
	seen := make(map[string]bool, len(peers))
	for _, p := range peers {
		seen[p.NodeID] = true
		if b, err := netip.ParsePrefix(p.Block); err == nil {
			blocks[p.NodeID] = b
		}
		if old, ok := r.endpoint[p.NodeID]; !ok || old != p.Endpoint {
			r.endpoint[p.NodeID], r.since[p.NodeID] = p.Endpoint, now
			delete(r.relayed, p.NodeID)
		}
	}
	for id := range r.endpoint {
		if !seen[id] {
			delete(r.endpoint, id)
			delete(r.since, id)
			delete(r.relayed, id)
		}
	}
	r.blocks = blocks
}

// unreached lists the peers to relay now: not relayed yet, given an
// endpoint at least after ago, and with no live session.
func (r *relayState) unreached(status []overlay.PeerStatus, keys map[string]string, now time.Time, after time.Duration) []string {
	var out []string
	for _, s := range status {
		id, ok := keys[s.PublicKey]
		if !ok || r.relayed[id] || r.endpoint[id] == "" || now.Sub(r.since[id]) < after {
			continue
		}
		if s.LastHandshake.IsZero() || now.Sub(s.LastHandshake) > relayStale {
			out = append(out, id)
		}
	}
	return out
}

// relayUnreached marks the peers that UDP does not reach as relayed; the
// apply that follows gives them their relay endpoints.
func (a *Agent) relayUnreached(mesh *overlay.Mesh, st api.OverlayState) {
	if mesh == nil || mesh.Kind() != api.OverlayUserspace {
		return // the kernel's device cannot relay
	}
	status, err := mesh.Peers()
	if err != nil {
		return
	}
	keys := make(map[string]string, len(st.Peers))
	names := make(map[string]string, len(st.Peers))
	for _, p := range st.Peers {
		keys[p.PublicKey], names[p.NodeID] = p.NodeID, p.Node
	}
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range o.relay.unreached(status, keys, time.Now(), a.cfg.OverlayRelayAfter) {
		o.relay.relayed[id] = true
		a.log.Warn("overlay: no WireGuard handshake with a peer over UDP; relaying through the server",
			"peer", names[id], "endpoint", o.relay.endpoint[id], "after", a.cfg.OverlayRelayAfter)
	}
}

// relaySend takes a packet for the peer whose overlay address is to, for
// the server. It never blocks (the mesh's Relay.Send), and takes no lock
// an apply holds: wireguard-go may send a handshake from within one.
func (a *Agent) relaySend(to netip.Addr, packet []byte) {
	id := ""
	if blocks := a.relayBlocks.Load(); blocks != nil {
		for node, b := range *blocks {
			if b.Contains(to) {
				id = node
				break
			}
		}
	}
	if id == "" {
		return
	}
	select {
	case a.relayOut <- relayPacket{id, packet}:
	default:
	}
}

// relayLoop sends the queued packets to the server, a batch per peer,
// until the agent stops.
func (a *Agent) relayLoop() {
	ctx := a.stopCtx
	for {
		var first relayPacket
		select {
		case <-ctx.Done():
			return
		case first = <-a.relayOut:
		}
		batches := map[string][][]byte{first.to: {first.packet}}
	more:
		for range api.OverlayRelayMaxPackets - 1 {
			select {
			case p := <-a.relayOut:
				if len(batches[p.to]) < api.OverlayRelayMaxPackets {
					batches[p.to] = append(batches[p.to], p.packet)
				}
			default:
				break more
			}
		}
		peer := a.peer.Load()
		if peer == nil {
			continue // not connected: dropped
		}
		for to, pkts := range batches {
			if err := peer.Call(ctx, api.MethodOverlayRelay, api.OverlayPackets{Peer: to, Packets: pkts}, nil); err != nil && ctx.Err() == nil {
				a.log.Debug("overlay: relay packets", "peer", to, "err", err)
			}
		}
	}
}

// overlayRelayed answers the server's overlay.relayed: packets a peer
// sent through it.
func (a *Agent) overlayRelayed(body json.RawMessage) (any, error) {
	var p api.OverlayPackets
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, errdefs.Field("body", "%v", err)
	}
	o := &a.overlay
	o.mu.Lock()
	mesh := o.mesh
	o.mu.Unlock()
	var block netip.Prefix
	if blocks := a.relayBlocks.Load(); blocks != nil {
		block = (*blocks)[p.Peer]
	}
	if mesh == nil || !block.IsValid() {
		return nil, errdefs.Field("peer", "%q is not a peer of this node on the overlay", p.Peer)
	}
	from := block.Addr().Next()
	for _, pkt := range p.Packets {
		mesh.Deliver(from, pkt)
	}
	return struct{}{}, nil
}
