package sshtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to an address and counts them: a second
// address for the server (a jump host that is not the target) and a
// count of the connections a client makes.
type Proxy struct {
	Addr string // 127.0.0.1:PORT

	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

// NewProxy starts a proxy to addr, stopped when t ends.
func NewProxy(t testing.TB, to string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String()}
	t.Cleanup(func() { l.Close(); p.Break() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			u, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return p
}

// Accepted is how many connections the proxy has taken.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Break cuts every connection through the proxy.
func (p *Proxy) Break() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
