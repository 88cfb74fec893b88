package workload

import (
	"fmt"
	"maps"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// Labels nodemgr puts on every container it makes; a job's own labels
// cannot use these keys.
const (
	LabelJob   = "nodemgr.job"
	LabelName  = "nodemgr.name"
	LabelScope = "nodemgr.scope"
)

// MinContainerMemoryMB is the smallest memory limit the Docker engine accepts.
const MinContainerMemoryMB = 6

// DNSLabel is what IDs and names look like: they go into container names,
// labels and file names, so they are kept to a DNS label.
var DNSLabel = validate.NewPattern(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`, 63)

// CheckContainer checks a container job before anything is done with it. It returns an
// errdefs field error (ErrInvalid) naming the first bad field by its path,
// e.g. "ports[1].host". An empty ID is valid: one is assigned on deploy.
func CheckContainer(job api.ContainerJob) error {
	if job.ID != "" && !DNSLabel.MatchString(job.ID) {
		return errdefs.Field("id", "%q is not a valid job ID: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (or leave it empty to get one)", job.ID)
	}
	switch {
	case job.Name == "":
		return errdefs.Field("name", "a job needs a name")
	case !DNSLabel.MatchString(job.Name):
		return errdefs.Field("name", "%q is not a valid name: use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit", job.Name)
	}
	if err := validateImage(job.Image); err != nil {
		return err
	}
	switch job.Technology {
	case "", api.TechnologyDocker:
	case api.TechnologyUnikernel:
		return errdefs.Field("technology", "unikernel jobs are not supported on nodemgr nodes yet; package the job as a docker image")
	default:
		return errdefs.Field("technology", "%q is not a known technology; use %q", job.Technology, api.TechnologyDocker)
	}
	if err := validateContainerLimits(job); err != nil {
		return err
	}
	if err := validatePorts(job.Ports); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(job.Env)) {
		switch {
		case k == "":
			return errdefs.Field("env", "a variable name is empty")
		case strings.ContainsAny(k, "=\x00"):
			return errdefs.Field("env", "variable name %q must not contain '=' or NUL", k)
		case strings.ContainsRune(job.Env[k], 0):
			return errdefs.Field("env."+k, "the value must not contain NUL")
		}
	}
	if err := validateLifecycle(job); err != nil {
		return err
	}
	if err := validateVolumes(job.Volumes); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(job.Labels)) {
		switch k {
		case "":
			return errdefs.Field("labels", "a label key is empty")
		case LabelJob, LabelName, LabelScope:
			return errdefs.Field("labels."+k, "is set by nodemgr; use another key")
		}
	}
	return nil
}

func validateImage(image string) error {
	if image == "" {
		return errdefs.Field("image", "a job needs an image, e.g. busybox:1.36")
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return errdefs.Field("image", "%q is not an image reference: %v", image, err)
	}
	return nil
}

func validateContainerLimits(job api.ContainerJob) error {
	switch c := job.CPUs; {
	case math.IsNaN(c) || math.IsInf(c, 0) || c < 0:
		return errdefs.Field("cpus", "%v is not a non-negative number of cores", c)
	case c > 0 && c < 0.01:
		return errdefs.Field("cpus", "%v is below the engine's minimum of 0.01 cores; leave it out for the node's default", c)
	case c > 1<<20:
		return errdefs.Field("cpus", "%v cores is out of range", c)
	}
	switch m := job.MemoryMB; {
	case m < 0:
		return errdefs.Field("memory_mb", "%d is negative; leave it out for the node's default", m)
	case m > 0 && m < MinContainerMemoryMB:
		return errdefs.Field("memory_mb", "%d MiB is below the engine's minimum of %d MiB; leave it out for the node's default", m, MinContainerMemoryMB)
	case m > math.MaxInt64>>20:
		return errdefs.Field("memory_mb", "%d MiB is out of range", m)
	}
	return nil
}

func validatePorts(ports []api.ContainerPort) error {
	type key struct {
		port  int
		proto string
	}
	containerSeen := map[key]int{}
	hostSeen := map[key]int{}
	for i, p := range ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.Container < 1 || p.Container > 65535 {
			return errdefs.Field(field+".container", "%d is not a port number (1-65535)", p.Container)
		}
		if p.Host < 0 || p.Host > 65535 {
			return errdefs.Field(field+".host", "%d is not a port number (1-65535, or 0 to take one from the node's allocator)", p.Host)
		}
		proto := PortProtocol(p)
		if proto != "tcp" && proto != "udp" {
			return errdefs.Field(field+".protocol", "%q is not tcp or udp", p.Protocol)
		}
		if j, dup := containerSeen[key{p.Container, proto}]; dup {
			return errdefs.Field(field+".container", "%d/%s is published twice (also ports[%d])", p.Container, proto, j)
		}
		containerSeen[key{p.Container, proto}] = i
		if p.Host == 0 {
			continue
		}
		if j, dup := hostSeen[key{p.Host, proto}]; dup {
			return errdefs.Field(field+".host", "host port %d/%s is asked for twice (also ports[%d])", p.Host, proto, j)
		}
		hostSeen[key{p.Host, proto}] = i
	}
	return nil
}

// maxStopTimeout bounds a job's stop timeout: a delete waits that long.
const maxStopTimeout = time.Hour

// validateLifecycle checks the restart policy, stop timeout and pull
// policy.
func validateLifecycle(job api.ContainerJob) error {
	switch job.Restart.Policy {
	case "", api.ContainerRestartNever, api.ContainerRestartOnFailure, api.ContainerRestartAlways:
	default:
		return errdefs.Field("restart.policy", "%q is not a restart policy: use never, on-failure or always", job.Restart.Policy)
	}
	switch r := job.Restart.MaxRetries; {
	case r < 0 || r > 1000:
		return errdefs.Field("restart.max_retries", "%d is out of range: use 1-1000, or 0 for the default", r)
	case r > 0 && (job.Restart.Policy == "" || job.Restart.Policy == api.ContainerRestartNever):
		return errdefs.Field("restart.max_retries", "the job is never restarted: set restart.policy to on-failure or always, or leave max_retries out")
	}
	if d := time.Duration(job.StopTimeout); d < 0 || d > maxStopTimeout {
		return errdefs.Field("stop_timeout", "%s is out of range: use 1s-1h, or leave it out for the node's default", d)
	} else if d > 0 && d < time.Second {
		return errdefs.Field("stop_timeout", "%s is below the engine's resolution of 1s", d)
	}
	switch job.PullPolicy {
	case "", api.PullNever, api.PullIfNotPresent, api.PullAlways:
	default:
		return errdefs.Field("pull_policy", "%q is not a pull policy: use never (the image must be on the node), if-not-present or always", job.PullPolicy)
	}
	return nil
}

// volumeName is what a named volume's source looks like: the engine's
// rule for volume names.
var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// validateVolumes checks each volume's form; whether an absolute source
// is inside the job's runtime dir is the manager's to check (it knows the
// dir).
func validateVolumes(vols []api.ContainerVolume) error {
	targets := map[string]int{}
	for i, v := range vols {
		field := fmt.Sprintf("volumes[%d]", i)
		switch {
		case v.Source == "":
			return errdefs.Field(field+".source", "a volume needs a source: a volume name, or a path in the job's runtime dir")
		case strings.ContainsRune(v.Source, 0) || strings.Contains(v.Source, ":"):
			return errdefs.Field(field+".source", "%q must not contain ':' or NUL", v.Source)
		case !IsVolumePath(v.Source) && !volumeName.MatchString(v.Source):
			return errdefs.Field(field+".source", "%q is neither a volume name (letters, digits, '_', '.', '-') nor a path", v.Source)
		case IsVolumePath(v.Source) && !filepath.IsAbs(v.Source) && !filepath.IsLocal(v.Source):
			return errdefs.Field(field+".source", "%q leaves the job's runtime dir; use a path inside it", v.Source)
		}
		switch {
		case !strings.HasPrefix(v.Target, "/"):
			return errdefs.Field(field+".target", "%q must be an absolute path in the container", v.Target)
		case strings.ContainsAny(v.Target, ":\x00"):
			return errdefs.Field(field+".target", "%q must not contain ':' or NUL", v.Target)
		case path.Clean(v.Target) == "/":
			return errdefs.Field(field+".target", "cannot mount over the container's root; choose a directory")
		}
		t := path.Clean(v.Target)
		if j, dup := targets[t]; dup {
			return errdefs.Field(field+".target", "%s is mounted twice (also volumes[%d])", t, j)
		}
		targets[t] = i
	}
	return nil
}

// IsVolumePath says whether a volume source is a path (it has a '/' or starts
// with '.') rather than a volume name.
func IsVolumePath(source string) bool {
	return strings.ContainsRune(source, '/') || strings.HasPrefix(source, ".")
}

// PortProtocol is a port's protocol, tcp when it names none.
func PortProtocol(p api.ContainerPort) string {
	if p.Protocol == "" {
		return "tcp"
	}
	return p.Protocol
}
