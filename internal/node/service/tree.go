package service

import (
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/nodemgr/nodemgr/internal/node/proctree"
)

// Every run of a service is started in a process tree group
// (internal/node/proctree) named by its coordinate, so that the helpers it
// starts go with it when it dies or is stopped, even those that left its
// process group (setsid, a double fork) and would otherwise live on under
// pid 1 holding its port. Services outlive the agent, so the groups do
// too: the supervisor's manager is Persistent, named after its state dir,
// and the next supervisor opens the same groups by name. With cgroups (v2,
// else v1) a group is a cgroup no process can leave; without (Walk mode) a
// group is every process whose environment carries its mark, and their
// descendants, found by a scan of /proc, which also works after an agent
// restart; a helper that clears its environment and leaves the session
// escapes that mode.

// newTracker makes the supervisor's process tree manager, or nil where no
// mode works here (then a service's process group is all that is killed).
func newTracker(name string) (*proctree.Manager, error) {
	mode, err := proctree.ModeFromEnv()
	if err != nil {
		return nil, err
	}
	return proctree.New(proctree.Options{Mode: mode, Persistent: name})
}

// treeName names a supervisor's groups (process trees and limits) after
// its state dir, so the next agent over the same dir finds them, and two
// agents on one machine do not share them.
func treeName(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "svc-" + hex.EncodeToString(sum[:6])
}

// group returns the process tree group of sv, opened on first use; nil
// when there is no tracker.
func (s *Supervisor) group(sv *svc) *proctree.Group {
	if s.procs == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sv.grp == nil {
		g, err := s.procs.Open(sv.coord.String())
		if err != nil {
			s.log.Warn("open the service's process tree group; helpers that leave its process group may outlive it", "coordinate", sv.coord.String(), "err", err)
			return nil
		}
		sv.grp = g
	}
	return sv.grp
}

// startIn starts cmd in sv's group, and in the run's limit groups.
func (s *Supervisor) startIn(sv *svc, cmd *exec.Cmd, rl *runLimits) error {
	g := s.group(sv)
	if g == nil {
		return forkIn(rl, cmd.Start)
	}
	attr := &syscall.ProcAttr{Env: cmd.Env, Sys: cmd.SysProcAttr}
	_, err := g.Start(attr, func(a *syscall.ProcAttr) (int, error) {
		cmd.SysProcAttr, cmd.Env = a.Sys, a.Env
		if err := forkIn(rl, cmd.Start); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	return err
}

// killTree kills what is left of a run of sv: the process group its
// leader led, and everything in its process tree group.
func (s *Supervisor) killTree(sv *svc, leader int) {
	if leader > 0 {
		signalGroup(leader, syscall.SIGKILL)
	}
	if g := s.group(sv); g != nil {
		if err := g.Kill(); err != nil {
			s.log.Warn("kill the rest of a service's processes", "coordinate", sv.coord.String(), "err", err)
		}
	}
}

// termTree sends SIGTERM to every process in sv's group, so helpers that
// left the process group hear a stop too.
func (s *Supervisor) termTree(sv *svc) {
	if g := s.group(sv); g != nil {
		g.Signal(syscall.SIGTERM)
	}
}

// releaseGroups lets the groups go, their processes running, for the next
// supervisor.
func (s *Supervisor) releaseGroups() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sv := range s.svcs {
		if sv.grp != nil {
			sv.grp.Release()
			sv.grp = nil
		}
	}
}
