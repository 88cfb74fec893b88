//go:build !linux

package proctree

import (
	"errors"
	"syscall"
)

// Manager is not available off Linux.
type Manager struct{}

// Group is not available off Linux.
type Group struct{}

// New returns errors.ErrUnsupported off Linux.
func New(Options) (*Manager, error) { return nil, errors.ErrUnsupported }

func (m *Manager) Mode() Mode                                 { return Auto }
func (m *Manager) Dir() string                                { return "" }
func (m *Manager) NewGroup() (*Group, error)                  { return nil, errors.ErrUnsupported }
func (m *Manager) Close() error                               { return nil }
func (m *Manager) Open(string) (*Group, error)                { return nil, errors.ErrUnsupported }
func (g *Group) Release()                                     {}
func (g *Group) Dir() string                                  { return "" }
func (g *Group) Start(*syscall.ProcAttr, Forker) (int, error) { return 0, errors.ErrUnsupported }
func (g *Group) Signal(syscall.Signal) (int, error)           { return 0, errors.ErrUnsupported }
func (g *Group) Kill() error                                  { return errors.ErrUnsupported }
func (g *Group) Close() error                                 { return nil }

// OwnCgroupDir returns errors.ErrUnsupported off Linux.
func OwnCgroupDir(string) (string, error) { return "", errors.ErrUnsupported }
