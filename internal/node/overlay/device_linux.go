package overlay

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	wgdevice "golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// routeProtocol marks the routes Apply installs, so that it removes only
// its own from the link and leaves the kernel's (IPv6 link-local,
// multicast) alone. 110 is unassigned in iproute2's rt_protos.
const routeProtocol netlink.RouteProtocol = 110

// linuxDevice is a WireGuard link run by wireguard-go in this process
// (user set) or by the kernel (wgc set). Addresses and routes are set with
// netlink either way.
type linuxDevice struct {
	name  string
	link  netlink.Link
	user  *wgdevice.Device
	wgc   *wgctrl.Client
	relay *relayBind // nil: no relay (or the kernel's device)
}

// openDevice makes the link, kernel WireGuard if the kernel has it, else
// wireguard-go on a TUN link, and brings it up.
func openDevice(cfg Config, key wgtypes.Key, log *slog.Logger) (device, error) {
	if err := removeStale(cfg.Interface, log); err != nil {
		return nil, err
	}
	d, err := openKernel(cfg, key)
	if err != nil {
		log.Debug("kernel wireguard unavailable, using wireguard-go", "interface", cfg.Interface, "err", err)
		if d, err = openUserspace(cfg, key, log); err != nil {
			return nil, err
		}
	}
	if err := netlink.LinkSetUp(d.link); err != nil {
		d.close()
		return nil, fmt.Errorf("set link up: %w", err)
	}
	return d, nil
}

// removeStale deletes a kernel WireGuard link of our name that an agent
// left when it died without Close: unlike a TUN link, it outlives its
// process. A link of another type is someone else's, and an error.
func removeStale(name string, log *slog.Logger) error {
	link, err := netlink.LinkByName(name)
	if _, ok := errors.AsType[netlink.LinkNotFoundError](err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up link: %w", err)
	}
	if link.Type() != "wireguard" {
		return fmt.Errorf("a %s link of this name exists already", link.Type())
	}
	log.Info("removing stale overlay link", "interface", name)
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("remove stale link: %w", err)
	}
	return nil
}

// openKernel makes a kernel WireGuard link, configured over generic
// netlink. It is untested: nodemgr's test machines lack the wireguard
// module, so they always take openUserspace. Only its conversions
// (kernelPeers, kernelPeerConfigs) are tested.
func openKernel(cfg Config, key wgtypes.Key) (_ *linuxDevice, err error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = cfg.Interface, cfg.MTU
	if err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: attrs}); err != nil {
		return nil, fmt.Errorf("add wireguard link: %w", err)
	}
	d := &linuxDevice{name: cfg.Interface}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.link, err = netlink.LinkByName(cfg.Interface); err != nil {
		// Without the link we cannot delete it either; removeStale will.
		return nil, fmt.Errorf("look up new link: %w", err)
	}
	if d.wgc, err = wgctrl.New(); err != nil {
		return nil, fmt.Errorf("open wireguard netlink: %w", err)
	}
	port := cfg.ListenPort
	if err := d.wgc.ConfigureDevice(cfg.Interface, wgtypes.Config{PrivateKey: &key, ListenPort: &port}); err != nil {
		return nil, fmt.Errorf("configure wireguard link: %w", err)
	}
	return d, nil
}

// openUserspace runs wireguard-go on a new TUN link, configured in process.
func openUserspace(cfg Config, key wgtypes.Key, log *slog.Logger) (_ *linuxDevice, err error) {
	tdev, err := tun.CreateTUN(cfg.Interface, cfg.MTU)
	if err != nil {
		return nil, fmt.Errorf("create tun: %w", err)
	}
	d := &linuxDevice{name: cfg.Interface}
	var bind conn.Bind = conn.NewDefaultBind()
	if cfg.Relay != nil {
		d.relay = newRelayBind(bind, *cfg.Relay)
		bind = d.relay
	}
	d.user = wgdevice.NewDevice(tdev, bind, wgLogger(log))
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	conf := fmt.Sprintf("private_key=%s\nlisten_port=%d\n", hex.EncodeToString(key[:]), cfg.ListenPort)
	if err := d.user.IpcSet(conf); err != nil {
		return nil, fmt.Errorf("configure wireguard-go: %w", err)
	}
	if err := d.user.Up(); err != nil {
		return nil, fmt.Errorf("start wireguard-go: %w", err)
	}
	if d.link, err = netlink.LinkByName(cfg.Interface); err != nil {
		return nil, fmt.Errorf("look up tun link: %w", err)
	}
	return d, nil
}

// wgLogger sends wireguard-go's log to log at debug. It is chatty (lines
// per handshake and keepalive), and its errors are mostly a peer not
// answering, which Peers shows better.
func wgLogger(log *slog.Logger) *wgdevice.Logger {
	logf := func(format string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug(fmt.Sprintf(format, args...), "component", "wireguard-go")
		}
	}
	return &wgdevice.Logger{Verbosef: logf, Errorf: logf}
}

func (d *linuxDevice) kind() string {
	if d.user != nil {
		return "userspace"
	}
	return "kernel"
}

func (d *linuxDevice) peers() ([]PeerStatus, error) {
	if d.user != nil {
		text, err := d.user.IpcGet()
		if err != nil {
			return nil, err
		}
		return parseIpcGet(text)
	}
	dev, err := d.wgc.Device(d.name)
	if err != nil {
		return nil, err
	}
	return kernelPeers(dev.Peers), nil
}

func (d *linuxDevice) configure(changes []peerChange) error {
	if d.user != nil {
		return d.user.IpcSet(uapiText(changes))
	}
	return d.wgc.ConfigureDevice(d.name, wgtypes.Config{Peers: kernelPeerConfigs(changes)})
}

// setAddress makes want the link's one address. IPv6 link-local ones are
// the kernel's and stay.
func (d *linuxDevice) setAddress(want netip.Prefix) error {
	addrs, err := netlink.AddrList(d.link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	have := false
	for _, a := range addrs {
		p := prefixOf(a.IPNet)
		switch {
		case p == want:
			have = true
		case p.Addr().IsLinkLocalUnicast():
		default:
			if err := netlink.AddrDel(d.link, &a); err != nil {
				return fmt.Errorf("remove address %s: %w", p, err)
			}
		}
	}
	if have {
		return nil
	}
	return netlink.AddrReplace(d.link, &netlink.Addr{IPNet: ipNet(want)})
}

// setRoutes makes the link's routes (those marked routeProtocol) one per
// prefix in want, scope link, touching only those that differ.
func (d *linuxDevice) setRoutes(want []netip.Prefix) error {
	index := d.link.Attrs().Index
	filter := &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_MAIN}
	have, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	missing := make(map[netip.Prefix]bool, len(want))
	for _, p := range want {
		missing[p] = true
	}
	var errs []error
	for _, r := range have {
		if r.Protocol != routeProtocol || r.Dst == nil {
			continue
		}
		p := prefixOf(r.Dst)
		if missing[p] {
			delete(missing, p)
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("remove route %s: %w", p, err))
		}
	}
	for _, p := range want {
		if !missing[p] {
			continue
		}
		r := &netlink.Route{LinkIndex: index, Dst: ipNet(p), Scope: netlink.SCOPE_LINK, Protocol: routeProtocol}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("add route %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// close removes the link; its addresses and routes go with it. A TUN link
// goes when wireguard-go closes it, a kernel one must be deleted.
func (d *linuxDevice) close() error {
	var errs []error
	if d.wgc != nil {
		errs = append(errs, d.wgc.Close())
	}
	if d.user != nil {
		d.user.Close()
	} else if d.link != nil {
		if err := netlink.LinkDel(d.link); err != nil {
			errs = append(errs, fmt.Errorf("remove link: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (d *linuxDevice) deliver(from netip.Addr, packet []byte) {
	if d.relay != nil {
		d.relay.deliver(from, packet)
	}
}

// kernelPeers turns wgctrl's peers into PeerStatus.
func kernelPeers(peers []wgtypes.Peer) []PeerStatus {
	out := make([]PeerStatus, 0, len(peers))
	for _, p := range peers {
		s := PeerStatus{
			PublicKey:     p.PublicKey.String(),
			Keepalive:     p.PersistentKeepaliveInterval,
			LastHandshake: p.LastHandshakeTime,
			RxBytes:       p.ReceiveBytes,
			TxBytes:       p.TransmitBytes,
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort() // 4-in-6 when the IP is 16 bytes
			s.Endpoint = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
		if s.LastHandshake.Unix() == 0 {
			s.LastHandshake = time.Time{} // the kernel says "never" as the epoch
		}
		for _, n := range p.AllowedIPs {
			s.AllowedIPs = append(s.AllowedIPs, prefixOf(&n))
		}
		out = append(out, s)
	}
	return out
}

// kernelPeerConfigs turns changes into wgctrl's terms, field for field
// what uapiText writes.
func kernelPeerConfigs(changes []peerChange) []wgtypes.PeerConfig {
	out := make([]wgtypes.PeerConfig, 0, len(changes))
	for _, c := range changes {
		pc := wgtypes.PeerConfig{PublicKey: c.key, Remove: c.remove, UpdateOnly: !c.remove && !c.create}
		if c.endpoint.IsValid() {
			pc.Endpoint = net.UDPAddrFromAddrPort(c.endpoint)
		}
		if c.setKeepalive {
			pc.PersistentKeepaliveInterval = &c.keepalive
		}
		if c.setAllowed {
			pc.ReplaceAllowedIPs = true
			for _, p := range c.allowed {
				pc.AllowedIPs = append(pc.AllowedIPs, *ipNet(p))
			}
		}
		out = append(out, pc)
	}
	return out
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func prefixOf(n *net.IPNet) netip.Prefix {
	addr, _ := netip.AddrFromSlice(n.IP)
	ones, bits := n.Mask.Size()
	if addr.Is4In6() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(addr.Unmap(), ones)
}
