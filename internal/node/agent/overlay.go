package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/node/names"
	"github.com/nodemgr/nodemgr/internal/node/overlay"
)

// The node's place on the server's overlay network: the agent makes the
// WireGuard device when a server offers an overlay, joins with its public
// key, and converges the device on every state the server sends.

// overlayKeepalive keeps a NAT's mapping open for peers' handshakes.
const overlayKeepalive = 25 * time.Second

// overlayNode is the agent's mesh, made on the first welcome that offers
// an overlay and kept across sessions.
type overlayNode struct {
	mu    sync.Mutex
	mesh  *overlay.Mesh     // nil until made
	state *api.OverlayState // the last state applied
	// generation is the last state's on this session: a state of a lower
	// one arrived late and is dropped. A new session starts again at 0.
	generation uint64
	names      map[string]string // public key → peer's node name
	ids        map[string]string // public key → peer's node ID
	err        error             // why the mesh could not be made or converge
	// dns answers the overlay's names on the node's overlay address; nil
	// until the first state, or when port 53 there cannot be had.
	dns       *names.Server
	dnsAddr   string
	dnsFailed string // why the names server could not start, as last logged
	// relay says which peers go through the server (overlayrelay.go).
	relay relayState
}

func (c *Config) validateOverlay() error {
	if c.OverlayInterface != "" {
		if err := validate.Name("overlay_interface", c.OverlayInterface); err != nil {
			return err
		}
		if len(c.OverlayInterface) > 15 {
			return errdefs.Field("overlay_interface", "%q is longer than a link name may be (15)", c.OverlayInterface)
		}
	}
	if c.OverlayRelayAfter < time.Second {
		return errdefs.Field("overlay_relay_after", "must be at least 1s, got %s", c.OverlayRelayAfter)
	}
	if c.OverlayPort < 0 || c.OverlayPort > 65535 {
		return errdefs.Field("overlay_port", "%d is not a UDP port", c.OverlayPort)
	}
	if c.OverlayEndpoint != "" {
		if ap, err := netip.ParseAddrPort(c.OverlayEndpoint); err != nil || ap.Port() == 0 {
			return errdefs.Field("overlay_endpoint", "%q: want ip:port", c.OverlayEndpoint)
		}
	}
	return nil
}

// joinOverlay puts the node on the overlay a server's welcome offers:
// it makes the mesh the first time, sends the server its key and
// endpoint, and applies the state the server answers.
func (s *session) joinOverlay(offered string) {
	a := s.a
	if offered == "" || !a.cfg.Overlay {
		return
	}
	mesh, err := a.overlayMesh(offered)
	if err != nil {
		a.log.Error("overlay: cannot make the WireGuard device; this node stays off the overlay", "err", err)
		return
	}
	a.overlay.mu.Lock()
	a.overlay.generation = 0 // a new session, maybe another server
	a.overlay.mu.Unlock()
	var st api.OverlayState
	err = s.peer.Call(s.ctx, api.MethodOverlayJoin, api.OverlayJoin{
		PublicKey: mesh.PublicKey(), ListenPort: mesh.ListenPort(), Kind: mesh.Kind(), Endpoint: a.cfg.OverlayEndpoint,
	}, &st)
	if err != nil {
		if s.ctx.Err() == nil {
			a.log.Error("overlay: join", "err", err)
		}
		return
	}
	if err := a.applyOverlay(st); err != nil {
		a.log.Error("overlay: apply the server's state", "err", err)
	}
}

// overlayMesh makes the mesh once, for the overlay of prefix: its
// packets to peers that UDP does not reach go through the server.
func (a *Agent) overlayMesh(prefix string) (*overlay.Mesh, error) {
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mesh != nil {
		return o.mesh, nil
	}
	cfg := overlay.Config{
		Interface:  a.cfg.OverlayInterface,
		ListenPort: a.cfg.OverlayPort,
		KeyFile:    filepath.Join(a.cfg.DataDir, "overlay", "private.key"),
	}
	if p, err := netip.ParsePrefix(prefix); err == nil {
		cfg.Relay = &overlay.Relay{Prefix: p, Send: a.relaySend}
	}
	mesh, err := overlay.New(cfg, a.log.With("component", "overlay"))
	if err != nil {
		o.err = err
		return nil, err
	}
	o.mesh, o.err = mesh, nil
	a.log.Info("overlay: device up", "interface", mesh.Interface(), "kind", mesh.Kind(), "port", mesh.ListenPort())
	return mesh, nil
}

// applyOverlay converges the mesh on a state the server sent.
func (a *Agent) applyOverlay(st api.OverlayState) error {
	mesh, err := a.overlayMesh(st.Network)
	if err != nil {
		return err
	}
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	if st.Generation < o.generation {
		return nil // a later state is applied already
	}
	o.relay.follow(st.Peers, time.Now())
	blocks := o.relay.blocks // follow makes a new map each time: this one stays as it is
	a.relayBlocks.Store(&blocks)
	want, peerNames, err := meshState(st, o.relay.relayed)
	if err != nil {
		return err
	}
	o.generation = st.Generation
	if err := mesh.Apply(want); err != nil {
		o.err = err
		return err
	}
	if o.state == nil || digestOverlay(*o.state) != digestOverlay(st) {
		a.log.Info("overlay: converged", "address", st.Address, "peers", len(st.Peers), "names", len(st.Names))
	}
	o.state, o.names, o.ids, o.err = &st, peerNames, peerIDs(st.Peers), nil
	a.serveNames(o, want.Address.Addr(), st.Names)
	return nil
}

// meshState is the device's desired state for a server's overlay state,
// and the peers' names by key. The peers of relayed go through the
// server.
func meshState(st api.OverlayState, relayed map[string]bool) (overlay.State, map[string]string, error) {
	addr, err := netip.ParsePrefix(st.Address)
	if err != nil {
		return overlay.State{}, nil, errdefs.Field("address", "%q: %v", st.Address, err)
	}
	want := overlay.State{Address: addr}
	names := make(map[string]string, len(st.Peers))
	for i, p := range st.Peers {
		block, err := netip.ParsePrefix(p.Block)
		if err != nil {
			return overlay.State{}, nil, errdefs.Field(fmt.Sprintf("peers[%d].block", i), "%q: %v", p.Block, err)
		}
		endpoint := p.Endpoint
		if relayed[p.NodeID] {
			endpoint = overlay.RelayEndpoint(block.Addr().Next())
		}
		want.Peers = append(want.Peers, overlay.Peer{
			PublicKey: p.PublicKey, Endpoint: endpoint, AllowedIPs: []netip.Prefix{block}, Keepalive: overlayKeepalive,
		})
		names[p.PublicKey] = p.Node
	}
	return want, names, nil
}

func digestOverlay(st api.OverlayState) string {
	b, _ := json.Marshal(st)
	return string(b)
}

// serveNames starts the node's DNS server on its overlay address the
// first time and gives it the names of the state. Called with o.mu.
func (a *Agent) serveNames(o *overlayNode, addr netip.Addr, table map[string][]string) {
	if o.dns == nil {
		listen := netip.AddrPortFrom(addr, 53).String()
		srv, err := names.New(names.Config{Listen: []string{listen}}, a.log.With("component", "names"))
		if err != nil {
			if err.Error() != o.dnsFailed { // tried again every resync: say it once
				a.log.Warn("overlay: no DNS server for the overlay's names on this node", "err", err)
				o.dnsFailed = err.Error()
			}
			return
		}
		go func() {
			if err := srv.Run(a.stopCtx); err != nil {
				a.log.Warn("overlay: the names' DNS server stopped", "err", err)
			}
		}()
		o.dns, o.dnsAddr = srv, listen
		a.log.Info("overlay: DNS server for the overlay's names", "listen", listen)
	}
	records := make(map[string][]netip.Addr, len(table))
	for name, addrs := range table {
		for _, s := range addrs {
			if ip, err := netip.ParseAddr(s); err == nil {
				records[name] = append(records[name], ip)
			}
		}
	}
	if err := o.dns.Set(records); err != nil {
		a.log.Warn("overlay: the server's names", "err", err)
	}
}

// overlayNamesAddr is where the overlay's names are answered on this
// node (ip:53), "" while they are not.
func (a *Agent) overlayNamesAddr() string {
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dnsAddr
}

// overlayResolvers are the resolvers containers get: the overlay's names
// server, which forwards other names to the node's own; none while it
// does not run.
func (a *Agent) overlayResolvers() []netip.Addr {
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	if ap, err := netip.ParseAddrPort(o.dnsAddr); err == nil {
		return []netip.Addr{ap.Addr()}
	}
	return nil
}

func peerIDs(peers []api.OverlayPeer) map[string]string {
	out := make(map[string]string, len(peers))
	for _, p := range peers {
		out[p.PublicKey] = p.NodeID
	}
	return out
}

// overlayStateReq answers the server's overlay.state.
func (a *Agent) overlayStateReq(body json.RawMessage) (any, error) {
	if !a.cfg.Overlay {
		return nil, fmt.Errorf("this agent was not started with --overlay: %w", errdefs.ErrInvalid)
	}
	var st api.OverlayState
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, errdefs.Field("body", "%v", err)
	}
	if err := a.applyOverlay(st); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// overlayDevice is what GET /v1/overlay answers: the device and its
// peers as WireGuard sees them now.
func (a *Agent) overlayDevice(*http.Request) (api.OverlayDevice, error) {
	o := &a.overlay
	o.mu.Lock()
	mesh, st, peerNames, ids, why, dnsAddr := o.mesh, o.state, o.names, o.ids, o.err, o.dnsAddr
	o.mu.Unlock()
	if mesh == nil {
		if why != nil {
			return api.OverlayDevice{}, errdefs.Class(fmt.Errorf("the overlay device could not be made: %v", why), errdefs.ErrUnavailable)
		}
		if !a.cfg.Overlay {
			return api.OverlayDevice{}, errdefs.NotFound("overlay on this node: start its agent with --overlay")
		}
		return api.OverlayDevice{}, errdefs.NotFound("overlay on this node yet: the agent joins when its server offers one")
	}
	links, err := meshLinks(mesh, peerNames, ids)
	if err != nil {
		return api.OverlayDevice{}, err
	}
	return api.OverlayDevice{Interface: mesh.Interface(), Kind: mesh.Kind(), PublicKey: mesh.PublicKey(),
		ListenPort: mesh.ListenPort(), State: st, DNS: dnsAddr, Links: links}, nil
}

// overlayLinks are the mesh's links now, for a heartbeat; none before
// the mesh has a state.
func (a *Agent) overlayLinks() []api.OverlayLink {
	o := &a.overlay
	o.mu.Lock()
	mesh, st, peerNames, ids := o.mesh, o.state, o.names, o.ids
	o.mu.Unlock()
	if mesh == nil || st == nil {
		return nil
	}
	links, err := meshLinks(mesh, peerNames, ids)
	if err != nil || len(links) > api.MaxHeartbeatLinks {
		return nil
	}
	return links
}

// meshLinks are the device's peers as WireGuard sees them, with the
// peers' names and IDs by key.
func meshLinks(mesh *overlay.Mesh, peerNames, ids map[string]string) ([]api.OverlayLink, error) {
	peers, err := mesh.Peers()
	if err != nil {
		return nil, err
	}
	out := []api.OverlayLink{}
	for _, p := range peers {
		l := api.OverlayLink{Node: peerNames[p.PublicKey], NodeID: ids[p.PublicKey], PublicKey: p.PublicKey, Endpoint: p.Endpoint,
			RxBytes: p.RxBytes, TxBytes: p.TxBytes, AllowedIPs: []string{}}
		for _, ip := range p.AllowedIPs {
			l.AllowedIPs = append(l.AllowedIPs, ip.String())
		}
		if !p.LastHandshake.IsZero() {
			t := p.LastHandshake.UTC()
			l.LastHandshake = &t
		}
		out = append(out, l)
	}
	return out, nil
}

// overlayResync is how often the device is converged again on the last
// state: a link set down and up again loses its routes, which the kernel
// drops with the link.
const overlayResync = 5 * time.Second

// overlayLoop converges the device on the last state every overlayResync,
// until ctx ends.
func (a *Agent) overlayLoop(ctx context.Context) {
	t := time.NewTicker(overlayResync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o := &a.overlay
		o.mu.Lock()
		st, mesh := o.state, o.mesh
		o.mu.Unlock()
		if st == nil {
			continue
		}
		a.relayUnreached(mesh, *st)
		if err := a.applyOverlay(*st); err != nil {
			a.log.Warn("overlay: converge again", "err", err)
		}
	}
}

// closeOverlay removes the device when the agent stops.
func (a *Agent) closeOverlay(context.Context) {
	o := &a.overlay
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dns != nil {
		o.dns.Close()
		o.dns, o.dnsAddr = nil, ""
	}
	if o.mesh != nil {
		if err := o.mesh.Close(); err != nil {
			a.log.Warn("overlay: remove the device", "err", err)
		}
		o.mesh = nil
	}
}
