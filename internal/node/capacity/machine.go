package capacity

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/nodemgr/nodemgr/internal/base/hw"
)

// parseMemAvailable returns MemAvailable from /proc/meminfo content, in
// bytes.
func parseMemAvailable(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" { // the kernel's "kB" is KiB
			return 0, fmt.Errorf("parse meminfo: bad MemAvailable line %q", sc.Text())
		}
		n, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse meminfo: MemAvailable: %w", err)
		}
		return n * 1024, nil
	}
	// MemAvailable appeared in Linux 3.14; older kernels are not supported.
	return 0, errors.New("parse meminfo: no MemAvailable (Linux 3.14 or later is needed)")
}

// parseLoadAvg returns the 1-minute load average from /proc/loadavg content.
func parseLoadAvg(b []byte) (float64, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, errors.New("parse loadavg: empty")
	}
	load, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || load < 0 || math.IsInf(load, 0) || math.IsNaN(load) {
		return 0, fmt.Errorf("parse loadavg: bad 1-minute load %q", f[0])
	}
	return load, nil
}

// freeMemory is what both MemAvailable and the cgroup's memory limits
// leave free.
func freeMemory(avail uint64, l hw.Limits) uint64 {
	if l.MemoryBytes > 0 {
		return min(avail, l.MemoryFreeBytes)
	}
	return avail
}

// idleCPUs estimates the idle cores: cores minus load, no more than the
// cgroup limits allow, rounded down to hundredths, never negative.
func idleCPUs(cores int, load float64, l hw.Limits) float64 {
	idle := float64(cores) - load
	if l.CPUs > 0 {
		idle = min(idle, l.CPUs)
	}
	if l.CPUSet > 0 {
		idle = min(idle, float64(l.CPUSet))
	}
	return max(math.Floor(idle*100)/100, 0)
}
