package ssh

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// The executor's settings (see New).
const (
	SettingUser              = "user"
	SettingPort              = "port"
	SettingIdentityFile      = "identity_file"
	SettingKnownHosts        = "known_hosts"
	SettingAcceptNewHostKeys = "accept_new_host_keys"
	SettingJumpHost          = "jump_host"
	SettingConnectTimeout    = "connect_timeout"
)

// The deployment Extra keys the executor reads; each wins over the
// setting of the same name.
const (
	ExtraUser         = "ssh_user"
	ExtraPort         = "ssh_port"
	ExtraIdentityFile = "ssh_identity_file"
	ExtraJumpHost     = "ssh_jump_host"
)

var settingNames = []string{SettingUser, SettingPort, SettingIdentityFile, SettingKnownHosts,
	SettingAcceptNewHostKeys, SettingJumpHost, SettingConnectTimeout}

// config is the executor's settings, parsed.
type config struct {
	user           string
	port           int
	identities     []string // explicit: every one must load
	knownHosts     string
	acceptNew      bool
	jump           string
	connectTimeout time.Duration
}

func parseSettings(settings map[string]string) (config, error) {
	for k := range settings {
		if !slices.Contains(settingNames, k) {
			return config{}, errdefs.Field("settings."+k, "unknown ssh executor setting; known: %s", strings.Join(settingNames, ", "))
		}
	}
	c := config{user: settings[SettingUser], port: 22, knownHosts: settings[SettingKnownHosts], jump: settings[SettingJumpHost],
		connectTimeout: 15 * time.Second}
	if c.user == "" {
		u, err := user.Current()
		if err != nil {
			return config{}, fmt.Errorf("ssh executor: no user setting, and the current user is unknown: %w", err)
		}
		c.user = u.Username
	}
	if p := settings[SettingPort]; p != "" {
		n, err := parsePort(p)
		if err != nil {
			return config{}, errdefs.Field("settings."+SettingPort, "%v", err)
		}
		c.port = n
	}
	c.identities = splitList(settings[SettingIdentityFile])
	if c.knownHosts == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return config{}, errdefs.Field("settings."+SettingKnownHosts, "not set, and there is no home directory for ~/.ssh/known_hosts: %v", err)
		}
		c.knownHosts = filepath.Join(home, ".ssh", "known_hosts")
	}
	if v := settings[SettingAcceptNewHostKeys]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return config{}, errdefs.Field("settings."+SettingAcceptNewHostKeys, "%q is not true or false", v)
		}
		c.acceptNew = b
	}
	if c.jump != "" {
		if _, _, _, err := splitUserHostPort(c.jump, ""); err != nil {
			return config{}, errdefs.Field("settings."+SettingJumpHost, "%v", err)
		}
	}
	if v := settings[SettingConnectTimeout]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return config{}, errdefs.Field("settings."+SettingConnectTimeout, "%q is not a positive Go duration (15s)", v)
		}
		c.connectTimeout = d
	}
	return c, nil
}

// Target is where and how the executor connects for one deployment: its
// settings and the deployment's Extra, resolved.
type Target struct {
	User string
	Host string // a name or an IP address, without brackets
	Port int
	// IdentityFiles are private keys to offer, in order; keys of the
	// agent at $SSH_AUTH_SOCK are offered after them.
	IdentityFiles []string
	// KnownHosts is the known_hosts file host keys are checked against;
	// with AcceptNewHostKeys, the key of a host it does not name is
	// added to it (trust on first use). A changed key is always refused.
	KnownHosts        string
	AcceptNewHostKeys bool
	// HostKey, when set, is the one key the host may show (an
	// authorized_keys line): the orchestrator made it and gave it to the
	// machine before it booted (provision.ExtraSSHHostKey), so neither
	// known_hosts nor trust on first use is needed.
	HostKey string
	// Jump is the host connected through, or nil.
	Jump           *Target
	ConnectTimeout time.Duration
}

// Addr is host:port.
func (t Target) Addr() string { return net.JoinHostPort(t.Host, strconv.Itoa(t.Port)) }

// String is user@host:port, with the jump host after "via".
func (t Target) String() string {
	s := t.User + "@" + t.Addr()
	if t.Jump != nil {
		s += " via " + t.Jump.String()
	}
	return s
}

// key names the connection that serves t.
func (t Target) key() string {
	return t.String() + "|" + strings.Join(t.IdentityFiles, ",")
}

// Target resolves where d is reached. Address gives the host (and maybe
// the port); Extra's ssh_user, ssh_port, ssh_identity_file and
// ssh_jump_host win over the executor's settings of the same name, and
// a port in Address over the port setting. known_hosts and
// accept_new_host_keys are the executor's alone: a template cannot relax
// host key checking.
func (e *SSH) Target(d provision.Deployment) (Target, error) {
	c := e.cfg
	if d.Address == "" {
		return Target{}, errdefs.Field("address", "deployment %s has no address to connect to", d.Name)
	}
	t := Target{User: c.user, Port: c.port, IdentityFiles: c.identities, KnownHosts: c.knownHosts,
		AcceptNewHostKeys: c.acceptNew, ConnectTimeout: c.connectTimeout}
	host, port, err := splitHostPort(d.Address)
	if err != nil {
		return Target{}, errdefs.Field("address", "deployment %s: %v", d.Name, err)
	}
	t.Host = host
	if port != 0 {
		t.Port = port
	}
	if v, ok, err := extraString(d, ExtraUser); err != nil {
		return Target{}, err
	} else if ok {
		t.User = v
	}
	if v, ok, err := extraString(d, ExtraPort); err != nil {
		return Target{}, err
	} else if ok {
		n, err := parsePort(v)
		if err != nil {
			return Target{}, errdefs.Field("extra."+ExtraPort, "deployment %s: %v", d.Name, err)
		}
		t.Port = n
	}
	if v, ok, err := extraString(d, provision.ExtraSSHHostKey); err != nil {
		return Target{}, err
	} else if ok {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(v)); err != nil {
			return Target{}, errdefs.Field("extra."+provision.ExtraSSHHostKey, "deployment %s: not an SSH public key: %v", d.Name, err)
		}
		t.HostKey = v
	}
	if v, ok, err := extraString(d, ExtraIdentityFile); err != nil {
		return Target{}, err
	} else if ok {
		t.IdentityFiles = splitList(v)
	}
	jump := c.jump
	if v, ok, err := extraString(d, ExtraJumpHost); err != nil {
		return Target{}, err
	} else if ok {
		jump = v
	}
	if jump != "" {
		u, h, p, err := splitUserHostPort(jump, t.User)
		if err != nil {
			return Target{}, errdefs.Field("jump_host", "deployment %s: %v", d.Name, err)
		}
		if p == 0 {
			p = 22
		}
		j := t
		j.User, j.Host, j.Port, j.Jump = u, h, p, nil
		t.Jump = &j
	}
	return t, nil
}

// extraString reads a string (or number, for a port) from d's Extra.
func extraString(d provision.Deployment, key string) (string, bool, error) {
	v, ok := d.Extra[key]
	if !ok || v == nil {
		return "", false, nil
	}
	switch v := v.(type) {
	case string:
		return v, v != "", nil
	case int:
		return strconv.Itoa(v), true, nil
	case int64:
		return strconv.FormatInt(v, 10), true, nil
	case float64:
		if v == float64(int64(v)) {
			return strconv.FormatInt(int64(v), 10), true, nil
		}
	}
	return "", false, errdefs.Field("extra."+key, "deployment %s: %v (%T) is not a string", d.Name, v, v)
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return n, nil
}

// splitHostPort splits host, [v6]:port, v6 or host:port; port 0 when
// there is none.
func splitHostPort(s string) (string, int, error) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := parsePort(p)
		if err != nil {
			return "", 0, err
		}
		if h == "" {
			return "", 0, fmt.Errorf("%q has no host", s)
		}
		return h, n, nil
	}
	h := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if h == "" || strings.ContainsAny(h, "[]/ \t\n") {
		return "", 0, fmt.Errorf("%q is not a host or host:port", s)
	}
	return h, 0, nil
}

// splitUserHostPort splits [user@]host[:port]; user defaults to def.
func splitUserHostPort(s, def string) (string, string, int, error) {
	u := def
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		u, s = s[:i], s[i+1:]
		if u == "" {
			return "", "", 0, fmt.Errorf("%q has an empty user", s)
		}
	}
	h, p, err := splitHostPort(s)
	return u, h, p, err
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
