package capacity

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
)

// ReadMachineFree measures what this machine has free now, whoever uses the
// rest: memory is MemAvailable from /proc/meminfo (what can be had without
// swapping, page cache included); disk is the space available to
// unprivileged users on the filesystem holding dir; CPUs are cores minus
// the 1-minute load average, rounded to hundredths. The load average is
// cheap and needs no sampling window, at the price of lagging a minute and
// counting tasks blocked on I/O as busy. GPUs are not measured (0).
func ReadMachineFree(dir string, cores int) (api.Resources, error) {
	var r api.Resources
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return r, err
	}
	avail, err := parseMemAvailable(b)
	if err != nil {
		return r, err
	}
	r.MemoryMB = int64(avail >> 20)

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
	r.CPUs = idleCPUs(cores, load)
	return r, nil
}
