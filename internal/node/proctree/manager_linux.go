package proctree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Manager makes and keeps the groups of one process. Its methods are safe
// for concurrent use.
type Manager struct {
	mode Mode
	opts Options
	cg   *cgroupRoot // Cgroup2, Cgroup1

	mu     sync.Mutex
	groups map[*Group]bool
	n      int
	closed bool
}

// New makes the manager of this process's groups: in opts.Mode, or in the
// first mode that works here (Cgroup2, Cgroup1, Walk). A forced mode that
// cannot work is an error that says why.
func New(opts Options) (*Manager, error) {
	m := &Manager{opts: opts, groups: map[*Group]bool{}}
	try := []Mode{opts.Mode}
	if opts.Mode == Auto {
		try = []Mode{Cgroup2, Cgroup1, Walk}
	}
	var errs []error
	for _, mode := range try {
		err := m.setUp(mode)
		if err == nil {
			m.mode = mode
			return m, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", mode, err))
	}
	return nil, fmt.Errorf("proctree: no way to track a task's processes here: %w (set %s to another mode)", errors.Join(errs...), EnvMode)
}

func (m *Manager) setUp(mode Mode) error {
	switch mode {
	case Cgroup2:
		cg, err := newCgroup2Root(m.opts.Persistent)
		m.cg = cg
		return err
	case Cgroup1:
		cg, err := newCgroup1Root(m.opts.Persistent)
		m.cg = cg
		return err
	case Walk:
		if m.opts.Persistent != "" {
			return nil // groups are found by their mark (see Options)
		}
		// Orphans come to this process instead of init, where a walk
		// finds them.
		if err := setChildSubreaper(); err != nil {
			return fmt.Errorf("become a child subreaper: %w", err)
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// Mode says how the manager's groups track their processes.
func (m *Manager) Mode() Mode { return m.mode }

// Dir is the cgroup directory the manager's groups live in ("" in Walk
// mode).
func (m *Manager) Dir() string {
	if m.cg == nil {
		return ""
	}
	return m.cg.dir
}

// NewGroup makes an empty group. Close it when done; it may hold one
// task's processes after another, emptied by Kill in between.
func (m *Manager) NewGroup() (*Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.n++
	g := &Group{m: m, n: m.n, fd: -1, mark: strconv.Itoa(os.Getpid()) + "." + strconv.Itoa(m.n)}
	if m.cg != nil {
		if err := m.cg.newGroup(g, m.n, 0); err != nil {
			return nil, err
		}
	}
	m.groups[g] = true
	return g, nil
}

// Open opens the group named name of a Persistent manager, made if it
// does not exist yet, with the processes an earlier manager left in it.
// name must be a plain file name.
func (m *Manager) Open(name string) (*Group, error) {
	if m.opts.Persistent == "" || name == "" || name != filepath.Base(name) || name[0] == '.' {
		return nil, fmt.Errorf("proctree: open group %q: needs a Persistent manager and a plain name", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.n++
	g := &Group{m: m, n: m.n, name: name, fd: -1, mark: m.opts.Persistent + "/" + name}
	if m.cg != nil {
		if err := m.cg.openGroup(g, name); err != nil {
			return nil, err
		}
	}
	m.groups[g] = true
	return g, nil
}

// Close kills what the groups still hold, closes them, and removes the
// manager's cgroup directory. A Persistent manager's directory is kept.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	groups := make([]*Group, 0, len(m.groups))
	for g := range m.groups {
		groups = append(groups, g)
	}
	m.mu.Unlock()
	var errs []error
	for _, g := range groups {
		errs = append(errs, g.Close())
	}
	if m.cg != nil && m.opts.Persistent == "" {
		if err := os.Remove(m.cg.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isLeader says whether pid is the process a group of m started last:
// its caller reaps it, not the manager.
func (m *Manager) isLeader(pid int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for g := range m.groups {
		if g.leaderPID() == pid {
			return true
		}
	}
	return false
}

// Group is the processes of one task at a time. Its methods are safe for
// concurrent use.
type Group struct {
	m    *Manager
	n    int    // its number in the manager
	name string // a Persistent manager's group: its name (Open)
	mark string // Walk: the value of EnvGroup in its processes

	mu     sync.Mutex
	dir    string   // Cgroup2, Cgroup1: the group's cgroup
	fd     int      // Cgroup2: dir, open for CLONE_INTO_CGROUP
	events *os.File // Cgroup2: dir's cgroup.events, open
	gen    int      // Cgroup2: directories used up (renew)
	burnt  bool     // Cgroup2: cgroup.kill was used on dir
	leader int      // the last process Start started
	closed bool
}

func (g *Group) leaderPID() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leader
}

// Start starts a process in the group with fork, after adding to attr
// what puts it there. Its descendants are in the group too, wherever
// they go.
func (g *Group) Start(attr *syscall.ProcAttr, fork Forker) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, ErrClosed
	}
	if g.burnt || (g.name != "" && g.m.mode == Cgroup2) {
		// A named group may have been killed by an earlier manager:
		// it is made afresh unless something still runs in it.
		if err := g.m.cg.renew(g); err != nil {
			return 0, err
		}
		g.burnt = false
	}
	a := *attr
	sys := syscall.SysProcAttr{}
	if a.Sys != nil {
		sys = *a.Sys
	}
	a.Sys = &sys
	var pid int
	var err error
	switch g.m.mode {
	case Cgroup2:
		sys.UseCgroupFD, sys.CgroupFD = true, g.fd
		pid, err = fork(&a)
	case Cgroup1:
		pid, err = g.m.cg.forkInside(g.dir, &a, fork)
	default:
		a.Env = append(a.Env[:len(a.Env):len(a.Env)], EnvGroup+"="+g.mark)
		pid, err = fork(&a)
	}
	if err == nil {
		g.leader = pid
	}
	return pid, err
}

// Signal sends sig to every process in the group and says how many it
// found.
func (g *Group) Signal(sig syscall.Signal) (int, error) {
	pids, err := g.members()
	for _, pid := range pids {
		syscall.Kill(pid, sig)
	}
	return len(pids), err
}

// Kill kills every process in the group with SIGKILL and waits (a few
// seconds at most) until none is left, so that the group can take the
// next task. An empty group costs one read.
func (g *Group) Kill() error {
	g.mu.Lock()
	dir, events := g.dir, g.events
	g.mu.Unlock()
	switch g.m.mode {
	case Cgroup2:
		killed, err := g.m.cg.kill2(dir, events)
		if killed {
			g.mu.Lock()
			g.burnt = true
			g.mu.Unlock()
		}
		return err
	case Cgroup1:
		return g.m.cg.kill1(dir)
	}
	return g.killWalk()
}

// members lists the processes in the group, this one left out (in Cgroup1
// mode, a thread of ours is in a group while it forks).
func (g *Group) members() ([]int, error) {
	if g.m.cg != nil {
		g.mu.Lock()
		dir := g.dir
		g.mu.Unlock()
		return readProcs(filepath.Join(dir, "cgroup.procs"))
	}
	return g.walkMembers(), nil
}

// Release forgets a Persistent manager's group without killing what it
// holds, for the next manager to Open.
func (g *Group) Release() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.closeFiles()
	g.mu.Unlock()
	g.m.mu.Lock()
	delete(g.m.groups, g)
	g.m.mu.Unlock()
}

// Dir is the group's cgroup directory ("" in Walk mode).
func (g *Group) Dir() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dir
}

// Close kills what the group holds and removes it.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	err := g.Kill()
	g.mu.Lock()
	g.closeFiles()
	if g.dir != "" {
		if rerr := os.Remove(g.dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	g.mu.Unlock()
	g.m.mu.Lock()
	delete(g.m.groups, g)
	g.m.mu.Unlock()
	return err
}

// closeFiles closes what a Cgroup2 group keeps open.
func (g *Group) closeFiles() {
	if g.fd >= 0 {
		syscall.Close(g.fd)
		g.fd = -1
	}
	if g.events != nil {
		g.events.Close()
		g.events = nil
	}
}
