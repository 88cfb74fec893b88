package capacity

import (
	"math"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/api"
)

// amount is api.Resources in integers, so that the books add up exactly:
// float CPUs would drift (0.1 + 0.2 > 0.3) and refuse what fits.
type amount struct {
	milliCPU int64
	memMB    int64
	diskMB   int64
	gpus     int64
}

// toAmount converts r, rounding CPUs to thousandths. r is valid (see
// checkResources).
func toAmount(r api.Resources) amount {
	return amount{
		milliCPU: int64(math.Round(r.CPUs * 1000)),
		memMB:    r.MemoryMB,
		diskMB:   r.DiskMB,
		gpus:     int64(r.GPUs),
	}
}

func (a amount) resources() api.Resources {
	return api.Resources{
		CPUs:     float64(a.milliCPU) / 1000,
		MemoryMB: a.memMB,
		DiskMB:   a.diskMB,
		GPUs:     int(a.gpus),
	}
}

func (a amount) add(b amount) amount {
	return amount{a.milliCPU + b.milliCPU, a.memMB + b.memMB, a.diskMB + b.diskMB, a.gpus + b.gpus}
}

func (a amount) sub(b amount) amount {
	return amount{a.milliCPU - b.milliCPU, a.memMB - b.memMB, a.diskMB - b.diskMB, a.gpus - b.gpus}
}

// atLeastZero clamps each dimension at zero: books that were onboarded with
// a larger share, or loaded from an edited file, never show negative free.
func (a amount) atLeastZero() amount {
	return amount{max(a.milliCPU, 0), max(a.memMB, 0), max(a.diskMB, 0), max(a.gpus, 0)}
}

// shortBy returns how much of want a lacks, per dimension.
func (a amount) shortBy(want amount) amount { return want.sub(a).atLeastZero() }

func (a amount) isZero() bool { return a == amount{} }

// dims selects the dimensions a message talks about.
type dims uint8

const (
	dimCPU dims = 1 << iota
	dimMem
	dimDisk
	dimGPU
	dimAll = dimCPU | dimMem | dimDisk | dimGPU
)

// nonZero returns the dimensions of a that are not zero.
func (a amount) nonZero() dims {
	var d dims
	if a.milliCPU != 0 {
		d |= dimCPU
	}
	if a.memMB != 0 {
		d |= dimMem
	}
	if a.diskMB != 0 {
		d |= dimDisk
	}
	if a.gpus != 0 {
		d |= dimGPU
	}
	return d
}

// format writes the dimensions d of a for people: "1.5 CPUs, 4096 MB memory".
func (a amount) format(d dims) string {
	var parts []string
	if d&dimCPU != 0 {
		parts = append(parts, plural(strconv.FormatFloat(float64(a.milliCPU)/1000, 'f', -1, 64), a.milliCPU == 1000, "CPU"))
	}
	if d&dimMem != 0 {
		parts = append(parts, strconv.FormatInt(a.memMB, 10)+" MB memory")
	}
	if d&dimDisk != 0 {
		parts = append(parts, strconv.FormatInt(a.diskMB, 10)+" MB disk")
	}
	if d&dimGPU != 0 {
		parts = append(parts, plural(strconv.FormatInt(a.gpus, 10), a.gpus == 1, "GPU"))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

func plural(n string, one bool, unit string) string {
	if one {
		return n + " " + unit
	}
	return n + " " + unit + "s"
}
