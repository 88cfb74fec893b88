package container

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// Backoff of the event stream's reconnects.
const (
	eventsRetryMin = time.Second
	eventsRetryMax = 30 * time.Second
)

// Run adopts the recorded jobs' containers, then follows every job's
// container until ctx ends: the engine's event stream says at once when
// one exits or vanishes, and a periodic reconcile catches whatever the
// stream missed (while it reconnects, say). It samples running
// containers' usage every UsageInterval. When ctx ends it returns nil and
// leaves the containers running, for the next Run to adopt.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("container manager: Run called twice")
	}
	m.adopt(ctx)
	nudge := make(chan string, 64)
	m.mu.Lock()
	m.nudge = nudge
	m.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { m.watchEvents(ctx, nudge) })
	wg.Go(func() { m.reconcileLoop(ctx, nudge) })
	wg.Go(func() { m.usageLoop(ctx) })
	wg.Wait()
	return nil
}

// adopt takes up the recorded jobs that are not final: a running job's
// ports are booked again and its container looked at; a job caught in
// the middle of its deploy is given up (see reconcileOne).
func (m *Manager) adopt(ctx context.Context) {
	for _, j := range m.activeJobs() {
		j.op.Lock()
		if m.current(j) {
			c := m.snapshot(j)
			if c.Status == api.ContainerRunning {
				m.rebookPorts(c)
			}
			m.reconcileOne(ctx, j)
			m.log.Info("adopted container job", "job", c.Job.ID, "container", shortID(c.ContainerID), "status", m.snapshot(j).Status)
		}
		j.op.Unlock()
		m.flush()
	}
}

// watchEvents turns the engine's die, oom and destroy events for nodemgr's
// containers into nudges carrying the job ID; "" asks to look at all jobs,
// as after a reconnect, when events may have been missed.
func (m *Manager) watchEvents(ctx context.Context, nudge chan<- string) {
	retry := eventsRetryMin
	for ctx.Err() == nil {
		f := client.Filters{}
		f.Add("type", "container")
		f.Add("label", workload.LabelJob)
		f.Add("event", "die", "oom", "destroy")
		res := m.engine.Events(ctx, client.EventsListOptions{Filters: m.scoped(f)})
		send(ctx, nudge, "")
	stream:
		for {
			select {
			case msg := <-res.Messages:
				retry = eventsRetryMin
				if id := msg.Actor.Attributes[workload.LabelJob]; id != "" {
					send(ctx, nudge, id)
				}
			case err := <-res.Err:
				if ctx.Err() == nil {
					// Without jobs there is nothing to miss: a node with no
					// engine is not worth a warning every 30 s.
					level := slog.LevelWarn
					if len(m.activeJobs()) == 0 {
						level = slog.LevelDebug
					}
					m.log.Log(ctx, level, "container event stream ended; reconnecting, and reconciling meanwhile", "err", err, "retry_in", retry)
				}
				break stream
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
		retry = min(2*retry, eventsRetryMax)
	}
}

func send(ctx context.Context, ch chan<- string, v string) {
	select {
	case ch <- v:
	case <-ctx.Done():
	}
}

// reconcileLoop looks at every active job each ReconcileInterval, and at
// a nudged one at once.
func (m *Manager) reconcileLoop(ctx context.Context, nudge <-chan string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(m.reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.reconcileAll(ctx)
		case id := <-nudge:
			if id == "" {
				m.reconcileAll(ctx)
				continue
			}
			m.mu.Lock()
			j, ok := m.jobs[id]
			m.mu.Unlock()
			if ok {
				// The job may be busy (an event comes while Deploy or
				// Delete works on it): wait for it, but not here.
				wg.Go(func() { m.reconcileWhenFree(ctx, j) })
			}
		}
	}
}

// reconcileAll looks at every active job that is not busy; a busy one is
// looked at by whoever holds it.
func (m *Manager) reconcileAll(ctx context.Context) {
	for _, j := range m.activeJobs() {
		if ctx.Err() != nil {
			return
		}
		if !j.op.TryLock() {
			continue
		}
		if m.current(j) {
			m.reconcileOne(ctx, j)
		}
		j.op.Unlock()
		m.flush()
	}
}

// reconcileWhenFree waits for the job to be free, polling so as not to
// hold up the end of Run behind a long deploy, then looks at it.
func (m *Manager) reconcileWhenFree(ctx context.Context, j *job) {
	for !j.op.TryLock() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	if m.current(j) {
		m.reconcileOne(ctx, j)
	}
	j.op.Unlock()
	m.flush()
}

// reconcileOne compares an active job with its container and records
// what changed; j.op is held. A CREATING job here was cut short by an
// agent stop (Deploy holds the job while it works): it is given up, its
// container, if any, removed.
func (m *Manager) reconcileOne(ctx context.Context, j *job) {
	c := m.snapshot(j)
	if api.ContainerFinal(c.Status) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if c.Status == api.ContainerCreating {
		m.abandon(ctx, j)
		return
	}
	insp, oom, err := m.inspectSettled(ctx, c.ContainerID, c.Job.MemoryMB > 0)
	gone := errdefs.IsNotFound(err)
	if err != nil && !gone {
		m.log.Debug("reconcile container job", "job", c.Job.ID, "err", err)
		return
	}
	o := observe(insp, gone, oom)
	switch {
	case o.status == c.Status && (o.startedAt == nil || c.StartedAt != nil):
		return // nothing new
	case o.status == api.ContainerCreating:
		return // created but never started: not ours to start
	}
	after := m.settle(ctx, j, o, gone)
	m.log.Info("container job changed", "job", c.Job.ID, "status", after.Status, "reason", after.Reason)
}

// Restart backoff: the wait before the n-th restart is restartDelay·2^n,
// at most restartDelayMax, from the container's exit.
const (
	restartDelay    = time.Second
	restartDelayMax = 30 * time.Second
)

// defaultOnFailureRetries is on-failure's bound when the job sets none.
const defaultOnFailureRetries = 3

// settle records what the engine says of j's container, unless the job's
// restart policy wants the ended container started again: then the job
// stays RUNNING and the container is started once its backoff is over
// (a nudge comes back for it). j.op is held.
func (m *Manager) settle(ctx context.Context, j *job, o observation, gone bool) api.Container {
	c := m.snapshot(j)
	if gone || !api.ContainerFinal(o.status) || !restartWanted(c, o) {
		return m.apply(j, o)
	}
	wait := min(restartDelay<<min(c.Restarts, 10), restartDelayMax)
	if o.finishedAt != nil {
		wait -= time.Since(*o.finishedAt)
	}
	if wait > 0 {
		m.nudgeLater(c.Job.ID, wait)
		if c.Status == api.ContainerRunning {
			return c
		}
		return m.set(j, func(c *api.Container) {
			c.Status = api.ContainerRunning
			c.StartedAt = cmp.Or(o.startedAt, ptr(now()))
		})
	}
	if err := m.start(ctx, c.ContainerID); err != nil {
		o.reason += fmt.Sprintf(" (a restart failed: %v)", err)
		return m.apply(j, o)
	}
	m.log.Info("restarted container job by its policy", "job", c.Job.ID, "after", cmp.Or(o.reason, "exit code 0"), "restarts", c.Restarts+1)
	return m.set(j, func(c *api.Container) {
		c.Status = api.ContainerRunning
		c.Restarts++
		c.StartedAt = ptr(now())
		c.ExitCode = o.exitCode
		c.Reason = "restarted after " + cmp.Or(o.reason, "exit code 0")
	})
}

// restartWanted says whether the job's policy starts its container again
// after it ended as o says, restarts it had so far counted.
func restartWanted(c api.Container, o observation) bool {
	r := c.Job.Restart
	limit := r.MaxRetries
	switch r.Policy {
	case api.ContainerRestartAlways:
	case api.ContainerRestartOnFailure:
		if o.status == api.ContainerCompleted {
			return false
		}
		if limit == 0 {
			limit = defaultOnFailureRetries
		}
	default:
		return false
	}
	return limit == 0 || c.Restarts < limit
}

// nudgeLater asks Run's reconcile to look at the job after d.
func (m *Manager) nudgeLater(id string, d time.Duration) {
	m.mu.Lock()
	nudge := m.nudge
	m.mu.Unlock()
	if nudge == nil {
		return // Run is not running: the next one reconciles all jobs
	}
	time.AfterFunc(d, func() {
		select {
		case nudge <- id:
		default: // full: a reconcile of all is coming anyway
		}
	})
}

// abandon gives up a job whose deploy never finished.
func (m *Manager) abandon(ctx context.Context, j *job) {
	c := m.snapshot(j)
	if err := m.removeJobContainers(ctx, c.Job.ID); err != nil {
		m.log.Warn("remove the container of an unfinished deploy; will try again", "job", c.Job.ID, "err", err)
		return
	}
	m.releasePorts(c.Job.ID)
	m.set(j, func(c *api.Container) {
		c.Status = api.ContainerFailed
		c.Reason = "the agent stopped while deploying it; deploy it again"
		c.FinishedAt = ptr(now())
	})
	m.log.Warn("gave up a container job whose deploy never finished", "job", c.Job.ID)
}

// activeJobs returns the jobs not in a final state.
func (m *Manager) activeJobs() []*job {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*job
	for _, j := range m.jobs {
		if !api.ContainerFinal(j.rec.Status) {
			out = append(out, j)
		}
	}
	return out
}

// current reports whether j is still the job of its ID (a redeploy of an
// UNDEPLOYED ID replaces it).
func (m *Manager) current(j *job) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobs[j.rec.Job.ID] == j
}
