// Package tlscatest starts, for tests, HTTPS servers whose certificates
// come from a CA of nodemgr's own (tlsca), as a server with --tls-auto
// has.
package tlscatest

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// Server serves h over HTTPS on 127.0.0.1, with a certificate from a
// fresh CA, until the test ends; it returns the server's URL and the CA.
func Server(t testing.TB, h http.Handler) (string, *tlsca.CA) {
	t.Helper()
	ca, _, err := tlsca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ca.ServerConfig([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, cfg))
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String(), ca
}
