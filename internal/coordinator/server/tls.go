package server

import (
	"net"

	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// setupTLS decides how the server speaks TLS from its settings.
func setupTLS(cfg Config) (*tlsca.Serving, error) {
	return tlsca.Setup(tlsca.ServeOptions{Cert: cfg.TLSCert, Key: cfg.TLSKey, Auto: cfg.TLSAuto,
		SANs: cfg.TLSSANs, Listen: cfg.Listen, DataDir: cfg.DataDir})
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
	return TLSInfo{Enabled: true, CAFile: s.tls.CAFile, CAFingerprint: s.tls.Fingerprint, CACreated: s.tls.CACreated}
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
	return s.tls.Fingerprint
}
