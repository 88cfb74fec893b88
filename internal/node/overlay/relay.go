package overlay

import (
	"bytes"
	"net"
	"net/netip"
	"sync"

	"golang.zx2c4.com/wireguard/conn"
)

// Relaying: two nodes that cannot reach each other's UDP (NAT on both
// sides, a firewall) send their WireGuard packets through the server
// instead, over the agents' sessions (Tailscale's DERP, in spirit). The
// packets stay WireGuard's: the server carries ciphertext it cannot read.
//
// A relayed peer's endpoint is its own overlay address with RelayPort,
// which no real endpoint can be (the mesh routes that address, so UDP to
// it would loop): the bind sends packets to such endpoints through Relay
// and hands wireguard-go what the server delivers as coming from one, so
// a peer that hears from us through the server answers the same way
// (WireGuard roams to the endpoint it last heard from).

// RelayPort is the port of relayed peers' endpoints.
const RelayPort = 1

// Relay carries packets between this node and its peers through the
// server.
type Relay struct {
	// Prefix is the overlay's: endpoints inside it are relayed.
	Prefix netip.Prefix
	// Send carries one packet to the peer whose overlay address is to. It
	// must not block: a packet it cannot take now is dropped, as UDP would.
	Send func(to netip.Addr, packet []byte)
}

// RelayEndpoint is the endpoint that makes WireGuard reach the peer
// whose overlay address is addr through the server.
func RelayEndpoint(addr netip.Addr) string {
	return netip.AddrPortFrom(addr, RelayPort).String()
}

// relayQueue is how many relayed packets wait for wireguard-go.
const relayQueue = 256

// relayBind is wireguard-go's UDP bind, with relayed endpoints.
type relayBind struct {
	conn.Bind
	relay Relay

	mu   sync.Mutex
	in   chan relayed  // nil while closed
	done chan struct{} // closed by Close
}

type relayed struct {
	from   netip.Addr
	packet []byte
}

func newRelayBind(udp conn.Bind, r Relay) *relayBind { return &relayBind{Bind: udp, relay: r} }

func (b *relayBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := b.Bind.Open(port)
	if err != nil {
		return nil, 0, err
	}
	in, done := make(chan relayed, relayQueue), make(chan struct{})
	b.mu.Lock()
	b.in, b.done = in, done
	b.mu.Unlock()
	return append(fns, receiveRelayed(in, done)), actual, nil
}

// receiveRelayed hands wireguard-go one relayed packet at a time.
func receiveRelayed(in <-chan relayed, done <-chan struct{}) conn.ReceiveFunc {
	return func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		select {
		case r := <-in:
			sizes[0] = copy(packets[0], r.packet)
			eps[0] = &relayEndpoint{netip.AddrPortFrom(r.from, RelayPort)}
			return 1, nil
		case <-done:
			return 0, net.ErrClosed
		}
	}
}

func (b *relayBind) Close() error {
	b.mu.Lock()
	if b.done != nil {
		close(b.done)
		b.in, b.done = nil, nil
	}
	b.mu.Unlock()
	return b.Bind.Close()
}

func (b *relayBind) ParseEndpoint(s string) (conn.Endpoint, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil && b.relay.Prefix.Contains(ap.Addr()) {
		return &relayEndpoint{ap}, nil
	}
	return b.Bind.ParseEndpoint(s)
}

func (b *relayBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	r, ok := ep.(*relayEndpoint)
	if !ok {
		return b.Bind.Send(bufs, ep)
	}
	for _, buf := range bufs {
		b.relay.Send(r.ap.Addr(), bytes.Clone(buf)) // wireguard-go reuses its buffers
	}
	return nil
}

// deliver hands wireguard-go a packet the server relayed from the peer
// whose overlay address is from; dropped when the queue is full or the
// bind closed.
func (b *relayBind) deliver(from netip.Addr, packet []byte) {
	b.mu.Lock()
	in := b.in
	b.mu.Unlock()
	if in == nil {
		return
	}
	select {
	case in <- relayed{from, packet}:
	default:
	}
}

// relayEndpoint is a peer reached through the server.
type relayEndpoint struct{ ap netip.AddrPort }

func (e *relayEndpoint) ClearSrc()           {}
func (e *relayEndpoint) SrcToString() string { return "" }
func (e *relayEndpoint) DstToString() string { return e.ap.String() }
func (e *relayEndpoint) DstToBytes() []byte  { b, _ := e.ap.MarshalBinary(); return b }
func (e *relayEndpoint) DstIP() netip.Addr   { return e.ap.Addr() }
func (e *relayEndpoint) SrcIP() netip.Addr   { return netip.Addr{} }

var (
	_ conn.Bind     = (*relayBind)(nil)
	_ conn.Endpoint = (*relayEndpoint)(nil)
)
