package ssh

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// ForgetHost closes the kept connections to a destroyed machine and
// removes from known_hosts the keys of its address (host:port, plain or
// hashed), so that the next machine a provider gives that address (a
// recycled IP, a reused forwarded port) is dialed afresh and not refused
// as "does not match known_hosts". Lines that name other hosts too are
// left alone: the user wrote them. A machine whose key was pinned left no
// line.
func (e *SSH) ForgetHost(d provision.Deployment) error {
	t, err := e.Target(d)
	if err != nil {
		return nil // no address: nothing kept for it
	}
	e.pool.forget(t.key())
	if t.HostKey != "" {
		return nil // nothing written for it
	}
	host := knownhosts.Normalize(t.Addr())
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	b, err := os.ReadFile(t.KnownHosts)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("forget the host key of %s: %w", host, errdefs.FromOS(err))
	}
	var kept bytes.Buffer
	removed := false
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if namesOnly(string(line), host) {
			removed = true
			continue
		}
		kept.Write(line)
	}
	if !removed {
		return nil
	}
	tmp := t.KnownHosts + ".nodemgr-tmp"
	if err := os.WriteFile(tmp, kept.Bytes(), 0o600); err != nil {
		return fmt.Errorf("forget the host key of %s: %w", host, errdefs.FromOS(err))
	}
	if err := os.Rename(tmp, t.KnownHosts); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("forget the host key of %s: %w", host, errdefs.FromOS(err))
	}
	return nil
}

// namesOnly says whether a known_hosts line names host and nothing else:
// its host field is host, or OpenSSH's hash of it (|1|salt|hash).
func namesOnly(line, host string) bool {
	fields := strings.Fields(line)
	if len(fields) < 3 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], "@") {
		return false
	}
	pattern := fields[0]
	if salt, sum, ok := hashedHost(pattern); ok {
		mac := hmac.New(sha1.New, salt)
		mac.Write([]byte(host))
		return hmac.Equal(mac.Sum(nil), sum)
	}
	return pattern == host
}

func hashedHost(pattern string) (salt, sum []byte, ok bool) {
	parts := strings.Split(pattern, "|")
	if len(parts) != 4 || parts[0] != "" || parts[1] != "1" {
		return nil, nil, false
	}
	salt, err1 := base64.StdEncoding.DecodeString(parts[2])
	sum, err2 := base64.StdEncoding.DecodeString(parts[3])
	return salt, sum, err1 == nil && err2 == nil
}
