package agent

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// localAPICADir, in the data dir, keeps the CA the TCP local API's
// certificate comes from (ca.crt, and ca.key mode 0600).
const localAPICADir = "local-api-ca"

// localTLS is how the TCP local API speaks TLS beyond loopback: the
// server's way, with a certificate from a CA the agent made on its first
// start, whose fingerprint clients pin (or whose ca.crt they pass). Its
// token must not cross a network in clear text, and the agent has no
// certificate of anyone else's to serve.
type localTLS struct {
	config      *tls.Config
	caFile      string
	fingerprint string
}

// setupLocalTLS returns the TCP local API's TLS, or nil where it needs
// none: no TCP listener, or one on loopback, where the token stays on the
// machine (as the server's plain HTTP on loopback).
func setupLocalTLS(cfg Config) (*localTLS, error) {
	if cfg.LocalAPIListen == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(cfg.LocalAPIListen)
	if err != nil || cleartext.IsLoopback(host) {
		return nil, nil // validate reports a malformed address
	}
	dir := filepath.Join(cfg.DataDir, localAPICADir)
	ca, _, err := tlsca.LoadOrCreate(dir)
	if err != nil {
		return nil, fmt.Errorf("local API: the TCP listener's CA: %w", err)
	}
	config, err := ca.ServerConfig(tlsca.Hosts(cfg.LocalAPIListen, nil))
	if err != nil {
		return nil, fmt.Errorf("local API: the TCP listener's certificate: %w", err)
	}
	return &localTLS{config: config, caFile: filepath.Join(dir, tlsca.CertFile), fingerprint: ca.Fingerprint()}, nil
}

// listener wraps the TCP listener in TLS where it needs it.
func (t *localTLS) listener(ln net.Listener) net.Listener {
	if t == nil {
		return ln
	}
	return tls.NewListener(ln, t.config)
}
