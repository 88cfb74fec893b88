package overlay

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/conn"
	wgdevice "golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/tuntest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// testKey is a key that reads well in hex: n, then zeros. A public key
// need not be a point on the curve for WireGuard to take it.
func testKey(n byte) wgtypes.Key { return wgtypes.Key{n} }

// hexOf is testKey(n) as the configuration protocol writes it.
func hexOf(n byte) string { return fmt.Sprintf("%02x", n) + strings.Repeat("0", 62) }

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

// resolveOnly resolves one name, as DNS would, so that tests do not use
// the network.
func resolveOnly(name, addr string) func(string) (netip.Addr, error) {
	return func(host string) (netip.Addr, error) {
		if host == name {
			return netip.MustParseAddr(addr), nil
		}
		return netip.Addr{}, errors.New("no such host")
	}
}

func TestValidate(t *testing.T) {
	self := testKey(9)
	ok := Peer{PublicKey: testKey(1).String(), Endpoint: "10.0.0.1:51820", AllowedIPs: pfxs("100.64.1.0/24")}
	with := func(edit func(*Peer)) Peer {
		p := ok
		p.AllowedIPs = pfxs("100.64.2.0/24")
		p.PublicKey = testKey(2).String()
		edit(&p)
		return p
	}
	addr := pfx("100.64.3.1/32")
	tests := []struct {
		name  string
		state State
		field string // "" when valid
		why   string // part of the reason
	}{
		{"valid", State{Address: addr, Peers: []Peer{ok}}, "", ""},
		{"no peers", State{Address: addr}, "", ""},
		{"host name endpoint", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = "node2.example:51820" })}}, "", ""},
		{"ipv6 address", State{Address: pfx("fd00::1/128")}, "", ""},
		{"no address", State{}, "address", "missing"},
		{"address a block", State{Address: pfx("100.64.0.0/24")}, "address", "want a /32, got 100.64.0.0/24"},
		{"ipv6 address a block", State{Address: pfx("fd00::/64")}, "address", "want a /128"},
		{"address not unicast", State{Address: pfx("0.0.0.0/32")}, "address", "not a unicast"},
		{"repeated key", State{Address: addr, Peers: []Peer{ok, ok}}, "peers[1].public_key", "repeats peers[0]"},
		{"garbage key", State{Address: addr, Peers: []Peer{ok, with(func(p *Peer) { p.PublicKey = "xyz" })}}, "peers[1].public_key", "not a base64 WireGuard key"},
		{"own key", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.PublicKey = self.String() })}}, "peers[0].public_key", "own key"},
		{"endpoint without port", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = "10.0.0.1" })}}, "peers[0].endpoint", "want host:port"},
		{"endpoint port zero", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = "10.0.0.1:0" })}}, "peers[0].endpoint", "not 1-65535"},
		{"endpoint port too big", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = "10.0.0.1:65536" })}}, "peers[0].endpoint", "not 1-65535"},
		{"endpoint without host", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = ":51820" })}}, "peers[0].endpoint", "no host"},
		{"endpoint unresolvable", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Endpoint = "nowhere.example:51820" })}}, "peers[0].endpoint", "resolve nowhere.example"},
		{"keepalive negative", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Keepalive = -time.Second })}}, "peers[0].keepalive", "whole seconds"},
		{"keepalive fraction", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Keepalive = 1500 * time.Millisecond })}}, "peers[0].keepalive", "got 1.5s"},
		{"keepalive too long", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.Keepalive = 65536 * time.Second })}}, "peers[0].keepalive", "whole seconds"},
		{"allowed ip host bits", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.AllowedIPs = pfxs("100.64.2.0/24", "100.64.4.1/24") })}}, "peers[0].allowed_ips[1]", "want 100.64.4.0/24"},
		{"allowed ip default route", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.AllowedIPs = pfxs("0.0.0.0/0") })}}, "peers[0].allowed_ips[0]", "default route"},
		{"allowed ip zero", State{Address: addr, Peers: []Peer{with(func(p *Peer) { p.AllowedIPs = []netip.Prefix{{}} })}}, "peers[0].allowed_ips[0]", "not a prefix"},
		{"allowed ip of two peers", State{Address: addr, Peers: []Peer{ok, with(func(p *Peer) { p.AllowedIPs = pfxs("100.64.2.0/24", "100.64.1.0/24") })}}, "peers[1].allowed_ips[1]", "peers[0]'s already"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validate(tc.state, self, resolveOnly("node2.example", "10.0.0.2"))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("validate(%v) = %v, want nil", tc.state, err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.why) {
				t.Fatalf("validate(%v) = %v, want a %s error saying %q", tc.state, err, tc.field, tc.why)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("validate(%v) = %v, not an ErrInvalid", tc.state, err)
			}
		})
	}
}

func TestValidateNormalizes(t *testing.T) {
	s := State{Address: pfx("100.64.3.1/32"), Peers: []Peer{{
		PublicKey:  testKey(1).String(),
		Endpoint:   "node2.example:51820",
		AllowedIPs: pfxs("100.64.5.0/24", "100.64.4.0/24", "100.64.5.0/24"),
		Keepalive:  25 * time.Second,
	}}}
	got, err := validate(s, testKey(9), resolveOnly("node2.example", "::ffff:10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	want := []wantPeer{{key: testKey(1), endpoint: netip.MustParseAddrPort("10.0.0.2:51820"), allowed: pfxs("100.64.4.0/24", "100.64.5.0/24"), keepalive: 25 * time.Second}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(wantPeer{}), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("validate(%v) (-want +got):\n%s", s, diff)
	}
}

func TestDiffPeers(t *testing.T) {
	ep1, ep2 := netip.MustParseAddrPort("10.0.0.1:51820"), netip.MustParseAddrPort("10.0.0.2:51820")
	roamed := "192.0.2.7:40000"
	peer1 := wantPeer{key: testKey(1), endpoint: ep1, allowed: pfxs("100.64.1.0/24"), keepalive: 25 * time.Second}
	seen1 := PeerStatus{PublicKey: testKey(1).String(), Endpoint: ep1.String(), AllowedIPs: pfxs("100.64.1.0/24"), Keepalive: 25 * time.Second, RxBytes: 10}
	peer2 := wantPeer{key: testKey(2), allowed: pfxs("100.64.2.0/24", "100.64.12.0/24")}
	seen2 := PeerStatus{PublicKey: testKey(2).String(), AllowedIPs: pfxs("100.64.2.0/24", "100.64.12.0/24")}
	edit := func(w wantPeer, f func(*wantPeer)) wantPeer { f(&w); return w }
	tests := []struct {
		name string
		have []PeerStatus
		want []wantPeer
		set  map[wgtypes.Key]netip.AddrPort
		text string
	}{
		{"nothing", nil, nil, nil, ""},
		{"add to empty device", nil, []wantPeer{peer2, peer1}, nil,
			"public_key=" + hexOf(1) + "\nendpoint=10.0.0.1:51820\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=100.64.1.0/24\n" +
				"public_key=" + hexOf(2) + "\nreplace_allowed_ips=true\nallowed_ip=100.64.2.0/24\nallowed_ip=100.64.12.0/24\n"},
		{"no change", []PeerStatus{seen1, seen2}, []wantPeer{peer1, peer2}, nil, ""},
		{"endpoint moved", []PeerStatus{seen1}, []wantPeer{edit(peer1, func(w *wantPeer) { w.endpoint = ep2 })}, nil,
			"public_key=" + hexOf(1) + "\nupdate_only=true\nendpoint=10.0.0.2:51820\n"},
		{"peer roamed from the endpoint set", []PeerStatus{{PublicKey: seen1.PublicKey, Endpoint: roamed, AllowedIPs: seen1.AllowedIPs, Keepalive: seen1.Keepalive}},
			[]wantPeer{peer1}, map[wgtypes.Key]netip.AddrPort{testKey(1): ep1}, ""},
		{"server moves a roamed peer", []PeerStatus{{PublicKey: seen1.PublicKey, Endpoint: roamed, AllowedIPs: seen1.AllowedIPs, Keepalive: seen1.Keepalive}},
			[]wantPeer{edit(peer1, func(w *wantPeer) { w.endpoint = ep2 })}, map[wgtypes.Key]netip.AddrPort{testKey(1): ep1},
			"public_key=" + hexOf(1) + "\nupdate_only=true\nendpoint=10.0.0.2:51820\n"},
		{"endpoint no longer known", []PeerStatus{seen1}, []wantPeer{edit(peer1, func(w *wantPeer) { w.endpoint = netip.AddrPort{} })}, nil, ""},
		{"keepalive off", []PeerStatus{seen1}, []wantPeer{edit(peer1, func(w *wantPeer) { w.keepalive = 0 })}, nil,
			"public_key=" + hexOf(1) + "\nupdate_only=true\npersistent_keepalive_interval=0\n"},
		{"block added", []PeerStatus{seen2}, []wantPeer{edit(peer2, func(w *wantPeer) { w.allowed = pfxs("100.64.2.0/24", "100.64.3.0/24", "100.64.12.0/24") })}, nil,
			"public_key=" + hexOf(2) + "\nupdate_only=true\nreplace_allowed_ips=true\nallowed_ip=100.64.2.0/24\nallowed_ip=100.64.3.0/24\nallowed_ip=100.64.12.0/24\n"},
		{"all blocks gone", []PeerStatus{seen2}, []wantPeer{edit(peer2, func(w *wantPeer) { w.allowed = nil })}, nil,
			"public_key=" + hexOf(2) + "\nupdate_only=true\nreplace_allowed_ips=true\n"},
		{"remove, keep, add", []PeerStatus{seen1, seen2}, []wantPeer{peer2, {key: testKey(3)}}, nil,
			"public_key=" + hexOf(1) + "\nremove=true\n" +
				"public_key=" + hexOf(3) + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := uapiText(diffPeers(tc.have, tc.want, tc.set))
			if got != tc.text {
				t.Errorf("uapiText(diffPeers(%v, %v)) =\n%s\nwant\n%s", tc.have, tc.want, got, tc.text)
			}
		})
	}
}

// TestDiffConvergesWireguardGo feeds the diffs to a real wireguard-go
// device (on an in-memory TUN, so no root) and reads it back: each desired
// state is reached in one step, and a second diff finds nothing to do.
func TestDiffConvergesWireguardGo(t *testing.T) {
	dev := wgdevice.NewDevice(tuntest.NewChannelTUN().TUN(), conn.NewDefaultBind(), wgdevice.NewLogger(wgdevice.LogLevelSilent, ""))
	t.Cleanup(dev.Close)
	if err := dev.IpcSet("private_key=" + hexOf(9) + "\n"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		peers []Peer
	}{
		{"add two", []Peer{
			{PublicKey: testKey(1).String(), Endpoint: "10.0.0.1:51820", AllowedIPs: pfxs("100.64.1.0/24"), Keepalive: 25 * time.Second},
			{PublicKey: testKey(2).String(), AllowedIPs: pfxs("100.64.2.0/24", "fd00:2::/64")},
		}},
		{"change each field", []Peer{
			{PublicKey: testKey(1).String(), Endpoint: "[fd00::1]:51821", AllowedIPs: pfxs("100.64.1.0/24", "100.64.11.0/24")},
			{PublicKey: testKey(2).String(), AllowedIPs: pfxs("100.64.2.0/25"), Keepalive: 10 * time.Second},
		}},
		{"remove one, add one", []Peer{
			{PublicKey: testKey(2).String(), AllowedIPs: pfxs("100.64.2.0/25"), Keepalive: 10 * time.Second},
			{PublicKey: testKey(3).String(), Endpoint: "10.0.0.3:51820", AllowedIPs: pfxs("100.64.3.0/24")},
		}},
		{"none", nil},
	}
	set := map[wgtypes.Key]netip.AddrPort{}
	for _, step := range steps {
		s := State{Address: pfx("100.64.9.1/32"), Peers: step.peers}
		want, err := validate(s, testKey(9), resolveOnly("", ""))
		if err != nil {
			t.Fatalf("%s: validate: %v", step.name, err)
		}
		changes := diffPeers(readDevice(t, dev), want, set)
		if err := dev.IpcSet(uapiText(changes)); err != nil {
			t.Fatalf("%s: IpcSet(%q) = %v", step.name, uapiText(changes), err)
		}
		for _, c := range changes {
			if c.endpoint.IsValid() {
				set[c.key] = c.endpoint
			}
		}
		have := readDevice(t, dev)
		if again := uapiText(diffPeers(have, want, set)); again != "" {
			t.Errorf("%s: after IpcSet the diff is still %q", step.name, again)
		}
		if got, want := len(have), len(step.peers); got != want {
			t.Errorf("%s: device has %d peers, want %d", step.name, got, want)
		}
	}
}

// readDevice reads dev's peers as linuxDevice and Mesh.readPeers do.
func readDevice(t *testing.T, dev *wgdevice.Device) []PeerStatus {
	t.Helper()
	text, err := dev.IpcGet()
	if err != nil {
		t.Fatal(err)
	}
	peers, err := parseIpcGet(text)
	if err != nil {
		t.Fatalf("parseIpcGet(%q) = %v", text, err)
	}
	return sortPeers(peers)
}

func TestParseIpcGet(t *testing.T) {
	text := "private_key=" + hexOf(9) + "\nlisten_port=51820\n" +
		"public_key=" + hexOf(1) + "\npreshared_key=" + hexOf(0) + "\nprotocol_version=1\nendpoint=10.213.7.2:51820\n" +
		"last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=500\ntx_bytes=1184\nrx_bytes=1056\n" +
		"persistent_keepalive_interval=25\nallowed_ip=100.64.2.0/24\nallowed_ip=fd00:2::/64\n" +
		"public_key=" + hexOf(2) + "\npreshared_key=" + hexOf(0) + "\nprotocol_version=1\n" +
		"last_handshake_time_sec=0\nlast_handshake_time_nsec=0\ntx_bytes=0\nrx_bytes=0\npersistent_keepalive_interval=0\n\n"
	want := []PeerStatus{
		{PublicKey: testKey(1).String(), Endpoint: "10.213.7.2:51820", AllowedIPs: pfxs("100.64.2.0/24", "fd00:2::/64"),
			Keepalive: 25 * time.Second, LastHandshake: time.Unix(1700000000, 500), RxBytes: 1056, TxBytes: 1184},
		{PublicKey: testKey(2).String()},
	}
	got, err := parseIpcGet(text)
	if err != nil {
		t.Fatalf("parseIpcGet = %v", err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("parseIpcGet (-want +got):\n%s", diff)
	}

	for _, bad := range []string{
		"public_key=zz\n",
		"public_key=" + hexOf(1) + "\nrx_bytes=many\n",
		"public_key=" + hexOf(1) + "\nallowed_ip=100.64.2.0\n",
		"listen_port\n",
	} {
		if _, err := parseIpcGet(bad); err == nil {
			t.Errorf("parseIpcGet(%q) = nil error, want one", bad)
		}
	}
}

func TestKeyFileCreatedAndReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "overlay")
	path := filepath.Join(dir, "key")
	made, err := loadOrCreateKey(path)
	if err != nil {
		t.Fatalf("loadOrCreateKey(%s) = %v", path, err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	again, err := loadOrCreateKey(path)
	if err != nil {
		t.Fatalf("loadOrCreateKey(%s) again = %v", path, err)
	}
	if again.PublicKey() != made.PublicKey() {
		t.Errorf("reloaded public key = %s, want %s", again.PublicKey(), made.PublicKey())
	}
}

func TestKeyFileRefused(t *testing.T) {
	key, _ := wgtypes.GeneratePrivateKey()
	tests := []struct {
		name string
		body string
		mode os.FileMode
		why  string
	}{
		{"world readable", key.String(), 0o644, "chmod 600"},
		{"group readable", key.String(), 0o640, "chmod 600"},
		{"not a key", "hello", 0o600, "not a base64 WireGuard private key"},
		{"empty", "", 0o600, "not a base64 WireGuard private key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, []byte(tc.body), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			_, err := loadOrCreateKey(path)
			if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), path) {
				t.Errorf("loadOrCreateKey(%s) = %v, want an error naming the file and saying %q", tc.name, err, tc.why)
			}
			if body, _ := os.ReadFile(path); string(body) != tc.body {
				t.Errorf("the refused key file was changed to %q", body)
			}
		})
	}
	t.Run("a directory", func(t *testing.T) {
		if _, err := loadOrCreateKey(t.TempDir()); err == nil {
			t.Errorf("loadOrCreateKey(a directory) = nil error, want one")
		}
	})
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		in    Config
		want  Config
		field string
	}{
		{Config{KeyFile: "k"}, Config{Interface: "nodemgr0", ListenPort: 51820, KeyFile: "k", MTU: 1420}, ""},
		{Config{Interface: "wg1", ListenPort: 4000, KeyFile: "k", MTU: 1380}, Config{Interface: "wg1", ListenPort: 4000, KeyFile: "k", MTU: 1380}, ""},
		{Config{}, Config{}, "key_file"},
		{Config{Interface: "a-very-long-name0", KeyFile: "k"}, Config{}, "interface"},
		{Config{Interface: "wg%d", KeyFile: "k"}, Config{}, "interface"},
		{Config{Interface: "a/b", KeyFile: "k"}, Config{}, "interface"},
		{Config{ListenPort: 70000, KeyFile: "k"}, Config{}, "listen_port"},
		{Config{ListenPort: -1, KeyFile: "k"}, Config{}, "listen_port"},
		{Config{MTU: 100, KeyFile: "k"}, Config{}, "mtu"},
	}
	for _, tc := range tests {
		got, err := tc.in.withDefaults()
		var fe *errdefs.FieldError
		switch {
		case tc.field == "" && (err != nil || got != tc.want):
			t.Errorf("%+v.withDefaults() = %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%+v.withDefaults() = %v, want a %s error", tc.in, err, tc.field)
		}
	}
}

// BenchmarkApply measures what Apply does on a 1000-peer mesh that has
// not changed, apart from its three netlink reads: check the state, parse
// the device's answer, diff. The diff must come out empty.
func BenchmarkApply(b *testing.B) {
	const n = 1000
	s := State{Address: pfx("100.64.0.1/32")}
	var get strings.Builder
	for i := range n {
		key := wgtypes.Key{byte(i), byte(i >> 8), 1}
		block := netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64 + byte(i>>8), byte(i), 0}), 24)
		ep := fmt.Sprintf("10.1.%d.%d:51820", i>>8, i&0xff)
		s.Peers = append(s.Peers, Peer{PublicKey: key.String(), Endpoint: ep, AllowedIPs: []netip.Prefix{block}, Keepalive: 25 * time.Second})
		fmt.Fprintf(&get, "public_key=%x\nendpoint=%s\nlast_handshake_time_sec=1700000000\nlast_handshake_time_nsec=0\ntx_bytes=1\nrx_bytes=1\npersistent_keepalive_interval=25\nallowed_ip=%s\n", key[:], ep, block)
	}
	b.ReportAllocs()
	for b.Loop() {
		want, err := validate(s, testKey(0), resolveOnly("", ""))
		if err != nil {
			b.Fatal(err)
		}
		peers, err := parseIpcGet(get.String())
		if err != nil {
			b.Fatal(err)
		}
		if changes := diffPeers(sortPeers(peers), want, nil); len(changes) != 0 {
			b.Fatalf("diff of an unchanged mesh has %d changes", len(changes))
		}
	}
}
