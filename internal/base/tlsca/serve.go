package tlsca

import (
	"crypto/tls"
	"net"
	"path/filepath"

	"github.com/nodemgr/nodemgr/internal/base/cleartext"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Serving is how the server speaks TLS: with a certificate it was given,
// or with one from the CA it made for itself, whose fingerprint join
// tokens carry so that agents can pin it.
type Serving struct {
	Config      *tls.Config
	CAFile      string // the self-made CA's certificate; "" with a given certificate
	Fingerprint string // the self-made CA's pin
	CACreated   bool   // the CA was made at this start
}

// ServeOptions are the server's TLS settings (its --tls-* flags).
type ServeOptions struct {
	Cert, Key string   // a given certificate and its key
	Auto      bool     // a self-made CA even on loopback
	SANs      []string // more names for the self-made certificate
	Listen    string   // host:port the server listens on
	DataDir   string   // where the self-made CA is kept
}

// Setup decides between a given certificate, a self-made CA and plain
// HTTP (nil), which is only for loopback: tokens must not cross a network
// in clear text.
func Setup(cfg ServeOptions) (*Serving, error) {
	switch {
	case cfg.Cert != "" || cfg.Key != "":
		return givenTLS(cfg)
	case cfg.Auto || !listensOnLoopback(cfg.Listen):
		return selfMadeTLS(cfg)
	}
	return nil, nil
}

func givenTLS(cfg ServeOptions) (*Serving, error) {
	if cfg.Cert == "" || cfg.Key == "" {
		return nil, errdefs.Field("tls_cert", "--tls-cert and --tls-key go together: pass both, or neither to let the server make its own CA")
	}
	if cfg.Auto || len(cfg.SANs) > 0 {
		return nil, errdefs.Field("tls_auto", "--tls-auto and --tls-san are for the server's own CA; a given --tls-cert carries its own names: drop them or drop --tls-cert")
	}
	pair, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, errdefs.Field("tls_cert", "load %s and %s: %v", cfg.Cert, cfg.Key, err)
	}
	return &Serving{Config: &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// HTTP/1.1 only: the agents' WebSocket upgrades over it.
		NextProtos: []string{"http/1.1"},
	}}, nil
}

func selfMadeTLS(cfg ServeOptions) (*Serving, error) {
	if cfg.DataDir == "" {
		return nil, errdefs.Field("data_dir", "required to keep the server's CA; set --data-dir, or pass --tls-cert and --tls-key")
	}
	ca, created, err := LoadOrCreate(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	config, err := ca.ServerConfig(Hosts(cfg.Listen, cfg.SANs))
	if err != nil {
		return nil, err
	}
	return &Serving{Config: config, CAFile: filepath.Join(cfg.DataDir, CertFile),
		Fingerprint: ca.Fingerprint(), CACreated: created}, nil
}

// listensOnLoopback reports whether listen (host:port) accepts
// connections from this machine only.
func listensOnLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	return err == nil && cleartext.IsLoopback(host)
}

// Listener serves TLS on ln; a nil Serving serves plain HTTP.
func (t *Serving) Listener(ln net.Listener) net.Listener {
	if t == nil {
		return ln
	}
	return tls.NewListener(ln, t.Config)
}

// Describe says how the server speaks TLS, for its log.
func (t *Serving) Describe() string {
	switch {
	case t == nil:
		return "off"
	case t.Fingerprint != "":
		return "self-made CA " + t.Fingerprint
	}
	return "given certificate"
}
