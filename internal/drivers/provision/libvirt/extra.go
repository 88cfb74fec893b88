package libvirt

import (
	"math"
	"path"
	"runtime"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// The Extra keys parseExtra reads, which overrides.libvirt may name, are its
// record's (records.Libvirt.ExtraKeys).

// Boot sources (image_type).
const (
	bootDisk   = "qcow2"  // a volume made on top of a base image
	bootISO    = "iso"    // a CD-ROM image
	bootKernel = "kernel" // direct kernel boot
)

// Network modes (network_mode).
const (
	netNetwork = "network" // a libvirt network, e.g. "default"
	netUser    = "user"    // QEMU user-mode networking, port 22 forwarded from 127.0.0.1
)

// Defaults for a template that does not say.
const (
	defaultCPUs      = 1
	defaultMemoryMiB = 512
)

// config is what Provision takes from a spec's Extra.
type config struct {
	arch       string // libvirt's name: x86_64, aarch64
	machine    string // "": libvirt's default for the arch
	domainType string // "": the provider's setting

	vcpus     int
	memoryMiB uint64
	diskBytes uint64 // 0: no size asked for

	boot      string // bootDisk, bootISO, bootKernel
	baseImage string // volume name in the pool, or an absolute path on the host
	iso       string // likewise
	kernel    string // absolute paths on the host
	initrd    string
	cmdline   string
	pool      string // "": the provider's setting

	netMode string
	network string
	sshPort int // 0: pick one

	userData string // "" and no keys: no NoCloud seed
	hostname string

	consoleLog string
	user       string
}

// hasSeed says whether the machine gets a NoCloud seed ISO.
func (c config) hasSeed() bool { return c.userData != "" }

// parseExtra reads the keys the libvirt provider understands; keys meant
// for other providers, or for nodemgr itself (name, image), are ignored.
func parseExtra(extra map[string]any) (config, error) {
	c := config{vcpus: defaultCPUs, memoryMiB: defaultMemoryMiB}
	var err error
	strs := []struct {
		key string
		dst *string
	}{
		{"arch", &c.arch}, {"machine", &c.machine}, {"domain_type", &c.domainType},
		{"image_type", &c.boot}, {"base_image", &c.baseImage}, {"iso", &c.iso},
		{"kernel", &c.kernel}, {"initrd", &c.initrd}, {"cmdline", &c.cmdline},
		{"pool", &c.pool}, {"network", &c.network}, {"network_mode", &c.netMode},
		{"hostname", &c.hostname}, {"console_log", &c.consoleLog}, {"user", &c.user},
	}
	for _, s := range strs {
		if *s.dst, err = str(extra, s.key); err != nil {
			return c, err
		}
	}

	if c.arch, err = normArch(c.arch); err != nil {
		return c, err
	}
	switch c.domainType {
	case "", "qemu", "kvm":
	default:
		return c, errdefs.Field("extra.domain_type", "%q is not a domain type; use qemu (emulation, TCG) or kvm", c.domainType)
	}

	if n, ok, err := whole(extra, "cpu", 1, 4096); err != nil {
		return c, err
	} else if ok {
		c.vcpus = int(n)
	}
	if n, ok, err := whole(extra, "memoryMB", 16, 1<<30); err != nil {
		return c, err
	} else if ok {
		c.memoryMiB = uint64(n)
	}
	// diskGB is libvirt's own key (seed 000's override), so it wins over
	// the template's diskMB.
	if gb, ok, err := number(extra, "diskGB"); err != nil {
		return c, err
	} else if ok {
		if gb <= 0 || gb > 1<<20 {
			return c, errdefs.Field("extra.diskGB", "%v GB is out of range", gb)
		}
		c.diskBytes = uint64(math.Ceil(gb * (1 << 30)))
	} else if n, ok, err := whole(extra, "diskMB", 0, 1<<30); err != nil {
		return c, err
	} else if ok {
		c.diskBytes = uint64(n) << 20
	}

	if err := c.parseBoot(); err != nil {
		return c, err
	}
	if err := c.parseNetwork(extra); err != nil {
		return c, err
	}
	if c.userData, err = userData(extra, c.user); err != nil {
		return c, err
	}
	if how, _ := extra[provision.ExtraBootstrap].(string); extra[provision.ExtraBootstrap] != nil && how != "pull" && how != "push" {
		return c, errdefs.Field("extra."+provision.ExtraBootstrap, "want pull (cloud-init fetches the agent) or push (over SSH), got %v", extra[provision.ExtraBootstrap])
	}
	if c.consoleLog != "" && !path.IsAbs(c.consoleLog) {
		return c, errdefs.Field("extra.console_log", "%q is not an absolute path on the libvirt host", c.consoleLog)
	}
	if c.hostname != "" && !validHostname(c.hostname) {
		return c, errdefs.Field("extra.hostname", "%q is not a host name", c.hostname)
	}
	return c, nil
}

// parseBoot settles the boot source: image_type when given, else the
// first of kernel, iso, base_image that is set.
func (c *config) parseBoot() error {
	if c.boot == "" {
		switch {
		case c.kernel != "":
			c.boot = bootKernel
		case c.iso != "":
			c.boot = bootISO
		case c.baseImage != "":
			c.boot = bootDisk
		default:
			return errdefs.Field("extra.image_type", "the libvirt provider needs a boot source: base_image (a qcow2 base image, as a volume of the pool or a path on the libvirt host), iso, or kernel (with initrd and cmdline); a mapping usually sets one for the template's image")
		}
	}
	need := map[string]struct {
		key string
		val string
	}{bootDisk: {"base_image", c.baseImage}, bootISO: {"iso", c.iso}, bootKernel: {"kernel", c.kernel}}
	n, ok := need[c.boot]
	if !ok {
		return errdefs.Field("extra.image_type", "%q is not an image type; use %s, %s or %s", c.boot, bootDisk, bootISO, bootKernel)
	}
	if n.val == "" {
		return errdefs.Field("extra."+n.key, "image_type %s needs %s", c.boot, n.key)
	}
	for _, p := range []struct{ key, val string }{{"kernel", c.kernel}, {"initrd", c.initrd}} {
		if p.val != "" && !path.IsAbs(p.val) {
			return errdefs.Field("extra."+p.key, "%q is not an absolute path on the libvirt host", p.val)
		}
	}
	if c.boot != bootKernel && (c.initrd != "" || c.cmdline != "") {
		return errdefs.Field("extra.cmdline", "initrd and cmdline go with image_type kernel, not %s", c.boot)
	}
	for _, v := range []struct{ key, val string }{{"base_image", c.baseImage}, {"iso", c.iso}} {
		if v.val != "" && !path.IsAbs(v.val) && strings.Contains(v.val, "/") {
			return errdefs.Field("extra."+v.key, "%q is neither a volume name nor an absolute path", v.val)
		}
	}
	return nil
}

// parseNetwork settles the network: a libvirt network when network names
// one, else user-mode networking.
func (c *config) parseNetwork(extra map[string]any) error {
	switch c.netMode {
	case "":
		c.netMode = netUser
		if c.network != "" {
			c.netMode = netNetwork
		}
	case netUser:
		if c.network != "" {
			return errdefs.Field("extra.network", "network %q and network_mode user exclude each other", c.network)
		}
	case netNetwork:
		if c.network == "" {
			return errdefs.Field("extra.network", "network_mode network needs a network name, such as default")
		}
	default:
		return errdefs.Field("extra.network_mode", "%q is not a network mode; use %s or %s", c.netMode, netNetwork, netUser)
	}
	if n, ok, err := whole(extra, "ssh_port", 1, 65535); err != nil {
		return err
	} else if ok {
		if c.netMode != netUser {
			return errdefs.Field("extra.ssh_port", "only user-mode networking forwards a port; on network %q the guest's own address is used", c.network)
		}
		c.sshPort = int(n)
	}
	return nil
}

// userData is the NoCloud user-data: user_data as text (a map is written
// as #cloud-config), or a cloud-config made from ssh_authorized_keys for
// the template's user; "" when neither is set.
func userData(extra map[string]any, user string) (string, error) {
	keys, err := stringList(extra, "ssh_authorized_keys")
	if err != nil {
		return "", err
	}
	switch v := extra["user_data"].(type) {
	case nil:
	case string:
		if len(keys) > 0 {
			return "", errdefs.Field("extra.ssh_authorized_keys", "with user_data given, put the keys in it")
		}
		return v, nil
	case map[string]any:
		if len(keys) > 0 {
			return "", errdefs.Field("extra.ssh_authorized_keys", "with user_data given, put the keys in it")
		}
		b, err := yaml.Marshal(v)
		if err != nil {
			return "", errdefs.Field("extra.user_data", "cannot be written as YAML: %v", err)
		}
		return "#cloud-config\n" + string(b), nil
	default:
		return "", errdefs.Field("extra.user_data", "want text or a map (cloud-config), got %s", typeName(v))
	}
	if len(keys) == 0 {
		return "", nil
	}
	b, err := yaml.Marshal(withKeys(map[string]any{}, keys, user))
	if err != nil {
		return "", err
	}
	return "#cloud-config\n" + string(b), nil
}

// withKeys adds to a cloud-config the keys that log in as the template's
// user.
func withKeys(cc map[string]any, keys []string, user string) map[string]any {
	if user != "" && user != "root" {
		cc["users"] = []any{"default", map[string]any{
			"name": user, "sudo": "ALL=(ALL) NOPASSWD:ALL", "shell": "/bin/sh", "ssh_authorized_keys": keys,
		}}
		return cc
	}
	cc["ssh_authorized_keys"] = keys
	return cc
}

// takeUserData makes nodemgr's user data (a pull bootstrap's
// #cloud-config) the machine's, with the template's ssh_authorized_keys
// added; a template's own user_data wins (the orchestrator gives none
// then).
func (c *config) takeUserData(ud string, extra map[string]any) error {
	if ud == "" || extra["user_data"] != nil {
		return nil
	}
	keys, err := stringList(extra, "ssh_authorized_keys")
	if err != nil || len(keys) == 0 {
		c.userData = ud
		return err
	}
	body, ok := strings.CutPrefix(ud, "#cloud-config\n")
	cc := map[string]any{}
	if !ok || yaml.Unmarshal([]byte(body), &cc) != nil {
		return errdefs.Field("user_data", "nodemgr's bootstrap user data is not a #cloud-config to add ssh_authorized_keys to")
	}
	b, err := yaml.Marshal(withKeys(cc, keys, c.user))
	if err != nil {
		return err
	}
	c.userData = "#cloud-config\n" + string(b)
	return nil
}

// normArch returns libvirt's name for an architecture; "" is the server's.
func normArch(a string) (string, error) {
	if a == "" {
		a = runtime.GOARCH
	}
	switch strings.ToLower(strings.TrimSpace(a)) {
	case "x86_64", "amd64", "x86-64", "x64":
		return "x86_64", nil
	case "aarch64", "arm64":
		return "aarch64", nil
	}
	return "", errdefs.Field("extra.arch", "%q is not an architecture the libvirt provider knows; use x86_64 (amd64) or aarch64 (arm64)", a)
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func str(extra map[string]any, key string) (string, error) {
	v, err := provision.ExtraString(extra, key)
	return strings.TrimSpace(v), err
}

// whole reads a whole number within [lo, hi].
func whole(extra map[string]any, key string, lo, hi float64) (float64, bool, error) {
	n, ok, err := number(extra, key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if n != math.Trunc(n) || n < lo || n > hi {
		return 0, false, errdefs.Field("extra."+key, "%v is not a whole number from %v to %v", n, lo, hi)
	}
	return n, true, nil
}

// stringList reads a list of strings ([]string, or []any of strings, as
// YAML and JSON decode them); a single string is a list of one.
func stringList(extra map[string]any, key string) ([]string, error) {
	switch v := extra[key].(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	default:
		return provision.ExtraStrings(key, v)
	}
}

// The shared readers of Extra, under the names this file uses.
var (
	number   = provision.ExtraNumber
	typeName = provision.TypeName
)
