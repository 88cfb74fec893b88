package agent

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/tlsca"
)

// serverCAFile, in the data dir, is the server's CA the agent pinned by a
// join token's fingerprint; later starts verify the server against it, so
// the join token need not stay around.
const serverCAFile = "server-ca.crt"

// setupTransport makes the agent's HTTP client for the server. Over
// HTTPS the server is verified against, first that found: server_ca, the
// CA pinned at an earlier start (unless the join token pins another), the
// CA the join token pins, the system's roots. The join token loses its
// pin here: only the secret goes to the server.
func (a *Agent) setupTransport() error {
	secret, pin := auth.SplitPin(a.cfg.JoinToken)
	a.cfg.JoinToken = secret
	if pin != "" {
		var err error
		if pin, err = tlsca.ParseFingerprint("join_token", pin); err != nil {
			return err
		}
	}
	a.http = &http.Client{Timeout: 30 * time.Second}
	if a.cfg.Server == "" { // standalone
		return nil
	}
	u, err := url.Parse(a.server()) // the replicas share a scheme
	if err != nil {
		return errdefs.Field("server", "%v", err)
	}
	if u.Scheme != "https" {
		if pin != "" || a.cfg.ServerCA != "" {
			return errdefs.Field("server", "the server speaks HTTPS (the join token carries its CA's fingerprint, or server_ca is set): use https://%s", u.Host)
		}
		return nil
	}
	host := u.Hostname()
	if len(a.cfg.Servers) > 1 {
		host = "" // each connection checks the name of the replica it dials
	}
	cfg, err := a.serverTLS(host, pin)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// HTTP/1.1: the WebSocket upgrades over it.
	tr.TLSClientConfig, tr.ForceAttemptHTTP2 = cfg, false
	a.http.Transport = tr
	return nil
}

func (a *Agent) serverTLS(host, pin string) (*tls.Config, error) {
	if a.cfg.ServerCA != "" {
		certs, err := tlsca.LoadCerts(a.cfg.ServerCA)
		if err != nil {
			return nil, errdefs.Field("server_ca", "%v", err)
		}
		if pin != "" && !holdsPin(certs, pin) {
			return nil, errdefs.Field("server_ca", "%s is not the CA the join token pins (%s): pass the server's own CA, or leave server_ca out and let the join token pin it", a.cfg.ServerCA, pin)
		}
		return rootsConfig(certs), nil
	}
	stored := filepath.Join(a.cfg.DataDir, serverCAFile)
	certs, err := tlsca.LoadCerts(stored)
	switch {
	case err == nil && (pin == "" || holdsPin(certs, pin)):
		return rootsConfig(certs), nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read the server's pinned CA: %w (remove %s and start the agent with a new join token)", err, stored)
	case pin != "":
		return tlsca.PinnedConfig(pin, host, a.savePinnedCA), nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}, nil // the system's roots
}

func rootsConfig(certs []*x509.Certificate) *tls.Config {
	return &tls.Config{RootCAs: tlsca.Pool(certs...), MinVersion: tls.VersionTLS12}
}

func holdsPin(certs []*x509.Certificate, pin string) bool {
	return slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return tlsca.Fingerprint(c) == pin })
}

// savePinnedCA keeps the CA a handshake verified by the join token's pin.
func (a *Agent) savePinnedCA(ca *x509.Certificate) {
	if !a.caPinned.CompareAndSwap(false, true) {
		return
	}
	path := filepath.Join(a.cfg.DataDir, serverCAFile)
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})); err != nil {
		a.log.Warn("keep the server's CA; the next start needs the join token again", "file", path, "err", err)
		return
	}
	a.log.Info("pinned the server's CA by the join token's fingerprint", "fingerprint", tlsca.Fingerprint(ca), "file", path)
}

// forgetServerCA drops the pinned CA of a server the agent no longer uses.
func forgetServerCA(dataDir string) {
	os.Remove(filepath.Join(dataDir, serverCAFile))
}

// tlsTrouble explains an error that is about verifying the server, for
// the agent's settings; "" when err is not one.
func tlsTrouble(err error) string {
	var pe *tlsca.PinError
	if errors.As(err, &pe) {
		return "" // it says what to do
	}
	return tlsca.Hint(err, "--server-ca (or a join token that pins the server's CA)")
}

// isTLSTrouble reports whether err is about verifying the server: retrying
// does not help.
func isTLSTrouble(err error) bool {
	var pe *tlsca.PinError
	return errors.As(err, &pe) || tlsTrouble(err) != ""
}
