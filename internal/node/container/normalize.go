package container

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// normalize fills in a valid job's defaults, so that the record says what
// was run: an ID, the technology and each port's protocol. It copies what
// it changes.
func normalize(job api.ContainerJob) api.ContainerJob {
	if job.ID == "" {
		job.ID = NewJobID()
	}
	if job.Technology == "" {
		job.Technology = api.TechnologyDocker
	}
	job.Ports = slices.Clone(job.Ports)
	for i := range job.Ports {
		job.Ports[i].Protocol = workload.PortProtocol(job.Ports[i])
	}
	if job.Restart.Policy == "" {
		job.Restart.Policy = api.ContainerRestartNever
	}
	if job.PullPolicy == "" {
		job.PullPolicy = api.PullNever
	}
	job.Volumes = slices.Clone(job.Volumes)
	job.Command = slices.Clone(job.Command)
	job.Env = maps.Clone(job.Env)
	job.Labels = maps.Clone(job.Labels)
	return job
}

// NewJobID returns a short random job ID: 12 hex digits, a DNS label.
func NewJobID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
