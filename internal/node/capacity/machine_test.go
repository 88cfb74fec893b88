package capacity

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/hw"
)

func TestParseMemAvailable(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"MemTotal:       16318412 kB\nMemFree:  1 kB\nMemAvailable:   12345678 kB\n", 12345678 * 1024, false},
		{"MemTotal:       16318412 kB\n", 0, true},
		{"MemAvailable:   12 MB\n", 0, true},
		{"MemAvailable:   x kB\n", 0, true},
	} {
		got, err := parseMemAvailable([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseMemAvailable(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"0.52 0.58 0.59 1/1024 12345\n", 0.52, false},
		{"12.00 1 1 1/1 1", 12, false},
		{"", 0, true},
		{"-1 0 0", 0, true},
		{"NaN 0 0", 0, true},
	} {
		got, err := parseLoadAvg([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("parseLoadAvg(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestIdleCPUs(t *testing.T) {
	for _, tc := range []struct {
		cores  int
		load   float64
		limits hw.Limits
		want   float64
	}{
		{8, 0.52, hw.Limits{}, 7.48},
		{8, 0, hw.Limits{}, 8},
		{2, 3.5, hw.Limits{}, 0},
		{4, 1.005, hw.Limits{}, 2.99},
		{8, 0.5, hw.Limits{CPUs: 1}, 1},
		{8, 0.5, hw.Limits{CPUs: 1.0 / 3}, 0.33},
		{8, 0.5, hw.Limits{CPUs: 4, CPUSet: 2}, 2},
		{8, 7.5, hw.Limits{CPUs: 1}, 0.5},
	} {
		if got := idleCPUs(tc.cores, tc.load, tc.limits); got != tc.want {
			t.Errorf("idleCPUs(%d, %v, %+v) = %v, want %v", tc.cores, tc.load, tc.limits, got, tc.want)
		}
	}
}

func TestFreeMemory(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		avail  uint64
		limits hw.Limits
		want   uint64
	}{
		{1024 * mib, hw.Limits{}, 1024 * mib},
		{1024 * mib, hw.Limits{MemoryBytes: 96 * mib, MemoryFreeBytes: 56 * mib}, 56 * mib},
		{1024 * mib, hw.Limits{MemoryBytes: 96 * mib}, 0}, // the limit is reached
		{10 * mib, hw.Limits{MemoryBytes: 96 * mib, MemoryFreeBytes: 56 * mib}, 10 * mib},
	} {
		if got := freeMemory(tc.avail, tc.limits); got != tc.want {
			t.Errorf("freeMemory(%d, %+v) = %d, want %d", tc.avail, tc.limits, got, tc.want)
		}
	}
}

func TestReadMachineFree(t *testing.T) {
	r, err := ReadMachineFree(t.TempDir())
	if runtime.GOOS != "linux" {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("ReadMachineFree on %s = %v, want ErrUnsupported", runtime.GOOS, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("ReadMachineFree: %v", err)
	}
	if r.MemoryMB <= 0 || r.DiskMB <= 0 || r.CPUs < 0 || r.CPUs > float64(runtime.NumCPU()) || r.GPUs != 0 {
		t.Errorf("ReadMachineFree = %+v, want some memory and disk, and 0..%d CPUs", r, runtime.NumCPU())
	}
	limits, err := hw.ReadLimits()
	if err != nil {
		t.Fatalf("hw.ReadLimits: %v", err)
	}
	t.Logf("ReadMachineFree = %+v; cgroup limits %+v", r, limits)
	if limits.CPUs > 0 && r.CPUs > limits.CPUs {
		t.Errorf("ReadMachineFree CPUs = %v, more than the cgroup's quota of %v", r.CPUs, limits.CPUs)
	}
	if limits.MemoryBytes > 0 && r.MemoryMB > int64(limits.MemoryBytes>>20) {
		t.Errorf("ReadMachineFree MemoryMB = %d, more than the cgroup's limit of %d bytes", r.MemoryMB, limits.MemoryBytes)
	}
	if _, err := ReadMachineFree("/no/such/dir"); err == nil {
		t.Errorf("ReadMachineFree(missing dir) succeeded")
	}
}

func TestBenchmark(t *testing.T) {
	score, err := Benchmark(context.Background(), 50*time.Millisecond)
	if err != nil || score <= 0 {
		t.Fatalf("Benchmark(50ms) = %v, %v; want a positive score", score, err)
	}
	t.Logf("cpu score: %.1f MiB/s of SHA-256 on one core", score)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Benchmark(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Benchmark(cancelled) = %v, want context.Canceled", err)
	}
}
