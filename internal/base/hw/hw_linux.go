package hw

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

func cpuModel() (string, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return parseCPUInfo(f)
}

func cpuCount() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return set.Count(), nil
}

func cgroupLimits() (Limits, error) { return readLimits(os.DirFS("/")) }

func memoryBytes() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseMemInfo(f)
}

func diskBytes(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	// Linux counts f_blocks in fragment-size units; old kernels leave
	// f_frsize zero, and then f_bsize is the unit.
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return st.Blocks * uint64(unit), nil
}
