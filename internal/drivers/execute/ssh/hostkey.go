package ssh

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// knownHostsMu serializes appends to known_hosts files in this process.
var knownHostsMu sync.Mutex

// hostKeyCallback checks a host's key against t.KnownHosts, read afresh
// for each connection so that edits take effect, and adds the key of an
// unknown host when t.AcceptNewHostKeys.
func hostKeyCallback(t Target) ssh.HostKeyCallback {
	if t.HostKey != "" {
		return pinnedKeyCallback(t.HostKey)
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		knownHostsMu.Lock()
		defer knownHostsMu.Unlock()
		err := checkKnown(t.KnownHosts, hostname, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			return errdefs.Class(fmt.Errorf("host key of %s (%s) is revoked in known_hosts %s:%d", hostname, ssh.FingerprintSHA256(key), re.Revoked.Filename, re.Revoked.Line), errdefs.ErrPermission)
		case errors.As(err, &ke) && len(ke.Want) > 0:
			w := ke.Want[0]
			return errdefs.Class(fmt.Errorf("host key of %s (%s %s) does not match known_hosts %s:%d (%s %s): the machine was rebuilt, or someone is in the way; if it was rebuilt, remove the old key (ssh-keygen -R %q -f %s) and connect again",
				hostname, key.Type(), ssh.FingerprintSHA256(key), w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key),
				knownhosts.Normalize(hostname), t.KnownHosts), errdefs.ErrPermission)
		case errors.As(err, &ke) || errors.Is(err, fs.ErrNotExist):
			if !t.AcceptNewHostKeys {
				return errdefs.Class(fmt.Errorf("host key of %s (%s %s) is not in known_hosts %s: add it (ssh-keyscan -p %s %s >> %s, after checking the fingerprint) or set accept_new_host_keys to trust a host's first key",
					hostname, key.Type(), ssh.FingerprintSHA256(key), t.KnownHosts, portOf(hostname), hostOf(hostname), t.KnownHosts), errdefs.ErrPermission)
			}
			if err := appendKnown(t.KnownHosts, hostname, key); err != nil {
				return fmt.Errorf("add the host key of %s to known_hosts: %w", hostname, errdefs.FromOS(err))
			}
			return nil
		}
		return fmt.Errorf("check the host key of %s against known_hosts %s: %w", hostname, t.KnownHosts, err)
	}
}

// pinnedKeyCallback accepts the pinned key alone.
func pinnedKeyCallback(line string) ssh.HostKeyCallback {
	pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	return func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		if err != nil {
			return fmt.Errorf("the host key pinned for %s: %w", hostname, err)
		}
		if !bytes.Equal(key.Marshal(), pinned.Marshal()) {
			return errdefs.Class(fmt.Errorf("host key of %s (%s %s) is not the one nodemgr made for this machine (%s %s): someone is in the way, or the address now belongs to another machine",
				hostname, key.Type(), ssh.FingerprintSHA256(key), pinned.Type(), ssh.FingerprintSHA256(pinned)), errdefs.ErrPermission)
		}
		return nil
	}
}

// hostKeyAlgorithms are the algorithms to ask the host for: the pinned
// key's, else those of the keys known_hosts holds for it.
func hostKeyAlgorithms(t Target, addr string) []string {
	if t.HostKey != "" {
		if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t.HostKey)); err == nil {
			return algorithmsFor(k.Type())
		}
	}
	return knownAlgorithms(t.KnownHosts, addr)
}

// checkKnown checks key for hostname against the file. A missing file
// knows no host (fs.ErrNotExist).
func checkKnown(file, hostname string, remote net.Addr, key ssh.PublicKey) error {
	cb, err := knownhosts.New(file)
	if err != nil {
		return err
	}
	return cb(hostname, remote, key)
}

// appendKnown adds a line for hostname's key to the file, making it (and
// its directory) if need be.
func appendKnown(file, hostname string, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	line := []byte(knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key) + "\n")
	// A last line without its newline would swallow ours.
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// knownAlgorithms lists the host key algorithms of the keys known_hosts
// holds for hostname, so that the server is asked for a key that can be
// checked rather than one of another type (which would read as a
// mismatch); nil when it knows none, leaving the default order.
func knownAlgorithms(file, hostname string) []string {
	// A key no file holds makes the callback list the keys it has.
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(bytes.Repeat([]byte{1}, ed25519.PublicKeySize)))
	if err != nil {
		return nil
	}
	err = checkKnown(file, hostname, &net.TCPAddr{IP: net.IPv4zero}, probe)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, w := range ke.Want {
		for _, a := range algorithmsFor(w.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

func algorithmsFor(keyType string) []string {
	if keyType == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{keyType}
}

func hostOf(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return h
}

func portOf(hostport string) string {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "22"
	}
	return p
}
