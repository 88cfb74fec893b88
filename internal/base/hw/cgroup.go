package hw

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/cgroup"
)

// Limits are what this process's cgroup lets it use. Each is the tightest
// limit set on its cgroup or on an ancestor, up to the root of the cgroup
// filesystem the process sees (in a container with its own cgroup
// namespace, that root is the container's cgroup). Zero means no limit.
type Limits struct {
	// CPUs is the CPU quota in CPUs: quota/period, so 1.5 lets the cgroup
	// run one and a half cores' worth of time.
	CPUs float64
	// CPUSet is how many CPUs the cgroup's cpuset holds.
	CPUSet int
	// MemoryBytes is the memory limit.
	MemoryBytes uint64
	// MemoryFreeBytes is what the memory limits leave free now, when
	// MemoryBytes is set: at each level with a limit, the limit less that
	// level's working set; the least of them. The working set is usage
	// less inactive page cache, which the kernel reclaims before it
	// refuses memory (kubelet counts it the same way).
	MemoryFreeBytes uint64
}

// Cores is how many cores the limits let this process use at once: the
// quota rounded up, or the cpuset if that is smaller. It is 0 when
// neither limits CPUs.
func (l Limits) Cores() int {
	n := 0
	if l.CPUs > 0 {
		n = max(int(math.Ceil(l.CPUs)), 1)
	}
	if l.CPUSet > 0 && (n == 0 || l.CPUSet < n) {
		n = l.CPUSet
	}
	return n
}

// apply narrows hw, measured on the host, to what l allows.
func (l Limits) apply(hw *api.Hardware) {
	if n := l.Cores(); n > 0 && n < hw.Cores {
		hw.Cores = n
	}
	if l.CPUs > 0 && l.CPUs < float64(hw.Cores) {
		hw.CPULimit = l.CPUs
	}
	// An unmeasured MemTotal stays 0: a limit alone does not prove the
	// machine has that much.
	if l.MemoryBytes > 0 && l.MemoryBytes < hw.MemoryBytes {
		hw.MemoryBytes = l.MemoryBytes
	}
}

// ReadLimits reads the limits of this process's cgroup (cgroup v1, v2 or
// both). It returns errors.ErrUnsupported on systems other than Linux.
func ReadLimits() (Limits, error) { return cgroupLimits() }

// noLimit is where a memory value stops meaning a limit. cgroup v1 writes
// "none" as LONG_MAX rounded down to a page, which varies with the page
// size (9223372036854771712 with 4 KiB pages); no machine has 4 EiB.
const noLimit = 1 << 62

// readLimits reads this process's cgroup limits from fsys, a view of the
// filesystem root: proc/self/cgroup says which cgroup the process is in,
// proc/self/mountinfo where each hierarchy is mounted. A system without
// cgroups, or with none mounted, has no limits.
func readLimits(fsys fs.FS) (Limits, error) {
	var l Limits
	b, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("read cgroup: %w", err)
	}
	groups := cgroup.ParseMemberships(b)
	b, err = fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return l, fmt.Errorf("read cgroup mounts: %w", err)
	}
	mounts, err := cgroup.ParseMountInfo(b)
	if err != nil {
		return l, err
	}
	r := cgroupReader{fsys: fsys}
	if h, ok := locate(groups, mounts, "cpu"); ok {
		l.CPUs = r.cpuQuota(h)
	}
	if h, ok := locate(groups, mounts, "cpuset"); ok {
		l.CPUSet = r.cpuSet(h)
	}
	if h, ok := locate(groups, mounts, "memory"); ok {
		l.MemoryBytes, l.MemoryFreeBytes = r.memory(h)
	}
	return l, r.err
}

// hierarchy is where one controller's files for this process are: dir is
// its cgroup and top the highest cgroup visible (the mount point), both
// relative to the filesystem root.
type hierarchy struct {
	v1       bool
	dir, top string
}

// levels lists dir and its ancestors up to top, nearest first.
func (h hierarchy) levels() []string {
	var ds []string
	for d := h.dir; ; d = path.Dir(d) {
		ds = append(ds, d)
		if d == h.top || d == "." {
			return ds
		}
	}
}

// locate finds the hierarchy that holds controller: a cgroup v1 hierarchy
// that names it, else the unified v2 one (on a hybrid system the v2
// hierarchy holds no controllers, and its files are simply not there). A
// cgroup outside every mount of its hierarchy cannot be read.
func locate(groups []cgroup.Membership, mounts []cgroup.Mount, controller string) (hierarchy, bool) {
	i := slices.IndexFunc(groups, func(m cgroup.Membership) bool { return m.ID != "0" && slices.Contains(m.Controllers, controller) })
	v1 := i >= 0
	if !v1 {
		i = slices.IndexFunc(groups, cgroup.Membership.V2)
		if i < 0 {
			return hierarchy{}, false
		}
	}
	p := groups[i].Path
	// A cgroup namespace shows a cgroup outside it as "/../..".
	if !path.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
		return hierarchy{}, false
	}
	var best *cgroup.Mount
	rel := ""
	for _, m := range mounts {
		if m.V2 == v1 || v1 && !slices.Contains(m.Options, controller) {
			continue
		}
		// Of the mounts that show the cgroup, the one with the highest
		// root shows the most ancestors, and so their limits.
		if r, ok := under(p, m.Root); ok && (best == nil || len(m.Root) < len(best.Root)) {
			best, rel = &m, r
		}
	}
	if best == nil {
		return hierarchy{}, false
	}
	top := fsPath(best.Point)
	return hierarchy{v1: v1, dir: path.Join(top, rel), top: top}, true
}

// under returns p relative to root, if p is root or below it.
func under(p, root string) (string, bool) {
	switch {
	case root == "/":
		return strings.TrimPrefix(p, "/"), true
	case p == root:
		return "", true
	}
	rest, ok := strings.CutPrefix(p, root+"/")
	return rest, ok
}

// fsPath turns an absolute path into an fs.FS name.
func fsPath(p string) string {
	if p = strings.TrimLeft(path.Clean(p), "/"); p == "" {
		return "."
	}
	return p
}

// cgroupReader reads cgroup files from fsys, keeping the first error.
type cgroupReader struct {
	fsys fs.FS
	err  error
}

// read returns the trimmed content of dir/name, and false if there is no
// such file (a level without the controller, or a missing limit).
func (r *cgroupReader) read(dir, name string) (string, bool) {
	if r.err != nil {
		return "", false
	}
	b, err := fs.ReadFile(r.fsys, path.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		r.err = fmt.Errorf("read cgroup: %w", err)
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func (r *cgroupReader) fail(dir, name, s string) {
	if r.err == nil {
		r.err = fmt.Errorf("parse cgroup file /%s: bad value %q", path.Join(dir, name), s)
	}
}

// uint reads a number from dir/name. "max" (v2's "no limit") reads as
// false, as does a missing file.
func (r *cgroupReader) uint(dir, name string) (uint64, bool) {
	s, ok := r.read(dir, name)
	if !ok || s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		r.fail(dir, name, s)
		return 0, false
	}
	return n, true
}

// cpuQuota returns the tightest CPU quota, in CPUs; 0 if there is none.
func (r *cgroupReader) cpuQuota(h hierarchy) float64 {
	least := 0.0
	for _, d := range h.levels() {
		var quota, period int64
		if h.v1 {
			s, ok := r.read(d, "cpu.cfs_quota_us")
			if !ok {
				continue
			}
			q, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				r.fail(d, "cpu.cfs_quota_us", s)
				return 0
			}
			p, ok := r.uint(d, "cpu.cfs_period_us")
			if !ok {
				continue
			}
			quota, period = q, int64(min(p, math.MaxInt64))
		} else {
			s, ok := r.read(d, "cpu.max")
			if !ok {
				continue
			}
			f := strings.Fields(s) // "$MAX $PERIOD", $MAX being "max" for none
			if len(f) != 2 {
				r.fail(d, "cpu.max", s)
				return 0
			}
			if f[0] == "max" {
				continue
			}
			q, err1 := strconv.ParseInt(f[0], 10, 64)
			p, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				r.fail(d, "cpu.max", s)
				return 0
			}
			quota, period = q, p
		}
		if quota <= 0 || period <= 0 { // v1 writes -1 for none
			continue
		}
		if cpus := float64(quota) / float64(period); least == 0 || cpus < least {
			least = cpus
		}
	}
	return least
}

// cpuSet counts the CPUs of the nearest cpuset: a cgroup without the
// controller runs on its parent's, and the kernel keeps a child's within
// its parent's.
func (r *cgroupReader) cpuSet(h hierarchy) int {
	names := []string{"cpuset.cpus.effective", "cpuset.cpus"}
	if h.v1 {
		names = []string{"cpuset.effective_cpus", "cpuset.cpus"}
	}
	for _, d := range h.levels() {
		for _, name := range names {
			s, ok := r.read(d, name)
			if !ok || s == "" {
				continue
			}
			n, err := countCPUList(s)
			if err != nil {
				r.fail(d, name, s)
				return 0
			}
			return n
		}
	}
	return 0
}

// countCPUList counts the CPUs in a kernel CPU list such as "0-3,8,10-11".
func countCPUList(s string) (int, error) {
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("bad cpu list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// memory returns the tightest memory limit and what the limits leave free
// now (see Limits).
func (r *cgroupReader) memory(h hierarchy) (limit, free uint64) {
	limitFile, usageFile, inactiveKey := "memory.max", "memory.current", "inactive_file"
	if h.v1 {
		limitFile, usageFile, inactiveKey = "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"
	}
	tighten := func(lim uint64, dir string) {
		if lim == 0 || lim >= noLimit {
			return
		}
		used, _ := r.uint(dir, usageFile) // none to read: all of lim is free
		stat, _ := r.read(dir, "memory.stat")
		if inactive, ok := statValue(stat, inactiveKey); ok {
			used -= min(inactive, used)
		}
		left := lim - min(used, lim)
		if limit == 0 {
			limit, free = lim, left
		}
		limit, free = min(limit, lim), min(free, left)
	}
	for _, d := range h.levels() {
		if lim, ok := r.uint(d, limitFile); ok {
			tighten(lim, d)
		}
	}
	// v1 also tells the tightest limit above the levels this process
	// can see; only its own usage is there to set against it.
	if h.v1 {
		stat, _ := r.read(h.dir, "memory.stat")
		if lim, ok := statValue(stat, "hierarchical_memory_limit"); ok {
			tighten(lim, h.dir)
		}
	}
	return limit, free
}

// statValue returns key's value in memory.stat content.
func statValue(stat, key string) (uint64, bool) {
	for line := range strings.Lines(stat) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
