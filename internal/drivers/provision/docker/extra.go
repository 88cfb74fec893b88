package docker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// keepAlive is the default command: it keeps a container with no real
// work of its own running, using nothing but a POSIX sh and sleep (so
// busybox will do), and exits at once on SIGTERM, where a bare
// "sleep infinity" as PID 1 would ignore it and make every stop wait out
// the engine's grace period.
var keepAlive = []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"}

// Pull policies for the "pull" Extra key.
const (
	pullNever   = "never"
	pullMissing = "missing"
)

// The Extra keys parseExtra reads, which overrides.docker may name, are its
// record's (records.Docker.ExtraKeys).

// config is what Provision takes from a spec's Extra.
type config struct {
	image       string
	user        string
	nanoCPUs    int64
	memory      int64 // bytes
	env         []string
	cmd         []string
	entrypoint  []string
	hostname    string
	labels      map[string]string
	networkMode string
	pull        string
}

// parseExtra reads the keys the docker provider understands; keys meant
// for other providers, or for nodemgr itself, are ignored.
func parseExtra(extra map[string]any) (config, error) {
	c := config{pull: pullNever}
	var err error
	if c.image, err = str(extra, "image"); err != nil {
		return c, err
	}
	if c.image == "" {
		return c, errdefs.Field("extra.image", "the docker provider needs an image")
	}
	if c.user, err = str(extra, "user"); err != nil {
		return c, err
	}
	if c.hostname, err = str(extra, "hostname"); err != nil {
		return c, err
	}
	if c.networkMode, err = str(extra, "network_mode"); err != nil {
		return c, err
	}

	if cpu, ok, err := number(extra, "cpu"); err != nil {
		return c, err
	} else if ok {
		if cpu < 0 || cpu > math.MaxInt64/1e9 {
			return c, errdefs.Field("extra.cpu", "%v CPUs is out of range", cpu)
		}
		c.nanoCPUs = int64(math.Round(cpu * 1e9))
	}
	if mb, ok, err := number(extra, "memoryMB"); err != nil {
		return c, err
	} else if ok {
		if mb < 0 || mb != math.Trunc(mb) || mb > math.MaxInt64>>20 {
			return c, errdefs.Field("extra.memoryMB", "%v is not a whole, non-negative number of MiB", mb)
		}
		c.memory = int64(mb) << 20
	}

	if c.env, err = env(extra, "env"); err != nil {
		return c, err
	}
	if c.cmd, err = command(extra, "command", true); err != nil {
		return c, err
	}
	if c.entrypoint, err = command(extra, "entrypoint", false); err != nil {
		return c, err
	}
	if c.cmd == nil && c.entrypoint == nil {
		// Replace the entrypoint too: an image's own entrypoint may
		// exit at once (ubuntu's bash without a terminal does).
		c.entrypoint = keepAlive
	}
	if c.labels, err = stringMap(extra, "labels"); err != nil {
		return c, err
	}

	if v, ok := extra["privileged"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return c, errdefs.Field("extra.privileged", "want a boolean, got %s", typeName(v))
		}
		if b {
			return c, errdefs.Field("extra.privileged", "privileged containers are not offered: they own the host")
		}
	}

	switch v := extra["pull"].(type) {
	case nil:
	case bool:
		if v {
			c.pull = pullMissing
		}
	case string:
		if v != pullNever && v != pullMissing {
			return c, errdefs.Field("extra.pull", "%q is not a pull policy; use %q or %q", v, pullNever, pullMissing)
		}
		c.pull = v
	default:
		return c, errdefs.Field("extra.pull", "want %q, %q or a boolean, got %s", pullNever, pullMissing, typeName(v))
	}
	return c, nil
}

// command reads an argv: a list is used as is; a string is a shell
// command line for "command" (Docker's shell form) and a single program
// for "entrypoint".
func command(extra map[string]any, key string, shellForm bool) ([]string, error) {
	v, ok := extra[key]
	if !ok || v == nil {
		return nil, nil
	}
	if s, ok := v.(string); ok {
		if strings.TrimSpace(s) == "" {
			return nil, errdefs.Field("extra."+key, "is empty")
		}
		if shellForm {
			return []string{"/bin/sh", "-c", s}, nil
		}
		return []string{s}, nil
	}
	argv, err := stringList(key, v)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errdefs.Field("extra."+key, "is empty")
	}
	return argv, nil
}

// env reads KEY=VALUE pairs from a list, or from a map (sorted by key).
func env(extra map[string]any, key string) ([]string, error) {
	v, ok := extra[key]
	if !ok || v == nil {
		return nil, nil
	}
	var out []string
	switch v.(type) {
	case map[string]string, map[string]any:
		m, err := stringMap(extra, key)
		if err != nil {
			return nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, k+"="+m[k])
		}
	case []string, []any:
		l, err := stringList(key, v)
		if err != nil {
			return nil, err
		}
		out = l
	default:
		return nil, errdefs.Field("extra."+key, "want a list of KEY=VALUE strings or a map, got %s", typeName(v))
	}
	for i, kv := range out {
		if k, _, _ := strings.Cut(kv, "="); k == "" {
			return nil, errdefs.Field(fmt.Sprintf("extra.%s[%d]", key, i), "%q has no variable name", kv)
		}
	}
	return out, nil
}

// The shared readers of Extra, under the names this file uses.
var (
	str        = provision.ExtraString
	number     = provision.ExtraNumber
	stringList = provision.ExtraStrings
	stringMap  = provision.ExtraStringMap
	typeName   = provision.TypeName
)
