package overlay

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Defaults for the zero values of Config.
const (
	DefaultInterface  = "nodemgr0"
	DefaultListenPort = 51820
	DefaultMTU        = 1420 // WireGuard's own default: 1500 less its IPv6 overhead
)

// resolveTimeout bounds the lookup of one peer's endpoint host name.
const resolveTimeout = 5 * time.Second

// Config says where the node's mesh lives.
type Config struct {
	Interface  string // link name, default "nodemgr0" (max 15 bytes)
	ListenPort int    // UDP port WireGuard listens on; 0: 51820
	KeyFile    string // private key path; created with mode 0600 (dir 0700) if missing, else read
	MTU        int    // 0: 1420
	// Relay, when set, carries packets to peers whose endpoint is their
	// overlay address (RelayEndpoint) through the server. Only
	// wireguard-go's device can: the kernel's, used where the kernel has
	// WireGuard, ignores it (Kind says which the mesh is).
	Relay *Relay
}

// State is the desired state from the server. It is level-triggered: the
// whole set every time, and peers missing from it are removed.
type State struct {
	Address netip.Prefix // this node's own overlay address, as a /32 (e.g. 100.64.3.1/32)
	Peers   []Peer
}

// Peer is another node of the mesh.
type Peer struct {
	PublicKey  string         // base64, as `wg` prints
	Endpoint   string         // "host:port"; "" when unknown (the peer then only answers after it contacts us)
	AllowedIPs []netip.Prefix // the peer's block(s), e.g. 100.64.4.0/24
	Keepalive  time.Duration  // 0: none; else whole seconds up to 65535
}

// PeerStatus is a peer as the device sees it.
type PeerStatus struct {
	PublicKey        string
	Endpoint         string // "ip:port" the peer was last heard from or set to; "" if none
	AllowedIPs       []netip.Prefix
	Keepalive        time.Duration
	LastHandshake    time.Time // zero: never
	RxBytes, TxBytes int64
}

// device is the WireGuard link a Mesh drives: wireguard-go in this
// process, or the kernel's. Its methods are called under Mesh.mu.
type device interface {
	kind() string
	peers() ([]PeerStatus, error)
	configure(changes []peerChange) error
	setAddress(p netip.Prefix) error
	setRoutes(want []netip.Prefix) error
	close() error
	// deliver hands the device a packet the server relayed.
	deliver(from netip.Addr, packet []byte)
}

// Mesh owns the node's WireGuard device and converges it on the State the
// server sends.
type Mesh struct {
	log  *slog.Logger
	cfg  Config
	pub  wgtypes.Key
	kind string

	mu  sync.Mutex
	dev device // nil once closed
	// setEndpoints holds the endpoint Apply last set for each peer.
	// WireGuard roams: a peer behind NAT is heard from an address the
	// server does not know, and Apply must not undo that every round.
	setEndpoints map[wgtypes.Key]netip.AddrPort
}

// New loads the node's key (making one if there is none), creates the
// WireGuard device, brings it up and listens.
func New(cfg Config, log *slog.Logger) (*Mesh, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new overlay: %w", err)
	}
	key, err := loadOrCreateKey(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("new overlay: %w", err)
	}
	dev, err := openDevice(cfg, key, log)
	if err != nil {
		return nil, fmt.Errorf("new overlay %s: %w", cfg.Interface, err)
	}
	m := &Mesh{log: log, cfg: cfg, pub: key.PublicKey(), kind: dev.kind(), dev: dev, setEndpoints: map[wgtypes.Key]netip.AddrPort{}}
	log.Info("overlay up", "interface", cfg.Interface, "kind", m.kind, "listen_port", cfg.ListenPort, "public_key", m.pub.String())
	return m, nil
}

// withDefaults fills in the zero values of cfg and checks the rest.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Interface == "" {
		cfg.Interface = DefaultInterface
	}
	if cfg.ListenPort == 0 {
		cfg.ListenPort = DefaultListenPort
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	switch {
	case len(cfg.Interface) > 15:
		return cfg, errdefs.Field("interface", "%q is longer than 15 bytes", cfg.Interface)
	case cfg.Interface == "." || cfg.Interface == ".." || strings.ContainsAny(cfg.Interface, "/:% \t\n"):
		// The kernel's rules, plus '%': a TUN name with %d is a template.
		return cfg, errdefs.Field("interface", "%q is not a link name", cfg.Interface)
	case cfg.ListenPort < 1 || cfg.ListenPort > 65535:
		return cfg, errdefs.Field("listen_port", "want 1-65535, got %d", cfg.ListenPort)
	case cfg.MTU < 576 || cfg.MTU > 65535:
		return cfg, errdefs.Field("mtu", "want 576-65535, got %d", cfg.MTU)
	case cfg.KeyFile == "":
		return cfg, errdefs.Field("key_file", "missing")
	}
	return cfg, nil
}

// PublicKey returns the node's public key, base64 as `wg` prints it: the
// one part of its identity that the server and the other nodes see.
func (m *Mesh) PublicKey() string { return m.pub.String() }

// ListenPort returns the UDP port WireGuard listens on.
func (m *Mesh) ListenPort() int { return m.cfg.ListenPort }

// Interface returns the name of the WireGuard link.
func (m *Mesh) Interface() string { return m.cfg.Interface }

// Kind says which WireGuard runs the link: "kernel" or "userspace".
func (m *Mesh) Kind() string { return m.kind }

// Apply converges the device, its address and its routes on s. It checks
// all of s first and changes nothing when any of it is wrong. It then
// reads what the device has and sets only the peers that differ, so an
// unchanged peer keeps its session; it is idempotent.
func (m *Mesh) Apply(s State) error {
	want, err := validate(s, m.pub, lookupHost)
	if err != nil {
		return fmt.Errorf("apply overlay: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dev == nil {
		return fmt.Errorf("apply overlay: %w", net.ErrClosed)
	}
	have, err := m.readPeers()
	if err != nil {
		return fmt.Errorf("apply overlay: read peers: %w", err)
	}
	changes := diffPeers(have, want, m.setEndpoints)
	if len(changes) > 0 {
		if err := m.dev.configure(changes); err != nil {
			// Part may be set; the next Apply reads it back and goes on.
			return fmt.Errorf("apply overlay peers: %w", err)
		}
		m.noteEndpoints(changes, want)
		m.logChanges(changes)
	}
	if err := m.dev.setAddress(s.Address); err != nil {
		return fmt.Errorf("apply overlay address %s: %w", s.Address, err)
	}
	if err := m.dev.setRoutes(routesOf(want)); err != nil {
		return fmt.Errorf("apply overlay routes: %w", err)
	}
	return nil
}

// noteEndpoints records the endpoints just set, and forgets those of
// peers that are no longer wanted.
func (m *Mesh) noteEndpoints(changes []peerChange, want []wantPeer) {
	for _, c := range changes {
		if c.endpoint.IsValid() {
			m.setEndpoints[c.key] = c.endpoint
		}
	}
	keep := make(map[wgtypes.Key]bool, len(want))
	for _, w := range want {
		keep[w.key] = true
	}
	for k := range m.setEndpoints {
		if !keep[k] {
			delete(m.setEndpoints, k)
		}
	}
}

func (m *Mesh) logChanges(changes []peerChange) {
	var added, updated, removed int
	for _, c := range changes {
		switch {
		case c.remove:
			removed++
		case c.create:
			added++
		default:
			updated++
		}
	}
	m.log.Info("overlay peers changed", "interface", m.cfg.Interface, "added", added, "updated", updated, "removed", removed)
}

// Deliver hands the mesh a WireGuard packet that the server relayed from
// the peer whose overlay address is from. Packets to a closed mesh, or
// beyond what it can queue, are dropped.
func (m *Mesh) Deliver(from netip.Addr, packet []byte) {
	m.mu.Lock()
	dev := m.dev
	m.mu.Unlock()
	if dev != nil {
		dev.deliver(from, packet)
	}
}

// Peers returns the peers as the device sees them, in key order.
func (m *Mesh) Peers() ([]PeerStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dev == nil {
		return nil, fmt.Errorf("read overlay peers: %w", net.ErrClosed)
	}
	peers, err := m.readPeers()
	if err != nil {
		return nil, fmt.Errorf("read overlay peers: %w", err)
	}
	return peers, nil
}

func (m *Mesh) readPeers() ([]PeerStatus, error) {
	peers, err := m.dev.peers()
	if err != nil {
		return nil, err
	}
	return sortPeers(peers), nil
}

// sortPeers puts peers in key order and sorts each one's allowed IPs, so
// that diffPeers can compare them as lists.
func sortPeers(peers []PeerStatus) []PeerStatus {
	for _, p := range peers {
		slices.SortFunc(p.AllowedIPs, netip.Prefix.Compare)
	}
	slices.SortFunc(peers, func(a, b PeerStatus) int { return strings.Compare(a.PublicKey, b.PublicKey) })
	return peers
}

// Close removes the link, and with it its address and routes. Closing
// twice is not an error.
func (m *Mesh) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dev == nil {
		return nil
	}
	err := m.dev.close()
	m.dev = nil
	if err != nil {
		return fmt.Errorf("close overlay %s: %w", m.cfg.Interface, err)
	}
	m.log.Info("overlay down", "interface", m.cfg.Interface)
	return nil
}

// wantPeer is a checked Peer, in the terms the device speaks.
type wantPeer struct {
	key       wgtypes.Key
	endpoint  netip.AddrPort // zero: unknown
	allowed   []netip.Prefix // sorted, no repeats
	keepalive time.Duration
}

// validate checks s and turns its peers into wantPeers. Errors name the
// field (peers[2].public_key). Host names in endpoints are resolved with
// lookup, since wireguard-go takes only addresses.
func validate(s State, self wgtypes.Key, lookup func(string) (netip.Addr, error)) ([]wantPeer, error) {
	if err := checkAddress(s.Address); err != nil {
		return nil, err
	}
	want := make([]wantPeer, 0, len(s.Peers))
	keys := make(map[wgtypes.Key]int, len(s.Peers))
	blocks := make(map[netip.Prefix]int, len(s.Peers))
	for i, p := range s.Peers {
		w, err := checkPeer(i, p, lookup)
		if err != nil {
			return nil, err
		}
		if w.key == self {
			return nil, errdefs.Field(peerField(i, "public_key"), "is this node's own key")
		}
		if j, ok := keys[w.key]; ok {
			return nil, errdefs.Field(peerField(i, "public_key"), "repeats peers[%d]", j)
		}
		keys[w.key] = i
		// WireGuard would quietly give a block to the last peer that names it.
		for j, b := range p.AllowedIPs {
			if other, ok := blocks[b]; ok && other != i {
				return nil, errdefs.Field(peerField(i, fmt.Sprintf("allowed_ips[%d]", j)), "%s is peers[%d]'s already", b, other)
			}
			blocks[b] = i
		}
		want = append(want, w)
	}
	return want, nil
}

// peerField names a field of peer i, as errors do: peers[2].public_key.
// Only errors call it, so that a valid state costs no formatting.
func peerField(i int, name string) string { return fmt.Sprintf("peers[%d].%s", i, name) }

func checkAddress(a netip.Prefix) error {
	switch {
	case !a.IsValid():
		return errdefs.Field("address", "missing")
	case a.Addr().Is4() && a.Bits() != 32:
		return errdefs.Field("address", "want a /32, got %s", a)
	case a.Addr().Is6() && a.Bits() != 128:
		return errdefs.Field("address", "want a /128, got %s", a)
	case !a.Addr().IsGlobalUnicast():
		return errdefs.Field("address", "%s is not a unicast address", a.Addr())
	}
	return nil
}

func checkPeer(i int, p Peer, lookup func(string) (netip.Addr, error)) (wantPeer, error) {
	key, err := wgtypes.ParseKey(p.PublicKey)
	if err != nil {
		return wantPeer{}, errdefs.Field(peerField(i, "public_key"), "not a base64 WireGuard key")
	}
	ep, err := parseEndpoint(p.Endpoint, lookup)
	if err != nil {
		return wantPeer{}, errdefs.Field(peerField(i, "endpoint"), "%v", err)
	}
	if p.Keepalive < 0 || p.Keepalive > 65535*time.Second || p.Keepalive%time.Second != 0 {
		return wantPeer{}, errdefs.Field(peerField(i, "keepalive"), "want whole seconds from 0s to 65535s, got %v", p.Keepalive)
	}
	for j, b := range p.AllowedIPs {
		if err := checkBlock(b); err != nil {
			return wantPeer{}, errdefs.Field(peerField(i, fmt.Sprintf("allowed_ips[%d]", j)), "%v", err)
		}
	}
	allowed := slices.Clone(p.AllowedIPs)
	slices.SortFunc(allowed, netip.Prefix.Compare)
	return wantPeer{key: key, endpoint: ep, allowed: slices.Compact(allowed), keepalive: p.Keepalive}, nil
}

func checkBlock(b netip.Prefix) error {
	switch {
	case !b.IsValid():
		return errors.New("not a prefix")
	case b != b.Masked():
		return fmt.Errorf("%s has host bits set; want %s", b, b.Masked())
	case b.Bits() == 0:
		// A default route through the mesh would carry WireGuard's own
		// packets to the peers' endpoints too: a loop.
		return fmt.Errorf("%s is a default route, not a block", b)
	}
	return nil
}

// parseEndpoint turns "host:port" into an address and port; "" is no endpoint.
func parseEndpoint(s string, lookup func(string) (netip.Addr, error)) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want host:port, got %q", s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return netip.AddrPort{}, fmt.Errorf("port %q is not 1-65535", port)
	}
	if host == "" {
		return netip.AddrPort{}, fmt.Errorf("%q has no host", s)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		if addr, err = lookup(host); err != nil {
			return netip.AddrPort{}, fmt.Errorf("resolve %s: %v", host, err)
		}
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(n)), nil
}

// lookupHost resolves host to one address, IPv4 first, since most
// underlays between nodes are.
func lookupHost(host string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(addrs) == 0 {
		return netip.Addr{}, errors.New("no addresses")
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return addrs[0], nil
}

// routesOf returns every block of every peer, sorted: one route each.
func routesOf(want []wantPeer) []netip.Prefix {
	var routes []netip.Prefix
	for _, w := range want {
		routes = append(routes, w.allowed...)
	}
	slices.SortFunc(routes, netip.Prefix.Compare)
	return routes
}

// peerChange is one peer's part of a device update.
type peerChange struct {
	key          wgtypes.Key
	remove       bool
	create       bool           // the peer is new; else it must exist already
	endpoint     netip.AddrPort // valid: set it
	setKeepalive bool
	keepalive    time.Duration
	setAllowed   bool // replace the allowed IPs with allowed
	allowed      []netip.Prefix
}

// diffPeers returns the changes that take the device from have to want:
// removals first, then additions and updates, each in key order. A peer
// that matches is left out, so its session and counters go on. have must
// be sorted by sortPeers.
//
// An endpoint is set when it differs both from the one observed and from
// the one last set (setEndpoints): a difference from the last set one
// alone means the peer roamed. A peer with no wanted endpoint keeps the one
// it has: WireGuard cannot unset it, and one learned from the peer is good.
func diffPeers(have []PeerStatus, want []wantPeer, setEndpoints map[wgtypes.Key]netip.AddrPort) []peerChange {
	byKey := make(map[string]*PeerStatus, len(have))
	for i := range have {
		byKey[have[i].PublicKey] = &have[i]
	}
	// Base64 once per peer: key order is base64 order, as in have.
	type keyed struct {
		b64 string
		*wantPeer
	}
	sorted := make([]keyed, len(want))
	wanted := make(map[string]bool, len(want))
	for i := range want {
		sorted[i] = keyed{want[i].key.String(), &want[i]}
		wanted[sorted[i].b64] = true
	}
	slices.SortFunc(sorted, func(a, b keyed) int { return strings.Compare(a.b64, b.b64) })

	var changes []peerChange
	for _, h := range have {
		if wanted[h.PublicKey] {
			continue
		}
		if key, err := wgtypes.ParseKey(h.PublicKey); err == nil {
			changes = append(changes, peerChange{key: key, remove: true})
		}
	}
	for _, w := range sorted {
		h, ok := byKey[w.b64]
		if !ok {
			changes = append(changes, peerChange{
				key: w.key, create: true, endpoint: w.endpoint,
				setKeepalive: w.keepalive != 0, keepalive: w.keepalive,
				setAllowed: len(w.allowed) > 0, allowed: w.allowed,
			})
			continue
		}
		c := peerChange{key: w.key}
		if seen, _ := netip.ParseAddrPort(h.Endpoint); w.endpoint.IsValid() && w.endpoint != seen && w.endpoint != setEndpoints[w.key] {
			c.endpoint = w.endpoint
		}
		if w.keepalive != h.Keepalive {
			c.setKeepalive, c.keepalive = true, w.keepalive
		}
		if !slices.Equal(w.allowed, h.AllowedIPs) {
			c.setAllowed, c.allowed = true, w.allowed
		}
		if c.endpoint.IsValid() || c.setKeepalive || c.setAllowed {
			changes = append(changes, c)
		}
	}
	return changes
}

// uapiText renders changes in wireguard-go's configuration protocol
// (https://www.wireguard.com/xplatform/). It never says replace_peers,
// which would drop every session; an update says update_only, so a peer
// removed meanwhile is not brought back half configured.
func uapiText(changes []peerChange) string {
	var b strings.Builder
	for _, c := range changes {
		fmt.Fprintf(&b, "public_key=%s\n", hex.EncodeToString(c.key[:]))
		if c.remove {
			b.WriteString("remove=true\n")
			continue
		}
		if !c.create {
			b.WriteString("update_only=true\n")
		}
		if c.endpoint.IsValid() {
			fmt.Fprintf(&b, "endpoint=%s\n", c.endpoint)
		}
		if c.setKeepalive {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", int(c.keepalive/time.Second))
		}
		if c.setAllowed {
			b.WriteString("replace_allowed_ips=true\n")
			for _, p := range c.allowed {
				fmt.Fprintf(&b, "allowed_ip=%s\n", p)
			}
		}
	}
	return b.String()
}

// parseIpcGet reads the peers out of wireguard-go's answer to "get=1".
// The answer holds the private key too; it is skipped and never logged.
func parseIpcGet(text string) ([]PeerStatus, error) {
	var peers []PeerStatus
	var cur *PeerStatus
	var sec, nsec int64
	done := func() {
		if cur != nil && (sec != 0 || nsec != 0) {
			cur.LastHandshake = time.Unix(sec, nsec)
		}
		sec, nsec = 0, 0
	}
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("parse wireguard state: line %q has no '='", line)
		}
		if key == "public_key" {
			done()
			pub, err := hexKey(value)
			if err != nil {
				return nil, fmt.Errorf("parse wireguard state: public_key: %w", err)
			}
			peers = append(peers, PeerStatus{PublicKey: pub.String()})
			cur = &peers[len(peers)-1]
			continue
		}
		if cur == nil {
			continue // the device's own lines: private_key, listen_port, fwmark
		}
		if err := parsePeerLine(cur, key, value, &sec, &nsec); err != nil {
			return nil, fmt.Errorf("parse wireguard state: %s: %w", key, err)
		}
	}
	done()
	return peers, nil
}

// parsePeerLine sets the field of p that one line of a peer's section names.
// Lines of no use here (preshared_key, protocol_version) are skipped.
func parsePeerLine(p *PeerStatus, key, value string, sec, nsec *int64) error {
	var err error
	switch key {
	case "endpoint":
		p.Endpoint = value
	case "allowed_ip":
		var b netip.Prefix
		b, err = netip.ParsePrefix(value)
		p.AllowedIPs = append(p.AllowedIPs, b)
	case "persistent_keepalive_interval":
		var s int64
		s, err = strconv.ParseInt(value, 10, 64)
		p.Keepalive = time.Duration(s) * time.Second
	case "last_handshake_time_sec":
		*sec, err = strconv.ParseInt(value, 10, 64)
	case "last_handshake_time_nsec":
		*nsec, err = strconv.ParseInt(value, 10, 64)
	case "rx_bytes":
		p.RxBytes, err = strconv.ParseInt(value, 10, 64)
	case "tx_bytes":
		p.TxBytes, err = strconv.ParseInt(value, 10, 64)
	}
	return err
}

func hexKey(s string) (wgtypes.Key, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return wgtypes.Key{}, err
	}
	return wgtypes.NewKey(b)
}

// loadOrCreateKey reads the private key at path, or makes one and writes
// it there if there is none.
func loadOrCreateKey(path string) (wgtypes.Key, error) {
	key, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("read key file %s: %w", path, err)
	}
	return key, nil
}

// readKey reads a private key file, refusing one that others may read:
// whoever holds the key is this node on the mesh.
func readKey(path string) (wgtypes.Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return wgtypes.Key{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return wgtypes.Key{}, err
	}
	if !fi.Mode().IsRegular() {
		return wgtypes.Key{}, fmt.Errorf("not a regular file")
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return wgtypes.Key{}, fmt.Errorf("mode %#o lets group or others read it: run chmod 600 %s", perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return wgtypes.Key{}, err
	}
	key, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return wgtypes.Key{}, errors.New("not a base64 WireGuard private key")
	}
	return key, nil
}

// createKey makes a private key and writes it to path, mode 0600, in a
// directory made 0700 if missing. The write is atomic, so a crash leaves
// no half key that the next start would refuse.
func createKey(path string) (wgtypes.Key, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return wgtypes.Key{}, fmt.Errorf("create key file %s: %w", path, err)
	}
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("generate key: %w", err)
	}
	if err := atomicfile.Write(path, []byte(key.String()+"\n")); err != nil {
		return wgtypes.Key{}, fmt.Errorf("create key file %s: %w", path, err)
	}
	return key, nil
}
