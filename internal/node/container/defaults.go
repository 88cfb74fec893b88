package container

import (
	"math"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// Defaults are the limits a node gives a job that names none (the agent's
// container_defaults). A job is booked in the node's books for its limits
// and the engine enforces the same limits, so a job without limits would
// use what nobody booked: it gets these instead. Zero is "no default": a
// job that leaves that limit out is refused.
type Defaults struct {
	CPUs     float64 `yaml:"cpus" json:"cpus"`
	MemoryMB int64   `yaml:"memory_mb" json:"memory_mb"`
}

// Built-in defaults, for an agent whose config names none: small enough
// that a few jobs fit on a small node, big enough for a web server.
const (
	DefaultCPUs     = 0.5
	DefaultMemoryMB = 256
)

// Check validates d as the agent's config field named field.
func (d Defaults) Check(field string) error {
	switch c := d.CPUs; {
	case math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > 1<<20:
		return errdefs.Field(field+".cpus", "%v is not a number of cores (0 for no default)", c)
	case c > 0 && c < 0.01:
		return errdefs.Field(field+".cpus", "%v is below the engine's minimum of 0.01 cores", c)
	}
	switch m := d.MemoryMB; {
	case m < 0 || m > math.MaxInt64>>20:
		return errdefs.Field(field+".memory_mb", "%d is not a number of MiB (0 for no default)", m)
	case m > 0 && m < workload.MinContainerMemoryMB:
		return errdefs.Field(field+".memory_mb", "%d MiB is below the engine's minimum of %d MiB", m, workload.MinContainerMemoryMB)
	}
	return nil
}

// ApplyDefaults fills in the CPU and memory limits a job leaves out, from
// d, so that what the node books for it is what the engine enforces. A
// limit left out with no default is a field error that says what to set.
func ApplyDefaults(job api.ContainerJob, d Defaults) (api.ContainerJob, error) {
	if job.CPUs == 0 {
		if d.CPUs == 0 {
			return job, errdefs.Field("cpus", "this node books every container's CPUs and has no default: give the job's cpus (e.g. cpus: 0.5), or set container_defaults.cpus in the agent's config")
		}
		job.CPUs = d.CPUs
	}
	if job.MemoryMB == 0 {
		if d.MemoryMB == 0 {
			return job, errdefs.Field("memory_mb", "this node books every container's memory and has no default: give the job's memory_mb (e.g. memory_mb: 128), or set container_defaults.memory_mb in the agent's config")
		}
		job.MemoryMB = d.MemoryMB
	}
	return job, nil
}
