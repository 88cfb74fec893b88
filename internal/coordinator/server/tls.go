package server

import (
	"crypto/tls"
	"net"
	"path/filepath"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// serverTLS is how the server speaks TLS: with a certificate it was given,
// or with one from the CA it made for itself, whose fingerprint join
// tokens carry so that agents can pin it.
type serverTLS struct {
	config      *tls.Config
	caFile      string // the self-made CA's certificate; "" with a given certificate
	fingerprint string // the self-made CA's pin
	caCreated   bool   // the CA was made at this start
}

// setupTLS decides between a given certificate, a self-made CA and plain
// HTTP (nil), which is only for loopback: tokens must not cross a network
// in clear text.
func setupTLS(cfg Config) (*serverTLS, error) {
	switch {
	case cfg.TLSCert != "" || cfg.TLSKey != "":
		return givenTLS(cfg)
	case cfg.TLSAuto || !isLoopback(cfg.Listen):
		return selfMadeTLS(cfg)
	}
	return nil, nil
}

func givenTLS(cfg Config) (*serverTLS, error) {
	if cfg.TLSCert == "" || cfg.TLSKey == "" {
		return nil, errdefs.Field("tls_cert", "--tls-cert and --tls-key go together: pass both, or neither to let the server make its own CA")
	}
	if cfg.TLSAuto || len(cfg.TLSSANs) > 0 {
		return nil, errdefs.Field("tls_auto", "--tls-auto and --tls-san are for the server's own CA; a given --tls-cert carries its own names: drop them or drop --tls-cert")
	}
	pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, errdefs.Field("tls_cert", "load %s and %s: %v", cfg.TLSCert, cfg.TLSKey, err)
	}
	return &serverTLS{config: &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// HTTP/1.1 only: the agents' WebSocket upgrades over it.
		NextProtos: []string{"http/1.1"},
	}}, nil
}

func selfMadeTLS(cfg Config) (*serverTLS, error) {
	if cfg.DataDir == "" {
		return nil, errdefs.Field("data_dir", "required to keep the server's CA; set --data-dir, or pass --tls-cert and --tls-key")
	}
	ca, created, err := tlsca.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	config, err := ca.ServerConfig(tlsca.Hosts(cfg.Listen, cfg.TLSSANs))
	if err != nil {
		return nil, err
	}
	return &serverTLS{config: config, caFile: filepath.Join(cfg.DataDir, tlsca.CertFile),
		fingerprint: ca.Fingerprint(), caCreated: created}, nil
}

// isLoopback reports whether listen (host:port) accepts connections from
// this machine only.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (t *serverTLS) listener(ln net.Listener) net.Listener {
	if t == nil {
		return ln
	}
	return tls.NewListener(ln, t.config)
}

func (t *serverTLS) describe() string {
	switch {
	case t == nil:
		return "off"
	case t.fingerprint != "":
		return "self-made CA " + t.fingerprint
	}
	return "given certificate"
}

// TLSInfo says how the server speaks TLS.
type TLSInfo struct {
	Enabled bool
	// CAFile and CAFingerprint describe the CA the server made for
	// itself; both are empty when it serves a given certificate.
	CAFile, CAFingerprint string
	// CACreated says the CA was made at this start.
	CACreated bool
}

// TLS says how the server speaks TLS.
func (s *Server) TLS() TLSInfo {
	if s.tls == nil {
		return TLSInfo{}
	}
	return TLSInfo{Enabled: true, CAFile: s.tls.caFile, CAFingerprint: s.tls.fingerprint, CACreated: s.tls.caCreated}
}

// URL is the server's base URL on this machine, http:// or https://, once
// Run has started. A wildcard listen address becomes 127.0.0.1, which the
// server's own certificate names.
func (s *Server) URL() string {
	addr := s.Addr()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	if s.tls == nil {
		return "http://" + addr
	}
	return "https://" + addr
}

// caFingerprint is the pin join tokens carry; "" when there is none.
func (s *Server) caFingerprint() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.fingerprint
}
