package overlay

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	wgdevice "golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/tuntest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestRelayCarriesWireGuard: two real wireguard-go devices whose peers'
// endpoints are relayed reach each other through nothing but the
// relays' Send and deliver, and a packet crosses intact.
func TestRelayCarriesWireGuard(t *testing.T) {
	prefix := netip.MustParsePrefix("100.64.0.0/10")
	addrA, addrB := netip.MustParseAddr("100.64.1.1"), netip.MustParseAddr("100.64.2.1")
	var bindA, bindB *relayBind
	var relayed atomic.Int64
	bindA = newRelayBind(conn.NewDefaultBind(), Relay{Prefix: prefix, Send: func(to netip.Addr, p []byte) {
		if to == addrB {
			relayed.Add(1)
			bindB.deliver(addrA, p)
		}
	}})
	bindB = newRelayBind(conn.NewDefaultBind(), Relay{Prefix: prefix, Send: func(to netip.Addr, p []byte) {
		if to == addrA {
			relayed.Add(1)
			bindA.deliver(addrB, p)
		}
	}})
	keyA, _ := wgtypes.GeneratePrivateKey()
	keyB, _ := wgtypes.GeneratePrivateKey()
	tunA, tunB := tuntest.NewChannelTUN(), tuntest.NewChannelTUN()
	silent := wgdevice.NewLogger(wgdevice.LogLevelSilent, "")
	devA, devB := wgdevice.NewDevice(tunA.TUN(), bindA, silent), wgdevice.NewDevice(tunB.TUN(), bindB, silent)
	t.Cleanup(devA.Close)
	t.Cleanup(devB.Close)
	configure := func(dev *wgdevice.Device, self, peer wgtypes.Key, peerAddr netip.Addr, block string) {
		t.Helper()
		conf := fmt.Sprintf("private_key=%s\nlisten_port=0\npublic_key=%s\nendpoint=%s\nallowed_ip=%s\n",
			hex.EncodeToString(self[:]), hexOfKey(peer.PublicKey()), RelayEndpoint(peerAddr), block)
		if err := dev.IpcSet(conf); err != nil {
			t.Fatal(err)
		}
		if err := dev.Up(); err != nil {
			t.Fatal(err)
		}
	}
	configure(devA, keyA, keyB, addrB, "100.64.2.0/24")
	configure(devB, keyB, keyA, addrA, "100.64.1.0/24")

	ping := tuntest.Ping(addrB, addrA)
	tunA.Outbound <- ping
	select {
	case got := <-tunB.Inbound:
		if !bytes.Equal(got, ping) {
			t.Errorf("B's TUN got %x, want the packet A sent, %x", got, ping)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the packet did not reach B through the relay")
	}
	if relayed.Load() < 3 { // a handshake's two messages and the packet
		t.Errorf("%d packets went through the relay, want the handshake and the packet", relayed.Load())
	}
	get, err := devB.IpcGet()
	if err != nil {
		t.Fatal(err)
	}
	peers, err := parseIpcGet(get)
	if err != nil || len(peers) != 1 || peers[0].Endpoint != RelayEndpoint(addrA) || peers[0].LastHandshake.IsZero() {
		t.Errorf("B's peer = %+v, %v; want A at its relay endpoint %s, with a handshake", peers, err, RelayEndpoint(addrA))
	}
}

func hexOfKey(k wgtypes.Key) string { return hex.EncodeToString(k[:]) }

// TestRelayBindClosed: a closed bind's relayed receive ends with
// net.ErrClosed, and what is delivered then is dropped.
func TestRelayBindClosed(t *testing.T) {
	b := newRelayBind(conn.NewDefaultBind(), Relay{Prefix: netip.MustParsePrefix("100.64.0.0/10"), Send: func(netip.Addr, []byte) {}})
	fns, _, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := b.ParseEndpoint("100.64.9.1:1")
	if _, ok := ep.(*relayEndpoint); err != nil || !ok {
		t.Errorf("ParseEndpoint(an overlay address) = %T, %v; want a relayed endpoint", ep, err)
	}
	if ep, err := b.ParseEndpoint("10.0.0.1:51820"); err != nil || ep.DstToString() != "10.0.0.1:51820" {
		t.Errorf("ParseEndpoint(an underlay address) = %v, %v; want a UDP endpoint", ep, err)
	}
	relayRecv := fns[len(fns)-1]
	b.deliver(netip.MustParseAddr("100.64.9.1"), []byte("x"))
	packets, sizes, eps := [][]byte{make([]byte, 64)}, []int{0}, []conn.Endpoint{nil}
	if n, err := relayRecv(packets, sizes, eps); n != 1 || err != nil || string(packets[0][:sizes[0]]) != "x" || eps[0].DstToString() != "100.64.9.1:1" {
		t.Errorf("receive = %d, %v, %q from %v; want the packet from 100.64.9.1:1", n, err, packets[0][:sizes[0]], eps[0])
	}
	b.Close()
	b.deliver(netip.MustParseAddr("100.64.9.1"), []byte("y"))
	done := make(chan error, 1)
	go func() { _, err := relayRecv(packets, sizes, eps); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("receive after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("receive after Close did not return")
	}
}
