package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/cgroup"
	"golang.org/x/sys/unix"
)

// cgroupRoot is the manager's own cgroup directory, nodemgr-PID, made
// under the cgroup this process is in; its groups are g1, g2, ... in it.
type cgroupRoot struct {
	v1   bool
	dir  string
	home string // v1: the cgroup this process's threads are in
}

// Where cgroup hierarchies are mounted and where this process is in them.
var (
	mountInfoFile  = "/proc/self/mountinfo"
	selfCgroupFile = "/proc/self/cgroup"
)

// v1Controllers are the v1 hierarchies a group may live in, best first:
// both are harmless to be in, and the freezer could stop a fork race.
var v1Controllers = []string{"pids", "freezer"}

func newCgroup2Root(persistent string) (*cgroupRoot, error) {
	mnt, err := findMount(func(m cgroup.Mount) bool { return m.V2 })
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup(cgroup.Membership.V2)
	if err != nil {
		return nil, err
	}
	r := &cgroupRoot{}
	if err := r.make(mnt.path(own), persistent); err != nil {
		return nil, err
	}
	// cgroup.kill (Linux 5.14) kills a whole group at once, with no race
	// against a fork bomb.
	if _, err := os.Stat(filepath.Join(r.dir, "cgroup.kill")); err != nil {
		os.Remove(r.dir)
		return nil, fmt.Errorf("no cgroup.kill (Linux 5.14 or later needed): %w", err)
	}
	return r, nil
}

func newCgroup1Root(persistent string) (*cgroupRoot, error) {
	var errs []error
	for _, ctrl := range v1Controllers {
		mnt, err := findMount(v1Mount(ctrl))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		own, err := ownCgroup(inV1(ctrl))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		home := mnt.path(own)
		r := &cgroupRoot{v1: true, home: home}
		if err := r.make(home, persistent); err != nil {
			errs = append(errs, err)
			continue
		}
		return r, nil
	}
	return nil, errors.Join(errs...)
}

// make creates the manager's directory under parent, after clearing out
// what managers that died left there: nodemgr-PID, or nodemgr-<persistent>
// for a Persistent manager (kept, not swept).
func (r *cgroupRoot) make(parent, persistent string) error {
	sweep(parent, r.v1)
	r.dir = filepath.Join(parent, "nodemgr-"+strconv.Itoa(os.Getpid()))
	if persistent != "" {
		r.dir = filepath.Join(parent, "nodemgr-"+persistent)
	}
	if err := os.Mkdir(r.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make a cgroup: %w", err)
	}
	return nil
}

// sweep kills the processes left in the groups of managers whose process
// is gone, and removes their directories.
func sweep(parent string, v1 bool) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		pidText, ok := strings.CutPrefix(e.Name(), "nodemgr-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || !e.IsDir() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		groups, _ := os.ReadDir(dir)
		stale := &cgroupRoot{v1: v1, dir: dir}
		for _, g := range groups {
			if g.IsDir() {
				gdir := filepath.Join(dir, g.Name())
				if v1 {
					stale.kill1(gdir)
				} else {
					stale.kill2(gdir, nil)
				}
				os.Remove(gdir)
			}
		}
		os.Remove(dir)
	}
}

func (r *cgroupRoot) newGroup(g *Group, n, gen int) error {
	dir := filepath.Join(r.dir, "g"+strconv.Itoa(n))
	if gen > 0 {
		dir += "." + strconv.Itoa(gen)
	}
	return r.openGroup(g, filepath.Base(dir))
}

// openGroup makes (or finds) the group's directory name and, in v2, opens
// it.
func (r *cgroupRoot) openGroup(g *Group, name string) error {
	g.dir = filepath.Join(r.dir, name)
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make a cgroup: %w", err)
	}
	if r.v1 {
		return nil
	}
	fd, err := syscall.Open(g.dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(g.dir)
		return &os.PathError{Op: "open", Path: g.dir, Err: err}
	}
	g.fd = fd
	if g.events, err = os.Open(filepath.Join(g.dir, "cgroup.events")); err != nil {
		g.closeFiles()
		os.Remove(g.dir)
		return err
	}
	return nil
}

// forkInside forks with the calling thread in the v1 cgroup dir, so that
// the child is born there: moving it in after the fork would race with
// the forks of its own. A goroutine of its own locks the thread, so that
// if the thread cannot be moved back, it is thrown away: a goroutine that
// exits while locked to its thread takes the thread with it.
func (r *cgroupRoot) forkInside(dir string, attr *syscall.ProcAttr, fork Forker) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		tid := []byte(strconv.Itoa(unix.Gettid()))
		if err := writeFile(filepath.Join(dir, "tasks"), tid); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("join the task's cgroup: %w", err)}
			return
		}
		pid, err := fork(attr)
		if writeFile(filepath.Join(r.home, "tasks"), tid) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{pid, err}
	}()
	res := <-done
	return res.pid, res.err
}

// kill2 kills a v2 group with cgroup.kill and waits until it is empty; it
// says whether it had anything to kill. events, if not nil, is the
// group's cgroup.events, open: one pread tells an empty group, the usual
// case, at a third of the cost of opening it.
func (r *cgroupRoot) kill2(dir string, events *os.File) (bool, error) {
	if events != nil {
		var buf [128]byte
		n, err := events.ReadAt(buf[:], 0)
		if n > 0 && bytes.Contains(buf[:n], []byte("populated 0\n")) {
			return false, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
	}
	return r.killPopulated2(dir)
}

func (r *cgroupRoot) killPopulated2(dir string) (bool, error) {
	events := filepath.Join(dir, "cgroup.events")
	if populated, err := isPopulated(events); err != nil || !populated {
		return false, err
	}
	if err := writeFile(filepath.Join(dir, "cgroup.kill"), []byte("1")); err != nil {
		return true, fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	return true, waitUntil(func() (bool, error) {
		populated, err := isPopulated(events)
		return !populated, err
	}, "cgroup "+dir+" to empty")
}

// renew replaces a v2 group's directory with a fresh one. Some kernels
// (6.18 here) SIGKILL every process cloned into a cgroup once cgroup.kill
// was written to it (clone3 compares the kill count of the forking
// process's cgroup with the target's), so a group that had to be killed
// is not used again; one that emptied by itself is, at no cost.
//
// A named group (Open) keeps its name: its directory is removed and made
// again, unless a process still runs in it, which keeps it as it is.
func (r *cgroupRoot) renew(g *Group) error {
	if g.name != "" {
		if populated, err := isPopulated(filepath.Join(g.dir, "cgroup.events")); err != nil || populated {
			return err
		}
		g.closeFiles()
		if err := os.Remove(g.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("renew cgroup %s: %w", g.dir, err)
		}
		return r.openGroup(g, g.name)
	}
	g.closeFiles()
	os.Remove(g.dir)
	g.gen++
	return r.newGroup(g, g.n, g.gen)
}

// kill1 kills the processes of a v1 group until none is left; a process
// forked meanwhile is found on the next round.
func (r *cgroupRoot) kill1(dir string) error {
	procs := filepath.Join(dir, "cgroup.procs")
	return waitUntil(func() (bool, error) {
		pids, err := readProcs(procs)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, err
	}, "cgroup "+dir+" to empty")
}

// waitUntil polls done, at growing intervals, for at most killWait.
func waitUntil(done func() (bool, error), what string) error {
	deadline := time.Now().Add(killWait)
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up waiting %v for %s", killWait, what)
		}
		time.Sleep(wait)
	}
}

// isPopulated reads a v2 cgroup.events file: whether a process is in the
// group or its descendants.
func isPopulated(events string) (bool, error) {
	b, err := os.ReadFile(events)
	if err != nil {
		return false, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return bytes.TrimSpace(v)[0] != '0', nil
		}
	}
	return false, fmt.Errorf("%s: no populated line", events)
}

// readProcs lists the processes in a cgroup.procs file, this one left out.
func readProcs(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var pids []int
	for f := range bytes.FieldsSeq(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func writeFile(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mount is a cgroup hierarchy's mount point and the hierarchy's path that
// is mounted there.
type mount struct{ point, root string }

// path is where the hierarchy's cgroup at cg is in the file system.
func (m mount) path(cg string) string {
	if m.root != "/" {
		cg = strings.TrimPrefix(cg, m.root)
	}
	return filepath.Join(m.point, cg)
}

// findMount finds the first cgroup mount that match says is the one, in
// /proc/self/mountinfo ("36 35 0:30 / /sys/fs/cgroup/unified rw - cgroup2
// cgroup2 rw,nsdelegate").
func findMount(match func(cgroup.Mount) bool) (mount, error) {
	b, err := os.ReadFile(mountInfoFile)
	if err != nil {
		return mount{}, err
	}
	mounts, err := cgroup.ParseMountInfo(b)
	if err != nil {
		return mount{}, err
	}
	if i := slices.IndexFunc(mounts, match); i >= 0 {
		return mount{point: mounts[i].Point, root: mounts[i].Root}, nil
	}
	return mount{}, errors.New("not mounted")
}

// v1Mount matches the v1 hierarchy with ctrl.
func v1Mount(ctrl string) func(cgroup.Mount) bool {
	return func(m cgroup.Mount) bool { return !m.V2 && slices.Contains(m.Options, ctrl) }
}

// ownCgroup finds this process's cgroup in the hierarchy match says is
// the one, in /proc/self/cgroup ("0::/user.slice", "8:pids:/").
func ownCgroup(match func(m cgroup.Membership) bool) (string, error) {
	b, err := os.ReadFile(selfCgroupFile)
	if err != nil {
		return "", err
	}
	for _, m := range cgroup.ParseMemberships(b) {
		if match(m) {
			return m.Path, nil
		}
	}
	return "", errors.New("this process is in no such cgroup")
}

// inV1 matches this process's place in the v1 hierarchy with ctrl.
func inV1(ctrl string) func(cgroup.Membership) bool {
	return func(m cgroup.Membership) bool { return slices.Contains(m.Controllers, ctrl) }
}

// OwnCgroupDir is where this process's cgroup is in the file system: in
// the v1 hierarchy with controller, or in the v2 hierarchy for "". A
// supervisor puts its limit groups (memory, cpu) under it.
func OwnCgroupDir(controller string) (string, error) {
	if controller == "" {
		mnt, err := findMount(func(m cgroup.Mount) bool { return m.V2 })
		if err != nil {
			return "", err
		}
		own, err := ownCgroup(cgroup.Membership.V2)
		return mnt.path(own), err
	}
	mnt, err := findMount(v1Mount(controller))
	if err != nil {
		return "", fmt.Errorf("cgroup v1 %s: %w", controller, err)
	}
	own, err := ownCgroup(inV1(controller))
	if err != nil {
		return "", fmt.Errorf("cgroup v1 %s: %w", controller, err)
	}
	return mnt.path(own), nil
}
