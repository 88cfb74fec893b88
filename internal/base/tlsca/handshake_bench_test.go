package tlsca

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
)

// BenchmarkHandshake is one full TLS handshake with the server's own
// certificate, client and server in this process, as an agent's first
// connection after a server restart costs (no session to resume).
func BenchmarkHandshake(b *testing.B) {
	ca, _, err := LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := ca.ServerConfig([]string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	client := &tls.Config{RootCAs: Pool(ca.Cert), ServerName: "127.0.0.1", ClientSessionCache: nil}
	b.ResetTimer()
	for b.Loop() {
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c := tls.Client(raw, client)
		if err := c.Handshake(); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
