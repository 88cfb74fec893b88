//go:build !linux

package service

import (
	"errors"
	"os/exec"
	"syscall"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

type runLimits struct{ runMB int64 }

func (s *Supervisor) prepareLimits(sv *svc, l *api.ServiceLimits) (*runLimits, error) {
	if l == nil || (l.MemoryMB == 0 && l.CPUs == 0) {
		return nil, nil
	}
	return nil, errors.ErrUnsupported
}

func (s *Supervisor) afterStart(sv *svc, rl *runLimits) error { return nil }
func (rl *runLimits) oomKilled() bool                         { return false }
func forkIn(rl *runLimits, start func() error) error          { return start() }
func credential(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	return nil, errors.ErrUnsupported
}
func giveRuntimeDir(string, api.ServiceSpec, *syscall.Credential) error { return nil }
func setCredential(*exec.Cmd, *syscall.Credential)                      {}

func (s *Supervisor) removeLimits(workload.Coordinate) {}
