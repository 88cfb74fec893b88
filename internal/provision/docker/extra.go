package docker

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/errdefs"
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

// extraKeys are the Extra keys parseExtra reads (beyond the template
// fields): overrides.docker may name only these.
var extraKeys = []string{"hostname", "network_mode", "env", "command", "entrypoint", "labels", "privileged", "pull"}

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

func str(extra map[string]any, key string) (string, error) {
	switch v := extra[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", errdefs.Field("extra."+key, "want a string, got %s", typeName(v))
	}
}

// number reads a number however it arrived: as a Go number from YAML, a
// float64 or json.Number from JSON, or a numeric string.
func number(extra map[string]any, key string) (float64, bool, error) {
	v, ok := extra[key]
	if !ok || v == nil {
		return 0, false, nil
	}
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int8, int16, int32, int64:
		f = float64(reflect.ValueOf(n).Int())
	case uint, uint8, uint16, uint32, uint64:
		f = float64(reflect.ValueOf(n).Uint())
	case float32:
		f = float64(n)
	case float64:
		f = n
	case json.Number:
		var err error
		if f, err = n.Float64(); err != nil {
			return 0, false, errdefs.Field("extra."+key, "%q is not a number", n)
		}
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(n), 64); err != nil {
			return 0, false, errdefs.Field("extra."+key, "%q is not a number", n)
		}
	default:
		return 0, false, errdefs.Field("extra."+key, "want a number, got %s", typeName(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false, errdefs.Field("extra."+key, "%v is not a number", f)
	}
	return f, true, nil
}

// stringList reads a list of strings: []string, or []any holding strings
// (as YAML and JSON decode them).
func stringList(key string, v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return slices.Clone(l), nil
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, errdefs.Field(fmt.Sprintf("extra.%s[%d]", key, i), "want a string, got %s", typeName(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, errdefs.Field("extra."+key, "want a list of strings, got %s", typeName(v))
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

// stringMap reads a map of strings; scalar values are formatted.
func stringMap(extra map[string]any, key string) (map[string]string, error) {
	switch m := extra[key].(type) {
	case nil:
		return nil, nil
	case map[string]string:
		return maps.Clone(m), nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, v := range m {
			switch s := v.(type) {
			case string:
				out[k] = s
			case bool, int, int64, float64, json.Number:
				out[k] = fmt.Sprint(s)
			default:
				return nil, errdefs.Field("extra."+key+"."+k, "want a string, got %s", typeName(v))
			}
		}
		return out, nil
	default:
		return nil, errdefs.Field("extra."+key, "want a map of strings, got %s", typeName(m))
	}
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, json.Number:
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any, map[string]string:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
