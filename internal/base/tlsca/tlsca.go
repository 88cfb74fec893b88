// Package tlsca is nodemgr's small certificate authority. A server with no
// certificate of its own makes a CA on first start (ECDSA P-256, kept in
// its data dir), issues its serving certificate from it, and puts the CA's
// fingerprint into every join token it hands out. An agent pins the CA by
// that fingerprint on first contact (kubeadm's discovery-token-ca-cert-hash
// is the model), keeps the CA's certificate, and from then on verifies the
// server against it like against any root: chain and host name.
//
// The fingerprint is the SHA-256 of the CA certificate's
// SubjectPublicKeyInfo, written "sha256:<64 hex digits>".
package tlsca

import (
	"cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/atomicfile"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Files of the CA in a server's data dir.
const (
	CertFile = "ca.crt" // public: clients pass it with --ca-cert
	KeyFile  = "ca.key" // mode 0600
)

// Lifetimes. The CA lives long because agents pin it and every join token
// carries it; the serving certificate is reissued in memory, so it may be
// short.
const (
	caLifetime   = 20 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	// leafRenewBefore is how long before its expiry a serving certificate
	// is replaced by a fresh one, at the next handshake.
	leafRenewBefore = 30 * 24 * time.Hour
)

// CA is a certificate authority whose key nodemgr holds.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// Fingerprint is the CA's pin, "sha256:<hex>".
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// LoadOrCreate loads the CA kept in dir, or makes one there when dir has
// none. It says whether it made one now.
func LoadOrCreate(dir string) (ca *CA, created bool, err error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("load CA from %s: %w", dir, err)
		}
		return ca, false, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		ca, err := create(dir)
		if err != nil {
			return nil, false, fmt.Errorf("create CA in %s: %w", dir, err)
		}
		return ca, true, nil
	case certErr == nil && errors.Is(keyErr, fs.ErrNotExist), keyErr == nil && errors.Is(certErr, fs.ErrNotExist):
		return nil, false, fmt.Errorf("load CA from %s: one of %s and %s is missing: restore it from a backup, or remove the other to make a new CA (agents that pinned the old one then need new join tokens)", dir, CertFile, KeyFile)
	}
	return nil, false, fmt.Errorf("load CA from %s: %w", dir, errors.Join(certErr, keyErr))
}

func create(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "nodemgr CA " + host, Organization: []string{"nodemgr"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clocks a little behind
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The key first: a crash in between leaves a key without a
	// certificate, which LoadOrCreate reports rather than overwrites.
	if err := atomicfile.Write(filepath.Join(dir, KeyFile), keyPEM); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, CertFile), certPEM); err != nil {
		return nil, err
	}
	// The certificate is public: users copy it to their clients.
	if err := os.Chmod(filepath.Join(dir, CertFile), 0o644); err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA's")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: signer}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Issue makes a serving certificate for hosts (names and IP addresses),
// signed by ca; its chain carries the CA's certificate, so that an agent
// can pin the CA from the handshake alone.
func (ca *CA) Issue(hosts []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "nodemgr server", Organization: []string{"nodemgr"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter // a CA cannot vouch beyond its own life
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// ServerConfig is a TLS server config that serves a certificate for hosts
// issued by ca, and issues a fresh one when it nears its expiry.
func (ca *CA) ServerConfig(hosts []string) (*tls.Config, error) {
	first, err := ca.Issue(hosts)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	current := &first
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Until(current.Leaf.NotAfter) > leafRenewBefore {
			return current, nil
		}
		next, err := ca.Issue(hosts)
		if err != nil {
			return current, nil // the old one is still valid for a while
		}
		current = &next
		return current, nil
	}
	return &tls.Config{GetCertificate: get, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

// Hosts are the names a server listening on listen is reached by: the
// listen host unless it is a wildcard, the machine's hostname, the
// addresses of its interfaces, localhost, and extra (names behind NAT).
func Hosts(listen string, extra []string) []string {
	var hosts []string
	seen := map[string]bool{}
	add := func(h string) {
		h = strings.TrimSpace(h)
		if h != "" && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	if h, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			add(h)
		}
	}
	if h, err := os.Hostname(); err == nil {
		add(h)
	}
	add("localhost")
	add("127.0.0.1")
	add("::1")
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			// Link-local addresses need a zone to be dialled: no one
			// reaches a server by them.
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
				add(n.IP.String())
			}
		}
	}
	for _, h := range extra {
		add(h)
	}
	return hosts
}

// Fingerprint is the pin of a CA certificate: "sha256:" and the hex
// SHA-256 of its SubjectPublicKeyInfo, as kubeadm's
// discovery-token-ca-cert-hash.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseFingerprint checks s is "sha256:<64 hex digits>" and returns it in
// lower case; field names the input for the error.
func ParseFingerprint(field, s string) (string, error) {
	hexPart, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(s)), "sha256:")
	if b, err := hex.DecodeString(hexPart); !ok || err != nil || len(b) != sha256.Size {
		return "", errdefs.Field(field, "must be sha256: and 64 hex digits (the fingerprint `nodemgr server` prints), got %q", s)
	}
	return "sha256:" + hexPart, nil
}

// LoadCerts reads the PEM certificates in path.
func LoadCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return certs, nil
}

// Pool is a certificate pool of certs.
func Pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// PinError says the server's CA is not the one a join token names.
type PinError struct {
	Want string   // the pinned fingerprint
	Got  []string // fingerprints of the certificates the server sent
}

func (e *PinError) Error() string {
	return fmt.Sprintf("the server's certificate chain does not hold the CA the join token pins (want %s, the server sent %s): "+
		"the token was made by another server, or something between is intercepting the connection; check --server and create a new join token there",
		e.Want, strings.Join(e.Got, ", "))
}

// PinnedConfig is a TLS client config that trusts exactly the CA with
// fingerprint pin, found in the chain the server sends, and verifies the
// server's certificate against it (chain, validity, host name serverName,
// or when empty the name each connection dialled) as it would against any
// root. onPinned, when not nil, gets the CA once
// a handshake verified.
func PinnedConfig(pin, serverName string, onPinned func(*x509.Certificate)) *tls.Config {
	return &tls.Config{
		ServerName: serverName,
		MinVersion: tls.VersionTLS12,
		// The chain is verified below, against the pinned CA instead of
		// the system's roots.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			// Without a name, the one this connection dialled (the
			// transport fills it in from the URL's host).
			ca, err := VerifyPinned(cs.PeerCertificates, pin, cmp.Or(serverName, cs.ServerName))
			if err != nil {
				return err
			}
			if onPinned != nil {
				onPinned(ca)
			}
			return nil
		},
	}
}

// VerifyPinned finds the CA with fingerprint pin in chain (as a server
// sends it: its certificate first) and verifies chain[0] for serverName
// against that CA alone. It returns the CA.
func VerifyPinned(chain []*x509.Certificate, pin, serverName string) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("the server sent no certificate")
	}
	var ca *x509.Certificate
	var got []string
	for _, c := range chain {
		fp := Fingerprint(c)
		got = append(got, fp)
		if fp == pin {
			ca = c
		}
	}
	if ca == nil {
		return nil, &PinError{Want: pin, Got: got}
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: Pool(ca), Intermediates: inter, DNSName: serverName})
	if err != nil {
		return nil, fmt.Errorf("verify the server's certificate against the pinned CA %s: %w (if the server was reached by a name or address its certificate lacks, add it with `nodemgr server --tls-san`)", pin, err)
	}
	return ca, nil
}

// Hint says what to do about a failed TLS connection to the server, or ""
// when err is not about TLS. caSetting names where this side takes a CA
// (a flag or a variable).
func Hint(err error, caSetting string) string {
	var (
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is signed by a CA this side does not trust: pass the server's CA with " + caSetting +
			"; a server that made its own CA keeps it in DATA_DIR/" + CertFile
	case errors.As(err, &host):
		return "the server's certificate is not for this address: connect by a name or address it carries, or add this one with `nodemgr server --tls-san` and restart the server"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid now: check both machines' clocks and the certificate's dates"
	case errors.As(err, &record):
		return "the server does not speak TLS: use an http:// address"
	}
	return ""
}
