package capacity

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/hw"
)

// ReadMachineFree measures what this machine has free now, whoever uses the
// rest: memory is MemAvailable from /proc/meminfo (what can be had without
// swapping, page cache included); disk is the space available to
// unprivileged users on the filesystem holding dir; CPUs are the cores this
// process may run on minus the 1-minute load average, rounded to
// hundredths. The load average is cheap and needs no sampling window, at
// the price of lagging a minute and counting tasks blocked on I/O as busy.
// GPUs are not measured (0).
//
// In a cgroup with limits (a container), memory is no more than the limits
// leave free, and CPUs no more than the cgroup may use (see hw.Limits).
func ReadMachineFree(dir string) (api.Resources, error) {
	var r api.Resources
	limits, err := hw.ReadLimits()
	if err != nil {
		return r, err
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return r, err
	}
	avail, err := parseMemAvailable(b)
	if err != nil {
		return r, err
	}
	r.MemoryMB = int64(freeMemory(avail, limits) >> 20)

	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return r, fmt.Errorf("statfs %s: %w", dir, err)
	}
	// f_bavail counts in fragment-size units; old kernels leave f_frsize
	// zero, and then f_bsize is the unit.
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	r.DiskMB = int64(st.Bavail * uint64(unit) >> 20)

	b, err = os.ReadFile("/proc/loadavg")
	if err != nil {
		return r, err
	}
	load, err := parseLoadAvg(b)
	if err != nil {
		return r, err
	}
	// The load average is the host's, so it is set against the cores this
	// process sees; a quota (unlike a cpuset) leaves them all in sight.
	r.CPUs = idleCPUs(runtime.NumCPU(), load, limits)
	return r, nil
}
