package portalloc

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
)

// probeAddrs are where ProbeOS tries to bind. The loopback catches sockets
// bound to 127.0.0.1 only; "::" with network "tcp"/"udp" is a dual-stack
// wildcard, which collides with a socket on any IPv4 or IPv6 address. UDP is
// tried as well as TCP because a workload may use its port for either.
var probeAddrs = []struct{ network, host string }{
	{"tcp", "127.0.0.1"},
	{"tcp", "::"},
	{"udp", "127.0.0.1"},
	{"udp", "::"},
}

// ProbeOS reports whether port is free in the OS: whether this process can
// bind it on TCP and UDP, on 127.0.0.1 and on [::]. It is the default
// Config.Probe. A stack the machine lacks (no IPv6) is not held against the
// port.
func ProbeOS(port int) bool {
	for _, at := range probeAddrs {
		addr := net.JoinHostPort(at.host, strconv.Itoa(port))
		var c io.Closer
		var err error
		if at.network == "tcp" {
			c, err = net.Listen(at.network, addr)
		} else {
			c, err = net.ListenPacket(at.network, addr)
		}
		if err != nil {
			if noStack(err) {
				continue
			}
			return false
		}
		c.Close()
	}
	return true
}

// noStack tells a missing address family from a port in use.
func noStack(err error) bool {
	return errors.Is(err, syscall.EAFNOSUPPORT) ||
		errors.Is(err, syscall.EPROTONOSUPPORT) ||
		errors.Is(err, syscall.EADDRNOTAVAIL)
}
