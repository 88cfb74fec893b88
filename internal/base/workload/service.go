package workload

import (
	"fmt"
	"maps"
	"math"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// Defaults for the zero values of a ServiceSpec.
const (
	DefaultMinPeriod   = 10 * time.Second
	DefaultMaxRestarts = 5
	DefaultDelay       = time.Second
	MaxDelay           = time.Minute
	DefaultStopGrace   = 10 * time.Second
	DefaultDrainTime   = 30 * time.Second
	DefaultLogMaxMB    = 10
	DefaultLogKeep     = 3
)

// Coordinate names a service: instance.service.user.cell. Each part becomes
// one element of the runtime dir, <cell>/<user>/<service>/<instance>, and
// the whole is the name of the service's record file, so the parts are
// plain lowercase names.
type Coordinate struct {
	Instance, Service, User, Cell string
}

var coordPartRE = validate.NewPattern(`^[a-z0-9][a-z0-9_-]*$`, 63)

const coordForm = "instance.service.user.cell, four names of a-z, 0-9, _ and - (starting with a letter or digit, at most 63 each) separated by dots"

// ParseCoordinate parses "instance.service.user.cell". A malformed one is a
// field error naming "coordinate".
func ParseCoordinate(s string) (Coordinate, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return Coordinate{}, errdefs.Field("coordinate", "%q must look like %s", s, coordForm)
	}
	for i, name := range []string{"instance", "service", "user", "cell"} {
		if !coordPartRE.MatchString(parts[i]) {
			return Coordinate{}, errdefs.Field("coordinate", "%q: %s %q is not a valid name; want %s", s, name, parts[i], coordForm)
		}
	}
	return Coordinate{Instance: parts[0], Service: parts[1], User: parts[2], Cell: parts[3]}, nil
}

// String returns "instance.service.user.cell".
func (c Coordinate) String() string {
	return c.Instance + "." + c.Service + "." + c.User + "." + c.Cell
}

// RuntimeDir returns <prefix>/runtime/<cell>/<user>/<service>/<instance>.
func (c Coordinate) RuntimeDir(prefix string) string {
	return filepath.Join(prefix, "runtime", c.Cell, c.User, c.Service, c.Instance)
}

// drainSignals are the signals a drain may send. SIGKILL and SIGSTOP are
// left out: neither lets a service drain.
var drainSignals = []string{"SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGWINCH"}

// SignalName returns the canonical name of a drain signal written as
// "SIGUSR1", "USR1" or "usr1", or "" if it is not one.
func SignalName(s string) string {
	n := strings.ToUpper(s)
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	if slices.Contains(drainSignals, n) {
		return n
	}
	return ""
}

// CheckService checks a service spec without touching the node. The error is a field
// error naming the first wrong field by its full path, e.g. "files[1].path".
func CheckService(spec api.ServiceSpec) error {
	if _, err := ParseCoordinate(spec.Coordinate); err != nil {
		return err
	}
	if _, err := ParseArtifactID(spec.Artifact); err != nil {
		return errdefs.Field("artifact", "%q must be group:artifact:version of an artifact installed on the node (%v)", spec.Artifact, errdefs.Message(err))
	}
	if err := validateCommand("command", spec.Command); err != nil {
		return err
	}
	for _, k := range sortedKeys(spec.Options) {
		if k == "" || strings.ContainsAny(k, "= \t\n\x00") || strings.HasPrefix(k, "-") {
			return errdefs.Field("options."+k, "option names must be non-empty, not start with '-', and hold no '=', space or NUL")
		}
		if strings.ContainsRune(spec.Options[k], 0) {
			return errdefs.Field("options."+k, "value must not contain NUL")
		}
	}
	for _, k := range sortedKeys(spec.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errdefs.Field("env."+k, "environment variable names must be non-empty and hold no '=' or NUL")
		}
		if strings.ContainsRune(spec.Env[k], 0) {
			return errdefs.Field("env."+k, "value must not contain NUL")
		}
	}
	if spec.Port < -1 || spec.Port > 65535 {
		return errdefs.Field("port", "%d is out of range: use 1-65535 for a specific port, 0 for any free one, -1 for none", spec.Port)
	}
	if spec.ExpectedMemoryMB < 0 {
		return errdefs.Field("expected_memory_mb", "must not be negative")
	}
	if err := validateServiceLimits(spec.Limits); err != nil {
		return err
	}
	if err := validateResources(spec.Resources); err != nil {
		return err
	}
	if err := CheckUser("user", spec.User); err != nil {
		return err
	}
	if err := validateFiles(spec.Files); err != nil {
		return err
	}
	if err := validateRestart(spec.Restart); err != nil {
		return err
	}
	if err := validateDrain(spec.Drain); err != nil {
		return err
	}
	if spec.StopGrace < 0 {
		return errdefs.Field("stop_grace", "must not be negative")
	}
	if spec.Logs.MaxSizeMB < 0 {
		return errdefs.Field("logs.max_size_mb", "must not be negative (0 means %d)", DefaultLogMaxMB)
	}
	if spec.Logs.Keep < 0 {
		return errdefs.Field("logs.keep", "must not be negative (0 means %d)", DefaultLogKeep)
	}
	return nil
}

// validateCommand checks an argv whose relative argv[0] is resolved in the
// artifact's tree: it must name a path inside the tree.
func validateCommand(field string, argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errdefs.Field(field, "required: the program to run, relative to the artifact's tree (\"bin/server\") or absolute")
	}
	if !filepath.IsAbs(argv[0]) && !filepath.IsLocal(argv[0]) {
		return errdefs.Field(field+"[0]", "%q must stay inside the artifact's tree (no \"..\")", argv[0])
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return errdefs.Field(fmt.Sprintf("%s[%d]", field, i), "must not contain NUL")
		}
	}
	return nil
}

func validateFiles(files []api.ServiceFile) error {
	seen := map[string]int{}
	for i, f := range files {
		field := fmt.Sprintf("files[%d]", i)
		if f.Path == "" || !filepath.IsLocal(f.Path) {
			return errdefs.Field(field+".path", "%q must be a relative path inside the runtime dir (no \"..\")", f.Path)
		}
		clean := filepath.Clean(f.Path)
		if j, ok := seen[clean]; ok {
			return errdefs.Field(field+".path", "%q is already files[%d]", f.Path, j)
		}
		seen[clean] = i
		switch {
		case (f.From == "") == (f.URL == ""):
			return errdefs.Field(field, "set exactly one of from (a path in the artifact's tree) and url")
		case f.From != "" && !filepath.IsLocal(f.From):
			return errdefs.Field(field+".from", "%q must be a relative path inside the artifact's tree (no \"..\")", f.From)
		case f.URL != "":
			u, err := url.Parse(f.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return errdefs.Field(field+".url", "%q must be an http:// or https:// URL", f.URL)
			}
		}
		if f.Mode != "" {
			if _, err := ParseMode(f.Mode); err != nil {
				return errdefs.Field(field+".mode", "%v", err)
			}
		}
	}
	return nil
}

// ParseMode parses an octal permission like "0644" or "755".
func ParseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("%q must be octal permissions from 0000 to 0777, e.g. \"0644\"", s)
	}
	return uint32(m), nil
}

// minServiceMemoryMB is the least memory limit: below it a service barely starts.
const minServiceMemoryMB = 4

func validateServiceLimits(l *api.ServiceLimits) error {
	if l == nil {
		return nil
	}
	if l.MemoryMB < 0 || (l.MemoryMB > 0 && l.MemoryMB < minServiceMemoryMB) {
		return errdefs.Field("limits.memory_mb", "%d: use at least %d (MB), or 0 for no limit", l.MemoryMB, minServiceMemoryMB)
	}
	if l.CPUs < 0 || (l.CPUs > 0 && l.CPUs < 0.01) || l.CPUs != l.CPUs {
		return errdefs.Field("limits.cpus", "%v: use at least 0.01 (cores), or 0 for no limit", l.CPUs)
	}
	return nil
}

// validateResources checks what a service books; the books check that it
// fits when it starts.
func validateResources(r *api.Resources) error {
	switch {
	case r == nil:
		return nil
	case !(r.CPUs >= 0) || math.IsInf(r.CPUs, 0):
		return errdefs.Field("resources.cpus", "%v: must be 0 or more cores", r.CPUs)
	case r.MemoryMB < 0:
		return errdefs.Field("resources.memory_mb", "%d: must be 0 or more MB", r.MemoryMB)
	case r.GPUs < 0:
		return errdefs.Field("resources.gpus", "%d: must be 0 or more", r.GPUs)
	case r.DiskMB < 0:
		return errdefs.Field("resources.disk_mb", "%d: must be 0 or more MB", r.DiskMB)
	}
	return nil
}

func validateRestart(r api.RestartPolicy) error {
	switch r.Policy {
	case "", api.RestartAlways, api.RestartOnFailure, api.RestartNever:
	default:
		return errdefs.Field("restart.policy", "%q is not a policy; use %s, %s or %s", r.Policy, api.RestartAlways, api.RestartOnFailure, api.RestartNever)
	}
	if r.MinPeriod < 0 {
		return errdefs.Field("restart.min_period", "must not be negative")
	}
	if r.MaxRestarts < 0 {
		return errdefs.Field("restart.max_restarts", "must not be negative (0 means %d; use policy never for none)", DefaultMaxRestarts)
	}
	if r.Delay < 0 {
		return errdefs.Field("restart.delay", "must not be negative")
	}
	return nil
}

func validateDrain(d api.DrainSpec) error {
	if len(d.Command) > 0 && d.Signal != "" {
		return errdefs.Field("drain", "set command or signal, not both")
	}
	if len(d.Command) > 0 {
		if err := validateCommand("drain.command", d.Command); err != nil {
			return err
		}
	}
	if d.Signal != "" && SignalName(d.Signal) == "" {
		return errdefs.Field("drain.signal", "%q is not a signal a drain can send; use one of %s", d.Signal, strings.Join(drainSignals, ", "))
	}
	if d.Timeout < 0 {
		return errdefs.Field("drain.timeout", "must not be negative")
	}
	return nil
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
