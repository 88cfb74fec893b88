package rsync

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
)

// hostAlias is the name the written ssh_config gives the machine, so
// that rsync's HOST:PATH never has to spell a user, a port or an IPv6
// address.
const hostAlias = "nodemgr-target"

// SSHConfig is the OpenSSH client configuration that reaches t as
// nodemgr-target with the ssh executor's settings, for ssh -F. Its
// directives apply to the jump host too: ProxyJump passes -F on.
func SSHConfig(t ssh.Target) (string, error) {
	var b strings.Builder
	line := func(key string, vals ...string) error {
		b.WriteString("  " + key)
		for _, v := range vals {
			q, err := configValue(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			b.WriteString(" " + q)
		}
		b.WriteString("\n")
		return nil
	}
	b.WriteString("Host " + hostAlias + "\n")
	if err := line("HostName", t.Host); err != nil {
		return "", err
	}
	line("Port", strconv.Itoa(t.Port))
	if err := line("User", t.User); err != nil {
		return "", err
	}
	if t.HostKey != "" {
		// The target's key is pinned; the jump host's, if any, is
		// checked as the settings say (Host * below).
		if t.HostKeyFile == "" {
			return "", fmt.Errorf("host key of %s is pinned and no file holds it for OpenSSH", t.Addr())
		}
		if err := line("UserKnownHostsFile", escapeTokens(t.HostKeyFile)); err != nil {
			return "", err
		}
		line("StrictHostKeyChecking", "yes")
	}
	if j := t.Jump; j != nil {
		if err := line("ProxyJump", j.User+"@"+hostPort(j.Host, j.Port)); err != nil {
			return "", err
		}
	}
	b.WriteString("Host *\n")
	if err := line("UserKnownHostsFile", escapeTokens(t.KnownHosts)); err != nil {
		return "", err
	}
	line("GlobalKnownHostsFile", "/dev/null")
	if t.AcceptNewHostKeys {
		line("StrictHostKeyChecking", "accept-new")
	} else {
		line("StrictHostKeyChecking", "yes")
	}
	for _, f := range t.IdentityFiles {
		if err := line("IdentityFile", escapeTokens(f)); err != nil {
			return "", err
		}
	}
	if len(t.IdentityFiles) > 0 {
		line("IdentitiesOnly", "yes")
	}
	line("BatchMode", "yes")
	line("PasswordAuthentication", "no")
	line("KbdInteractiveAuthentication", "no")
	line("ConnectTimeout", strconv.Itoa(max(1, int(t.ConnectTimeout.Seconds()))))
	line("ServerAliveInterval", "15")
	line("LogLevel", "ERROR")
	return b.String(), nil
}

// configValue quotes a value for ssh_config when it has blanks; one with
// a double quote or a control character cannot be written.
func configValue(v string) (string, error) {
	if v == "" || strings.ContainsAny(v, "\"\n\r\x00") {
		return "", errdefs.Field("settings", "%q cannot be written in an ssh_config", v)
	}
	if strings.ContainsAny(v, " \t#") {
		return `"` + v + `"`, nil
	}
	return v, nil
}

// escapeTokens keeps ssh from expanding % tokens in a path.
func escapeTokens(p string) string { return strings.ReplaceAll(p, "%", "%%") }

func hostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + strconv.Itoa(p)
	}
	return h + ":" + strconv.Itoa(p)
}

// configs writes each distinct ssh_config once, in a directory of its
// own, named by its content.
type configs struct {
	mu  sync.Mutex
	dir string
}

func (c *configs) path(t ssh.Target) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		var err error
		if c.dir, err = os.MkdirTemp("", "nodemgr-rsync-"); err != nil {
			return "", fmt.Errorf("rsync executor: %w", err)
		}
	}
	if t.HostKey != "" {
		key, _, _, _, err := gossh.ParseAuthorizedKey([]byte(t.HostKey))
		if err != nil {
			return "", fmt.Errorf("rsync executor: the pinned host key of %s: %w", t.Addr(), err)
		}
		known := knownhosts.Line([]string{knownhosts.Normalize(t.Addr())}, key) + "\n"
		if t.HostKeyFile, err = c.write("known_hosts", known); err != nil {
			return "", err
		}
	}
	body, err := SSHConfig(t)
	if err != nil {
		return "", err
	}
	return c.write("ssh_config", body)
}

// write writes body once, to a file named by prefix and its content.
func (c *configs) write(prefix, body string) (string, error) {
	sum := sha256.Sum256([]byte(body))
	p := filepath.Join(c.dir, prefix+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("rsync executor: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("rsync executor: %w", err)
	}
	return p, nil
}

func (c *configs) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir != "" {
		os.RemoveAll(c.dir)
		c.dir = ""
	}
}
