package container

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/tick"
)

// cpuReading is a container's cumulative CPU time at a moment; two give
// the CPU share between them.
type cpuReading struct {
	containerID string
	total       uint64 // ns of CPU time since the container started
	at          time.Time
}

// usageLoop samples every running job's usage each UsageInterval and
// reports it through OnChange.
func (m *Manager) usageLoop(ctx context.Context) {
	tick.Every(ctx, m.usageEvery, func() {
		for _, j := range m.activeJobs() {
			if ctx.Err() != nil {
				return // stopping: no flush
			}
			m.sampleJob(ctx, j)
		}
		m.flush()
	})
}

// sampleJob takes one usage sample of a running job. Sampling needs no
// op lock: the sample is dropped if the job moved on meanwhile.
func (m *Manager) sampleJob(ctx context.Context, j *job) {
	c := m.snapshot(j)
	if c.Status != api.ContainerRunning || c.ContainerID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := m.stats(ctx, c.ContainerID)
	if err != nil {
		m.log.Debug("sample container usage", "job", c.Job.ID, "err", err)
		return
	}
	reading := cpuReading{containerID: c.ContainerID, total: st.CPUStats.CPUUsage.TotalUsage, at: st.Read}
	if reading.at.IsZero() {
		reading.at = time.Now()
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if j.rec.Status != api.ContainerRunning || j.rec.ContainerID != c.ContainerID {
		return
	}
	j.rec.Usage = &api.ContainerUsage{
		CPUPercent:       cpuPercent(j.cpu, reading),
		MemoryBytes:      memoryUsed(st.MemoryStats),
		MemoryLimitBytes: st.MemoryStats.Limit,
		At:               reading.at.UTC(),
	}
	j.cpu = reading
	m.queue(j.rec)
}

// stats reads one sample of the container's stats. One-shot: the engine
// answers at once instead of waiting a second for a second reading;
// cpuPercent takes the difference with our previous sample instead.
func (m *Manager) stats(ctx context.Context, id string) (container.StatsResponse, error) {
	res, err := m.engine.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return container.StatsResponse{}, fmt.Errorf("stats of container %.12s: %w", id, dockerengine.Classify(err))
	}
	defer res.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return container.StatsResponse{}, fmt.Errorf("stats of container %.12s: %w", id, err)
	}
	return st, nil
}

// cpuPercent is the CPU time used between two readings over the time
// between them, where 100 is one full core; 0 without a usable previous
// reading.
func cpuPercent(prev, cur cpuReading) float64 {
	if prev.containerID != cur.containerID || !cur.at.After(prev.at) || cur.total < prev.total {
		return 0
	}
	pct := float64(cur.total-prev.total) / float64(cur.at.Sub(prev.at).Nanoseconds()) * 100
	return math.Round(pct*100) / 100
}

// memoryUsed is the memory in use less the page cache that the kernel
// can drop, as docker stats shows it: cgroup v1 calls that
// total_inactive_file, v2 inactive_file.
func memoryUsed(ms container.MemoryStats) uint64 {
	cache, ok := ms.Stats["total_inactive_file"]
	if !ok {
		cache = ms.Stats["inactive_file"]
	}
	if cache > ms.Usage {
		return ms.Usage
	}
	return ms.Usage - cache
}
