package libvirt

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// readyPoll is how often waitReady looks again.
const readyPoll = 500 * time.Millisecond

// addressOf is where the guest's SSH server is, host:port: the forwarded
// port on the host for user-mode networking, else the guest's IPv4
// address on its network (from the network's DHCP leases, then from the
// guest agent) and port 22; "" while it has none. mac picks the NIC; ""
// takes the first that has an address.
func addressOf(c client, dom golibvirt.Domain, inst *Instance, mac string) string {
	if inst.SSH != nil {
		return net.JoinHostPort(inst.SSH.Address, strconv.Itoa(inst.SSH.Port))
	}
	for _, src := range []golibvirt.DomainInterfaceAddressesSource{golibvirt.DomainInterfaceAddressesSrcLease, golibvirt.DomainInterfaceAddressesSrcAgent} {
		ifaces, err := c.DomainInterfaceAddresses(dom, uint32(src), 0)
		if err != nil {
			continue
		}
		for _, ifc := range ifaces {
			if mac != "" && (len(ifc.Hwaddr) == 0 || !strings.EqualFold(ifc.Hwaddr[0], mac)) {
				continue
			}
			for _, a := range ifc.Addrs {
				ip := net.ParseIP(a.Addr)
				if a.Type == int32(golibvirt.IPAddrTypeIpv4) && ip != nil && !ip.IsLoopback() {
					return net.JoinHostPort(a.Addr, "22")
				}
			}
		}
	}
	return ""
}

// waitReady waits, up to the ready timeout, until the guest has an
// address and an SSH server answers there with its banner. A TCP connect
// alone proves nothing: QEMU's user-mode networking accepts on the
// forwarded port before the guest listens.
func (p *Libvirt) waitReady(ctx context.Context, c client, dom golibvirt.Domain, inst *Instance, mac, consoleLog string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.readyTimeout)
	defer cancel()
	var addr string
	var last error
	for {
		if addr == "" {
			addr = addressOf(c, dom, inst, mac)
		}
		if addr != "" {
			if last = sshBanner(ctx, addr); last == nil {
				return addr, nil
			}
		}
		if st, err := stateOf(c, dom); err == nil && st != provision.StateRunning && st != provision.StatePending {
			return "", fmt.Errorf("the machine is %s, not running, while it boots%s: %w", st, consoleHint(consoleLog), errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				why := "it got no address"
				if inst.Network != "" {
					why += noDHCPHint(c, inst.Network)
				}
				if addr != "" {
					why = fmt.Sprintf("no SSH server answered at %s (%v)", addr, last)
				}
				return "", fmt.Errorf("not ready within %s (the ready_timeout setting): %s%s: %w", p.readyTimeout, why, consoleHint(consoleLog), errdefs.ErrUnavailable)
			}
			return "", ctx.Err()
		case <-time.After(readyPoll):
		}
	}
}

func consoleHint(path string) string {
	if path == "" {
		return "; set extra.console_log to see its console"
	}
	return "; see its console in " + path
}

// noDHCPHint says why a network may give no lease: it has no DHCP range.
func noDHCPHint(c client, name string) string {
	n, err := c.NetworkLookupByName(name)
	if err != nil {
		return ""
	}
	doc, err := c.NetworkGetXMLDesc(n, 0)
	if err != nil {
		return ""
	}
	var nx NetworkXML
	if unmarshalXML(doc, &nx) != nil {
		return ""
	}
	for _, ip := range nx.IPs {
		if ip.DHCP != nil && len(ip.DHCP.Ranges) > 0 {
			return ""
		}
	}
	return fmt.Sprintf(" (network %s hands out no DHCP leases, so only a guest agent can tell its address)", name)
}

// sshBanner connects to addr and reads the server's identification line
// (RFC 4253 4.2: "SSH-2.0-…", possibly after other lines).
func sshBanner(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	r := bufio.NewReaderSize(conn, 256)
	for range 10 {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "SSH-2.0-") || strings.HasPrefix(line, "SSH-1.99-") {
			return nil
		}
		if err != nil {
			if line == "" {
				return fmt.Errorf("no SSH banner: %w", err)
			}
			return fmt.Errorf("no SSH banner, got %q: %w", line, err)
		}
	}
	return fmt.Errorf("no SSH banner in the first lines")
}
