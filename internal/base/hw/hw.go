// Package hw measures the machine an agent runs on: host and kernel, CPU,
// memory, the disk under the agent's data dir, and NVIDIA GPUs. The agent
// reports the result (an api.Hardware) when it registers, so that the
// server can show and place work by what each node has.
//
// Inside a container or any cgroup with limits, CPUs and memory are what
// the cgroup allows, not what the host has: ReadLimits reads those limits
// (cgroup v1 and v2), and Detect applies them. internal/node/capacity reads
// them too, to tell how much of the limited memory is still free.
//
// It also gives the machine a stable identity (MachineID), which lets the
// server recognise a node that re-registers after a reinstall of the agent.
package hw

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// Detect measures this machine. dataDir is the agent's data dir; DiskBytes
// is the size of the filesystem that holds it. Cores and MemoryBytes are
// narrowed to this process's cgroup limits (see Limits): Cores is the
// least of the affinity mask, the cpuset and the CPU quota rounded up;
// CPULimit is the quota itself where it allows less than Cores.
//
// Detect returns all it could measure even when some probe fails; a
// non-nil error then says which probes failed, for the caller to log. In
// particular a machine without nvidia-smi simply has no GPUs, while an
// nvidia-smi that fails or hangs yields no GPUs and an error. Probes this
// platform does not implement are left at their zero values, silently.
func Detect(ctx context.Context, dataDir string) (api.Hardware, error) {
	hw := api.Hardware{
		OS:    runtime.GOOS,
		Arch:  runtime.GOARCH,
		Cores: runtime.NumCPU(),
	}
	var errs []error
	probe := func(what string, err error) {
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			errs = append(errs, fmt.Errorf("detect %s: %w", what, err))
		}
	}
	var err error

	hw.Hostname, err = os.Hostname()
	probe("hostname", err)

	hw.Kernel, err = kernelRelease()
	probe("kernel", err)

	hw.CPUModel, err = cpuModel()
	probe("cpu model", err)

	// The affinity mask is what this process may actually use (taskset,
	// cpusets); runtime.NumCPU above stands in where it is unavailable.
	if n, err := cpuCount(); err == nil && n > 0 {
		hw.Cores = n
	}

	hw.MemoryBytes, err = memoryBytes()
	probe("memory", err)

	// A container's cgroup may allow less CPU time and memory than the
	// host has; the node offers only what it may use.
	limits, err := cgroupLimits()
	probe("cgroup limits", err)
	limits.apply(&hw)

	hw.DiskBytes, err = diskBytes(dataDir)
	probe("disk", err)

	hw.GPUs, err = detectGPUs(ctx)
	probe("gpus", err)

	return hw, errors.Join(errs...)
}

// cpuModelKeys are the /proc/cpuinfo fields that name the CPU, best first:
// x86 uses "model name"; ARM boards "Model" or "Hardware"; MIPS "cpu
// model"; POWER "cpu"; RISC-V "uarch". Many arm64 servers have none.
var cpuModelKeys = []string{"model name", "Model", "Hardware", "cpu model", "cpu", "uarch"}

// parseCPUInfo returns the CPU model named in /proc/cpuinfo content, or ""
// if it names none.
func parseCPUInfo(r io.Reader) (string, error) {
	found := make(map[string]string)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, seen := found[k]; !seen && v != "" {
			found[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read cpuinfo: %w", err)
	}
	for _, k := range cpuModelKeys {
		if v, ok := found[k]; ok {
			return v, nil
		}
	}
	return "", nil
}

// parseMemInfo returns MemTotal from /proc/meminfo content, in bytes.
func parseMemInfo(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) == 0 || len(f) > 2 {
			return 0, fmt.Errorf("parse meminfo: bad MemTotal line %q", sc.Text())
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse meminfo: MemTotal: %w", err)
		}
		if len(f) == 1 {
			return n, nil
		}
		if f[1] != "kB" { // the kernel's "kB" is KiB
			return 0, fmt.Errorf("parse meminfo: MemTotal: unknown unit %q", f[1])
		}
		return n * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read meminfo: %w", err)
	}
	return 0, errors.New("parse meminfo: no MemTotal")
}
