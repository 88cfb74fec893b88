package service

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/node/proctree"
	"github.com/nodemgr/nodemgr/internal/node/runas"
	"golang.org/x/sys/unix"
)

// A service's limits (api.ServiceLimits) are enforced with cgroups: in its
// process tree group when that is a cgroup v2 group with the memory and cpu
// controllers (memory.max, memory.swap.max, cpu.max), else in a group of
// its own in the v1 memory and cpu hierarchies (memory.limit_in_bytes,
// memory.memsw.limit_in_bytes, cpu.cfs_quota_us), which the forking thread
// joins so the service is born in it. A machine with neither refuses a
// spec with limits: a limit that is not enforced is worse than none.

const cfsPeriod = 100_000 // µs

// runLimits is where one run's limits live.
type runLimits struct {
	spec  api.ServiceLimits
	v2    bool     // in the tree group's cgroup (written after the start)
	v1    []string // v1 groups the service is born in
	home  []string // the forking thread's v1 groups, to go back to
	oom   string   // the file that counts OOM kills
	base  int64    // its count before the run
	runMB int64
}

// prepareLimits makes the cgroups for a run of sv with limits l; nil
// when there are none.
func (s *Supervisor) prepareLimits(sv *svc, l *api.ServiceLimits) (*runLimits, error) {
	if l == nil || (l.MemoryMB == 0 && l.CPUs == 0) {
		return nil, nil
	}
	rl := &runLimits{spec: *l, runMB: l.MemoryMB}
	if s.procs != nil && s.procs.Mode() == proctree.Cgroup2 && v2Controllers(s.procs.Dir()) {
		rl.v2 = true
		return rl, nil
	}
	var errs []error
	for _, ctrl := range []string{"memory", "cpu"} {
		if (ctrl == "memory" && l.MemoryMB == 0) || (ctrl == "cpu" && l.CPUs == 0) {
			continue
		}
		home, err := proctree.OwnCgroupDir(ctrl)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dir := filepath.Join(home, "nodemgr-"+s.treeName, sv.coord.String())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := writeV1Limits(dir, ctrl, *l); err != nil {
			errs = append(errs, err)
			continue
		}
		if ctrl == "memory" {
			rl.oom = filepath.Join(dir, "memory.oom_control")
			rl.base = oomKills(rl.oom)
		}
		rl.v1 = append(rl.v1, dir)
		rl.home = append(rl.home, home)
	}
	if len(errs) > 0 {
		return nil, errdefs.Field("limits", "this node cannot enforce them (no cgroup v2 memory and cpu controllers for services, and cgroup v1: %v); remove limits from the spec, or run the agent as root on a machine with cgroups", errors.Join(errs...))
	}
	return rl, nil
}

// v2Controllers reports whether groups under dir get memory and cpu
// controllers, enabling them there if the parent offers them.
func v2Controllers(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil || !hasWords(string(b), "memory", "cpu") {
		return false
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil && hasWords(string(b), "memory", "cpu") {
		return true
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +cpu"), 0) == nil
}

func hasWords(s string, words ...string) bool {
	f := strings.Fields(s)
	for _, w := range words {
		found := false
		for _, x := range f {
			found = found || x == w
		}
		if !found {
			return false
		}
	}
	return true
}

func writeV1Limits(dir, ctrl string, l api.ServiceLimits) error {
	if ctrl == "memory" {
		b := strconv.FormatInt(l.MemoryMB<<20, 10)
		// memsw (memory + swap) must not be below limit_in_bytes:
		// raise it last when lowering, so set both in the safe order.
		os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte("-1"), 0)
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(b), 0); err != nil {
			return fmt.Errorf("memory limit: %w", err)
		}
		os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(b), 0) // no swap to flee to, where swap accounting is on
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cfsPeriod)), 0); err != nil {
		return fmt.Errorf("cpu limit: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota(l.CPUs), 10)), 0); err != nil {
		return fmt.Errorf("cpu limit: %w", err)
	}
	return nil
}

func quota(cpus float64) int64 { return max(1000, int64(cpus*cfsPeriod)) }

// afterStart writes v2 limits into the run's tree group, now that it is
// made afresh and holds the service (it is the first thing the service
// meets: the process is a few instructions into its exec).
func (s *Supervisor) afterStart(sv *svc, rl *runLimits) error {
	if rl == nil || !rl.v2 {
		return nil
	}
	g := s.group(sv)
	if g == nil {
		return errors.New("no process tree group")
	}
	dir := g.Dir()
	if rl.spec.MemoryMB > 0 {
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(rl.spec.MemoryMB<<20, 10)), 0); err != nil {
			return fmt.Errorf("memory limit: %w", err)
		}
		os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
		rl.oom = filepath.Join(dir, "memory.events")
		rl.base = oomKills(rl.oom)
	}
	if rl.spec.CPUs > 0 {
		v := fmt.Sprintf("%d %d", quota(rl.spec.CPUs), cfsPeriod)
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(v), 0); err != nil {
			return fmt.Errorf("cpu limit: %w", err)
		}
	}
	return nil
}

// oomKills reads the oom_kill count of a v2 memory.events or a v1
// memory.oom_control file; 0 if there is none.
func oomKills(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}

// oomKilled reports whether the OOM killer killed in the run's group.
func (rl *runLimits) oomKilled() bool {
	return rl != nil && rl.oom != "" && oomKills(rl.oom) > rl.base
}

// forkIn runs start with the calling thread in the run's v1 groups, so
// the process it forks is born there; a thread that cannot go back home is
// thrown away with its locked goroutine's end.
func forkIn(rl *runLimits, start func() error) error {
	if rl == nil || len(rl.v1) == 0 {
		return start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := []byte(strconv.Itoa(unix.Gettid()))
		for _, dir := range rl.v1 {
			if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
				done <- fmt.Errorf("join the service's cgroup %s: %w", dir, err)
				return // the thread goes with the goroutine
			}
		}
		err := start()
		back := true
		for _, home := range rl.home {
			back = back && os.WriteFile(filepath.Join(home, "tasks"), tid, 0) == nil
		}
		if back {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// credential resolves a spec's user to run the service as, for a
// supervisor with no Users policy: nil for none. A user the node lacks is
// a field error.
func credential(name string) (*syscall.Credential, error) {
	if name == "" {
		return nil, nil
	}
	u, err := runas.Lookup(name)
	if err != nil {
		return nil, errdefs.Field("user", "%q is not a user on this node (%v); create it first or choose another", name, err)
	}
	return u.Credential(), nil
}

// giveRuntimeDir hands a service's runtime dir, its logs dir and the files
// its spec put in to the user it runs as, so it can write there and only
// there. Inside the dir, through an os.Root: the user may have left links.
func giveRuntimeDir(runtimeDir string, spec api.ServiceSpec, c *syscall.Credential) error {
	if c == nil {
		return nil
	}
	if err := os.Lchown(runtimeDir, int(c.Uid), int(c.Gid)); err != nil {
		return fmt.Errorf("give the runtime dir to user %d: %w", c.Uid, err)
	}
	root, err := openRuntime(runtimeDir)
	if err != nil {
		return err
	}
	defer root.Close()
	paths := []string{"logs", logName}
	for _, f := range spec.Files {
		paths = append(paths, filepath.Clean(f.Path))
	}
	for _, p := range paths {
		if err := root.Lchown(p, int(c.Uid), int(c.Gid)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("give the runtime dir to user %d: %w", c.Uid, err)
		}
	}
	return nil
}

// setCredential makes cmd run as c.
func setCredential(cmd *exec.Cmd, c *syscall.Credential) {
	if c != nil {
		cmd.SysProcAttr.Credential = c
	}
}

// removeLimits removes a forgotten service's v1 limit groups (its v2 ones
// are its tree group, which Remove closes).
func (s *Supervisor) removeLimits(c workload.Coordinate) {
	for _, ctrl := range []string{"memory", "cpu"} {
		if home, err := proctree.OwnCgroupDir(ctrl); err == nil {
			os.Remove(filepath.Join(home, "nodemgr-"+s.treeName, c.String()))
		}
	}
}
