package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// killWait bounds the wait for a process to die after SIGKILL; only a
// process stuck in the kernel (uninterruptible I/O) takes longer.
const killWait = 10 * time.Second

// Active reports whether a service in state is, or is about to be,
// running: such a service holds its allocation in the node's books.
func Active(state string) bool { return active(state) }

// active reports whether a service in state is, or is about to be, running.
func active(state string) bool {
	switch state {
	case api.ServiceStarting, api.ServiceRunning, api.ServiceRestarting, api.ServiceDraining, api.ServiceStopping:
		return true
	}
	return false
}

// Start starts a service from spec. A service with the coordinate that is
// stopped, exited or failed is replaced; a live one is a conflict. When
// Start fails nothing is left claiming the service runs: its port is
// released and an earlier record is kept as it was.
func (s *Supervisor) Start(ctx context.Context, spec api.ServiceSpec) (api.Service, error) {
	v, err := s.start(ctx, spec)
	if err != nil {
		return api.Service{}, fmt.Errorf("start service %s: %w", spec.Coordinate, err)
	}
	return v, nil
}

func (s *Supervisor) start(ctx context.Context, spec api.ServiceSpec) (api.Service, error) {
	if err := workload.CheckService(spec); err != nil {
		return api.Service{}, err
	}
	c, _ := workload.ParseCoordinate(spec.Coordinate)
	if err := s.waitReady(ctx); err != nil {
		return api.Service{}, err
	}
	sv, err := s.claim(ctx, c)
	if err != nil {
		return api.Service{}, err
	}
	defer sv.unlock()

	s.mu.Lock()
	if st := sv.rec.State; active(st) {
		s.mu.Unlock()
		return api.Service{}, errdefs.Conflict("it is already %s; stop it first (`nodemgr service stop NODE %s`) or restart it (`nodemgr service restart NODE %s`)", st, c, c)
	}
	prev := sv.rec
	sv.rec = record{Spec: spec, State: api.ServiceStarting}
	s.mu.Unlock()
	s.notify()

	p, port, err := s.bringUp(ctx, sv, spec, 0)
	if err == nil {
		s.mu.Lock()
		s.setRunning(sv, p, port, 0)
		s.mu.Unlock()
		if err = s.save(sv); err != nil {
			s.kill(sv, p)
		}
	}
	if err != nil {
		s.mu.Lock()
		if sv.onDisk {
			sv.rec = prev
		} else {
			sv.removed = true
			delete(s.svcs, c.String())
		}
		s.mu.Unlock()
		s.notify()
		return api.Service{}, err
	}
	s.watch(sv, p)
	s.notify()
	s.log.Info("service started", "coordinate", c.String(), "pid", p.pid, "port", port)
	return s.view(sv), nil
}

// bringUp does what a user's start does before the process runs:
// resolve the artifact, make the runtime dir, put the files in, take a
// port; then it launches the process. On failure the port is released.
func (s *Supervisor) bringUp(ctx context.Context, sv *svc, spec api.ServiceSpec, preferPort int) (*process, int, error) {
	tree, err := s.tree(spec.Artifact)
	if err != nil {
		return nil, 0, err
	}
	runtimeDir := sv.coord.RuntimeDir(s.cfg.Prefix)
	if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("runtime dir: %w", err)
	}
	if log, err := openLog(runtimeDir); err != nil {
		return nil, 0, fmt.Errorf("runtime dir: %w", err)
	} else {
		log.Close()
	}
	if err := s.prepareFiles(ctx, tree, runtimeDir, spec.Files); err != nil {
		return nil, 0, err
	}
	port, err := s.allocatePort(sv.coord, spec.Port, preferPort)
	if err != nil {
		return nil, 0, err
	}
	p, err := s.launch(sv, spec, tree, port)
	if err != nil {
		s.releasePort(sv.coord)
		return nil, 0, err
	}
	return p, port, nil
}

// setRunning records that p runs the service. restarts is the new count
// of starts after the first. Call with s.mu held.
func (s *Supervisor) setRunning(sv *svc, p *process, port, restarts int) {
	started := p.startedAt
	r := &sv.rec
	r.State = api.ServiceRunning
	r.PID, r.StartTime = p.pid, p.startTime
	r.Port = port
	r.Restarts = restarts
	r.StartedAt = &started
	r.Reason = ""
	sv.proc = p
}

// kill undoes a launch that cannot be recorded.
func (s *Supervisor) kill(sv *svc, p *process) {
	p.signal(syscall.SIGKILL)
	waitDone(p, killWait)
	s.releasePort(sv.coord)
	s.mu.Lock()
	if sv.proc == p {
		sv.proc = nil
	}
	s.mu.Unlock()
}

// waitDone waits up to d for p to exit and reports whether it did.
func waitDone(p *process, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Stop stops a service: SIGTERM to its process group, SIGKILL after the
// spec's StopGrace. It stays stopped until it is started or restarted. A
// pending restart is cancelled. Stopping a stopped service does nothing.
// ctx bounds only the wait for another operation on the service to end: a
// stop once begun is finished, so a service is never left half-stopped.
func (s *Supervisor) Stop(ctx context.Context, coordinate string) (api.Service, error) {
	if err := s.waitReady(ctx); err != nil {
		return api.Service{}, fmt.Errorf("stop service %s: %w", coordinate, err)
	}
	sv, err := s.lookup(ctx, coordinate)
	if err != nil {
		return api.Service{}, fmt.Errorf("stop service %s: %w", coordinate, err)
	}
	defer sv.unlock()
	if err := s.stop(sv, "stopped on request", false); err != nil {
		return s.view(sv), fmt.Errorf("stop service %s: %w", coordinate, err)
	}
	return s.view(sv), nil
}

// stop stops sv's process, if it has one, and records it stopped with
// reason. Its port is released, unless keepPort (a restart that wants the
// same port again: the allocator may quarantine a released one). The wait
// is bounded by the spec's StopGrace and killWait, not by a caller's
// context: a stop once begun is finished, or the service would be left
// half-stopped. Call with sv's operation lock held.
func (s *Supervisor) stop(sv *svc, reason string, keepPort bool) error {
	s.mu.Lock()
	s.cancelRestart(sv)
	p := sv.proc
	if p == nil {
		s.mu.Unlock()
		s.killTree(sv, 0) // what a run that died left behind
		s.mu.Lock()
		changed := sv.rec.State != api.ServiceStopped
		if changed {
			sv.rec.State, sv.rec.Reason = api.ServiceStopped, reason
			sv.rec.PID, sv.rec.StartTime = 0, 0
			if !keepPort {
				sv.rec.Port = 0
			}
		}
		s.mu.Unlock()
		if !changed {
			return nil
		}
		if !keepPort {
			s.releasePort(sv.coord)
		}
		err := s.save(sv)
		s.notify()
		return err
	}
	sv.rec.State = api.ServiceStopping
	grace := stopGraceOf(sv.rec.Spec)
	s.mu.Unlock()
	s.saveLogged(sv)
	s.notify()

	p.signal(syscall.SIGTERM)
	s.termTree(sv)
	if !waitDone(p, grace) {
		s.log.Info("service ignored SIGTERM; killing it", "coordinate", sv.coord.String(), "pid", p.pid, "grace", grace)
		p.signal(syscall.SIGKILL)
		if !waitDone(p, killWait) {
			return fmt.Errorf("process %d did not die after SIGKILL; it is stuck in the kernel, look at /proc/%d/stack and try again: %w", p.pid, p.pid, errdefs.ErrUnavailable)
		}
	}
	// The leader is gone; helpers it left go with it, also those that
	// left its process group.
	s.killTree(sv, p.pid)

	now := time.Now()
	s.mu.Lock()
	r := &sv.rec
	sv.proc = nil
	r.State, r.Reason = api.ServiceStopped, reason
	r.PID, r.StartTime = 0, 0
	if !keepPort {
		r.Port = 0
	}
	r.LastExit, r.LastExitAt = p.status, &now
	s.mu.Unlock()
	if !keepPort {
		s.releasePort(sv.coord)
	}
	err := s.save(sv)
	s.notify()
	s.log.Info("service stopped", "coordinate", sv.coord.String(), "reason", reason, "exit", p.status)
	return err
}

// Drain asks a service to finish its work and stops it: it runs the
// spec's drain command or sends its drain signal, waits up to the drain
// timeout for the service to exit by itself, and then stops it. A spec
// without either is simply stopped. Drain returns once the service is
// stopped; like Stop, it does not give up half-way when ctx ends.
func (s *Supervisor) Drain(ctx context.Context, coordinate string) (api.Service, error) {
	if err := s.waitReady(ctx); err != nil {
		return api.Service{}, fmt.Errorf("drain service %s: %w", coordinate, err)
	}
	sv, err := s.lookup(ctx, coordinate)
	if err != nil {
		return api.Service{}, fmt.Errorf("drain service %s: %w", coordinate, err)
	}
	defer sv.unlock()
	if err := s.stop(sv, s.drain(sv), false); err != nil {
		return s.view(sv), fmt.Errorf("drain service %s: %w", coordinate, err)
	}
	return s.view(sv), nil
}

// drain does the draining part of Drain and returns the reason to stop
// with. Like stop, it is bounded by the spec, not by a caller's context.
func (s *Supervisor) drain(sv *svc) string {
	s.mu.Lock()
	p := sv.proc
	if p == nil {
		s.mu.Unlock()
		return "stopped on request (it did not run, so there was nothing to drain)"
	}
	sv.rec.State = api.ServiceDraining
	spec, port := sv.rec.Spec, sv.rec.Port
	s.mu.Unlock()
	s.saveLogged(sv)
	s.notify()

	timeout := drainTimeoutOf(spec)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch {
	case len(spec.Drain.Command) > 0:
		if why := s.drainByCommand(ctx, sv, p, spec, port); why != "" {
			return why
		}
	case spec.Drain.Signal != "":
		sig, err := signalByName(spec.Drain.Signal)
		if err != nil {
			return fmt.Sprintf("stopped without draining: %v", err)
		}
		if err := p.signal(sig); err != nil {
			return fmt.Sprintf("stopped without draining: send %s: %v", spec.Drain.Signal, err)
		}
	default:
		return "drained (no drain command or signal, so it was stopped)"
	}
	select {
	case <-p.done:
		return "drained"
	case <-ctx.Done():
		return fmt.Sprintf("drained, but it did not exit within %s, so it was stopped", timeout)
	}
}

// drainByCommand runs the drain command until it ends or the service
// exits. It returns a reason to stop at once, or "" to go on waiting.
func (s *Supervisor) drainByCommand(ctx context.Context, sv *svc, p *process, spec api.ServiceSpec, port int) string {
	tree, err := s.tree(spec.Artifact)
	if err != nil {
		return fmt.Sprintf("stopped without draining: %v", err)
	}
	cmdCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.runDrainCommand(cmdCtx, sv.coord, spec, tree, port) }()
	select {
	case err := <-errc:
		if err != nil && !p.exited() {
			s.log.Warn("drain command failed", "coordinate", sv.coord.String(), "err", err)
			return fmt.Sprintf("stopped without draining: drain command: %v", err)
		}
	case <-p.done:
		cancel() // the service is done; so is its drain command
		<-errc
	case <-ctx.Done():
		<-errc
	}
	return ""
}

// Restart stops a service if it runs and starts it again with the same
// spec, its files put in again as for a start. It works on stopped,
// exited and failed services too, and gives a failed one a fresh count of
// quick deaths.
func (s *Supervisor) Restart(ctx context.Context, coordinate string) (api.Service, error) {
	if err := s.waitReady(ctx); err != nil {
		return api.Service{}, fmt.Errorf("restart service %s: %w", coordinate, err)
	}
	sv, err := s.lookup(ctx, coordinate)
	if err != nil {
		return api.Service{}, fmt.Errorf("restart service %s: %w", coordinate, err)
	}
	defer sv.unlock()
	if err := s.restart(ctx, sv); err != nil {
		return s.view(sv), fmt.Errorf("restart service %s: %w", coordinate, err)
	}
	return s.view(sv), nil
}

func (s *Supervisor) restart(ctx context.Context, sv *svc) error {
	s.mu.Lock()
	oldPort := sv.rec.Port
	s.mu.Unlock()
	if err := s.stop(sv, "restarting on request", true); err != nil {
		return err
	}
	s.mu.Lock()
	spec, restarts := sv.rec.Spec, sv.rec.Restarts
	sv.rec.State, sv.rec.Reason = api.ServiceStarting, ""
	s.mu.Unlock()
	s.notify()

	p, port, err := s.bringUp(ctx, sv, spec, oldPort)
	if err != nil {
		s.releasePort(sv.coord)
		s.mu.Lock()
		sv.rec.State, sv.rec.Reason = api.ServiceStopped, fmt.Sprintf("restart failed: %v", err)
		sv.rec.Port = 0
		s.mu.Unlock()
		s.saveLogged(sv)
		s.notify()
		return err
	}
	s.mu.Lock()
	s.setRunning(sv, p, port, restarts+1)
	sv.rec.QuickDeaths = 0
	s.mu.Unlock()
	if err := s.save(sv); err != nil {
		s.kill(sv, p)
		s.mu.Lock()
		sv.rec.State, sv.rec.Reason = api.ServiceStopped, fmt.Sprintf("restart failed: %v", err)
		sv.rec.PID, sv.rec.StartTime, sv.rec.Port = 0, 0, 0
		s.mu.Unlock()
		s.saveLogged(sv)
		s.notify()
		return err
	}
	s.watch(sv, p)
	s.notify()
	s.log.Info("service restarted", "coordinate", sv.coord.String(), "pid", p.pid, "port", port)
	return nil
}

// Remove forgets a service that does not run: its record is deleted, and
// with purge its runtime dir too. A running service is a conflict.
func (s *Supervisor) Remove(coordinate string, purge bool) error {
	if err := s.remove(coordinate, purge); err != nil {
		return fmt.Errorf("remove service %s: %w", coordinate, err)
	}
	return nil
}

func (s *Supervisor) remove(coordinate string, purge bool) error {
	select {
	case <-s.quit:
		return errShutDown
	default:
	}
	// No waitReady: a service that is not active needs no adoption, and
	// an active one is refused below either way.
	sv, err := s.lookup(context.Background(), coordinate)
	if err != nil {
		return err
	}
	defer sv.unlock()
	s.mu.Lock()
	st := sv.rec.State
	s.mu.Unlock()
	if active(st) {
		return errdefs.Conflict("it is %s; stop it first with `nodemgr service stop NODE %s`", st, coordinate)
	}

	sv.wmu.Lock()
	if err := removeRecord(s.cfg.StateDir, sv.coord.String()); err != nil {
		sv.wmu.Unlock()
		return err
	}
	s.mu.Lock()
	sv.removed = true
	delete(s.svcs, sv.coord.String())
	s.mu.Unlock()
	sv.wmu.Unlock()
	s.releasePort(sv.coord)
	s.notify()
	if sv.grp != nil {
		if err := sv.grp.Close(); err != nil {
			s.log.Warn("remove the service's process tree group", "coordinate", coordinate, "err", err)
		}
	}
	s.removeLimits(sv.coord)

	if purge {
		dir := sv.coord.RuntimeDir(s.cfg.Prefix)
		if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("purge runtime dir: %w", err)
		}
	}
	return nil
}
