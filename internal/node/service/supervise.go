package service

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// exitedAway is the last exit of a service that died while no supervisor
// watched it.
const exitedAway = "unknown (exited while the agent was down)"

// watch reacts when p exits by itself.
func (s *Supervisor) watch(sv *svc, p *process) {
	go func() {
		select {
		case <-p.done:
			s.exited(sv, p)
		case <-s.quit:
		}
	}()
}

// exited applies the restart policy to a process that ended. Exits during
// a stop or a drain belong to that operation, and once Run has returned
// exits are left for the next supervisor to find, as they would be if the
// agent had died.
func (s *Supervisor) exited(sv *svc, p *process) {
	if !s.stillRuns(sv, p) {
		return
	}
	// Whatever the run left (helpers that left its process group) goes
	// before anything is decided: a restart must find its port free.
	s.killTree(sv, p.pid)
	s.mu.Lock()
	if s.closed || sv.proc != p || sv.rec.State != api.ServiceRunning {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	r := &sv.rec
	sv.proc = nil
	r.PID, r.StartTime = 0, 0
	r.LastExit, r.LastExitAt = p.status, &now
	release := s.decide(sv, now.Sub(p.startedAt), p.success)
	state, reason := r.State, r.Reason
	s.mu.Unlock()
	if release {
		s.releasePort(sv.coord)
	}
	s.saveLogged(sv)
	s.notify()
	s.log.Info("service exited", "coordinate", sv.coord.String(), "pid", p.pid, "exit", p.status, "state", state, "reason", reason)
}

// stillRuns reports whether p is sv's running process and the supervisor
// still reacts to its exit.
func (s *Supervisor) stillRuns(sv *svc, p *process) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && sv.proc == p && sv.rec.State == api.ServiceRunning
}

// decide applies the restart policy to a run that lasted ran and ended as
// sv.rec.LastExit says: the service is restarting (a restart is
// scheduled), exited, or failed. It reports whether the port should be
// released, which the caller does after unlocking. Call with s.mu held.
func (s *Supervisor) decide(sv *svc, ran time.Duration, success bool) (releasePort bool) {
	r := &sv.rec
	spec := r.Spec
	if ran < minPeriodOf(spec) {
		r.QuickDeaths++
	} else {
		r.QuickDeaths = 0
	}
	policy := policyOf(spec)
	switch {
	case policy == api.RestartNever:
		r.State, r.Reason = api.ServiceExited, "exited; restart policy never"
	case policy == api.RestartOnFailure && success:
		r.State, r.Reason = api.ServiceExited, "exited successfully; restart policy on-failure restarts only failures"
	case r.QuickDeaths >= maxRestartsOf(spec):
		r.State = api.ServiceFailed
		r.Reason = fmt.Sprintf("died %d times within %s of starting; last: %s", r.QuickDeaths, minPeriodOf(spec), r.LastExit)
	default:
		r.State, r.Reason = api.ServiceRestarting, ""
		s.scheduleRestart(sv, restartDelay(spec, r.QuickDeaths))
		return false
	}
	r.Port = 0
	return true
}

// scheduleRestart starts the service again after delay. Call with s.mu
// held.
func (s *Supervisor) scheduleRestart(sv *svc, delay time.Duration) {
	s.cancelRestart(sv)
	if s.closed {
		return // the record says restarting; the next supervisor restarts it
	}
	gen := sv.gen
	sv.timer = time.AfterFunc(delay, func() { s.restartDue(sv, gen) })
}

// cancelRestart cancels a pending restart. Call with s.mu held.
func (s *Supervisor) cancelRestart(sv *svc) {
	if sv.timer != nil {
		sv.timer.Stop()
		sv.timer = nil
	}
	sv.gen++ // a timer that already fired finds itself stale
}

func (s *Supervisor) restartDue(sv *svc, gen uint64) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	defer s.bg.Done()
	if err := sv.lock(s.runCtx); err != nil {
		return
	}
	defer sv.unlock()
	s.mu.Lock()
	if s.closed || sv.removed || sv.gen != gen || sv.rec.State != api.ServiceRestarting {
		s.mu.Unlock()
		return
	}
	sv.timer = nil
	s.mu.Unlock()
	s.relaunch(sv)
}

// relaunch starts a restarting service again. Its port is kept across the
// restart, its files are not put in again, and a start that fails counts
// as a quick death. Call with sv's operation lock held.
func (s *Supervisor) relaunch(sv *svc) {
	s.mu.Lock()
	spec, port := sv.rec.Spec, sv.rec.Port
	s.mu.Unlock()
	tree, err := s.tree(spec.Artifact)
	if err == nil && port == 0 && spec.Port != -1 && s.cfg.Ports != nil {
		// A record from an agent that lost the port; get one again.
		port, err = s.allocatePort(sv.coord, spec.Port, 0)
	}
	var p *process
	if err == nil {
		p, err = s.launch(sv, spec, tree, port)
	}
	now := time.Now()
	s.mu.Lock()
	release := false
	if err != nil {
		sv.rec.LastExit, sv.rec.LastExitAt = fmt.Sprintf("start failed: %v", err), &now
		release = s.decide(sv, 0, false)
	} else {
		s.setRunning(sv, p, port, sv.rec.Restarts+1)
	}
	state, restarts := sv.rec.State, sv.rec.Restarts
	s.mu.Unlock()
	if release {
		s.releasePort(sv.coord)
	}
	s.saveLogged(sv)
	if p != nil {
		s.watch(sv, p)
		s.log.Info("service restarted", "coordinate", sv.coord.String(), "pid", p.pid, "restarts", restarts)
	} else {
		s.log.Warn("service restart failed", "coordinate", sv.coord.String(), "err", err, "state", state)
	}
	s.notify()
}

// adoptAll takes over the services an earlier supervisor recorded.
func (s *Supervisor) adoptAll() {
	s.mu.Lock()
	svcs := make([]*svc, 0, len(s.svcs))
	for _, sv := range s.svcs {
		svcs = append(svcs, sv)
	}
	s.mu.Unlock()
	slices.SortFunc(svcs, func(a, b *svc) int { return cmp.Compare(a.coord.String(), b.coord.String()) })
	for _, sv := range svcs {
		if err := sv.lock(s.runCtx); err != nil {
			return
		}
		finishStop := s.adoptOne(sv)
		if finishStop {
			// Stopping can take the whole grace; it is finished in
			// the background so the other services are adopted now.
			s.bg.Add(1) // Run has not begun to close: adoption precedes it
			go func() {
				defer s.bg.Done()
				defer sv.unlock()
				if err := s.stop(sv, "stopped on request (finished after an agent restart)", false); err != nil {
					s.log.Error("finish stopping adopted service", "coordinate", sv.coord.String(), "err", err)
				}
			}()
			continue
		}
		sv.unlock()
	}
}

// adoptOne takes over one recorded service: a process that still runs is
// adopted, not started again (a pid whose start time differs is a
// stranger that got a recycled pid); one that died while the agent was
// away is handled as an exit with unknown status. It reports whether the
// service was being stopped and the stop must be finished. Call with sv's
// operation lock held.
func (s *Supervisor) adoptOne(sv *svc) (finishStop bool) {
	s.mu.Lock()
	if sv.removed {
		s.mu.Unlock()
		return false
	}
	r := &sv.rec
	c := sv.coord.String()
	switch r.State {
	case api.ServiceRunning, api.ServiceStarting, api.ServiceDraining, api.ServiceStopping:
		stopping := r.State == api.ServiceDraining || r.State == api.ServiceStopping
		if r.PID > 0 && alive(r.PID, r.StartTime) {
			startedAt := time.Now()
			if r.StartedAt != nil {
				startedAt = *r.StartedAt
			}
			p := s.adopt(r.PID, r.StartTime, startedAt)
			sv.proc = p
			if !stopping {
				r.State = api.ServiceRunning
			}
			port := r.Port
			s.mu.Unlock()
			s.keepPort(sv.coord, port)
			s.saveLogged(sv)
			if !stopping {
				s.watch(sv, p)
			}
			s.log.Info("adopted running service", "coordinate", c, "pid", p.pid, "port", port)
			return stopping
		}
		s.mu.Unlock()
		s.killTree(sv, 0) // what it left while no agent watched
		s.mu.Lock()
		now := time.Now()
		r.PID, r.StartTime = 0, 0
		r.LastExit, r.LastExitAt = exitedAway, &now
		release := true
		if stopping {
			r.State, r.Reason, r.Port = api.ServiceStopped, "stopped on request", 0
		} else {
			// When it died is not known; if even now is within
			// MinPeriod of its start, it surely died quickly.
			ran := minPeriodOf(r.Spec)
			if r.StartedAt != nil {
				ran = now.Sub(*r.StartedAt)
			}
			release = s.decide(sv, ran, false)
		}
		state, port := r.State, r.Port
		s.mu.Unlock()
		if release {
			s.releasePort(sv.coord)
		} else {
			s.keepPort(sv.coord, port)
		}
		s.saveLogged(sv)
		s.log.Info("service exited while the agent was down", "coordinate", c, "state", state)
	case api.ServiceRestarting:
		s.scheduleRestart(sv, restartDelay(r.Spec, r.QuickDeaths))
		port := r.Port
		s.mu.Unlock()
		s.keepPort(sv.coord, port)
	default:
		s.mu.Unlock()
	}
	return false
}
