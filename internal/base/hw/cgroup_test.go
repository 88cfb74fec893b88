package hw

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/nodemgr/nodemgr/api"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// TestReadLimits reads the cgroup trees under testdata/cgroup, each a
// filesystem root as a process in that situation sees it, and applies
// their limits to a host of hostCores cores and 16 GiB.
func TestReadLimits(t *testing.T) {
	tests := []struct {
		root      string
		hostCores int
		want      Limits
		// What Detect reports with those limits.
		cores    int
		cpuLimit float64
		memory   uint64
	}{
		{
			root:      "v2-docker", // docker run --cpus 1 --memory 96m
			hostCores: 2,
			want:      Limits{CPUs: 1, CPUSet: 2, MemoryBytes: 96 * mib, MemoryFreeBytes: (96 - 40) * mib},
			cores:     1, memory: 96 * mib,
		},
		{
			root:      "v2-max",
			hostCores: 4,
			want:      Limits{CPUSet: 4},
			cores:     4, memory: 16 * gib,
		},
		{
			root:      "v2-fractional", // cpu.max 150000 100000
			hostCores: 4,
			want:      Limits{CPUs: 1.5, CPUSet: 4},
			cores:     2, cpuLimit: 1.5, memory: 16 * gib,
		},
		{
			root:      "v2-cpuset",
			hostCores: 4,
			want:      Limits{CPUSet: 1},
			cores:     1, memory: 16 * gib,
		},
		{
			root:      "v2-parent", // the parent's cpu.max and memory.max are tighter
			hostCores: 4,
			want:      Limits{CPUs: 0.5, CPUSet: 4, MemoryBytes: 64 * mib, MemoryFreeBytes: (64 - 36) * mib},
			cores:     1, cpuLimit: 0.5, memory: 64 * mib,
		},
		{
			root:      "v1-docker", // docker run --cpus 2 --memory 512m
			hostCores: 8,
			want:      Limits{CPUs: 2, CPUSet: 8, MemoryBytes: 512 * mib, MemoryFreeBytes: (512 - 100) * mib},
			cores:     2, memory: 512 * mib,
		},
		{
			root:      "v1-unlimited", // quota -1, limit 9223372036854771712
			hostCores: 8,
			want:      Limits{},
			cores:     8, memory: 16 * gib,
		},
		{
			root:      "v1-hierarchical", // a limit above the visible cgroups
			hostCores: 8,
			want:      Limits{MemoryBytes: 256 * mib, MemoryFreeBytes: (256 - 96) * mib},
			cores:     8, memory: 256 * mib,
		},
		{
			root:      "hybrid", // v1 controllers win over the empty v2 tree
			hostCores: 8,
			want:      Limits{CPUs: 3, CPUSet: 6, MemoryBytes: 2 * gib, MemoryFreeBytes: 1536 * mib},
			cores:     3, memory: 2 * gib,
		},
		{root: "outside-namespace", hostCores: 2, cores: 2, memory: 16 * gib},
		{root: "no-mounts", hostCores: 2, cores: 2, memory: 16 * gib},
		{root: "no-cgroups", hostCores: 2, cores: 2, memory: 16 * gib},
	}
	for _, tc := range tests {
		t.Run(tc.root, func(t *testing.T) {
			root := filepath.Join("testdata", "cgroup", tc.root)
			got, err := readLimits(os.DirFS(root))
			if err != nil {
				t.Fatalf("readLimits(%s) = %v", root, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("readLimits(%s) mismatch (-want +got):\n%s", root, diff)
			}
			hw := api.Hardware{Cores: tc.hostCores, MemoryBytes: 16 * gib}
			got.apply(&hw)
			want := api.Hardware{Cores: tc.cores, CPULimit: tc.cpuLimit, MemoryBytes: tc.memory}
			if diff := cmp.Diff(want, hw); diff != "" {
				t.Errorf("%+v.apply(%d cores, 16 GiB) mismatch (-want +got):\n%s", got, tc.hostCores, diff)
			}
		})
	}
}

func TestReadLimitsErrors(t *testing.T) {
	v2 := func(file, content string) fstest.MapFS {
		return fstest.MapFS{
			"proc/self/cgroup":      {Data: []byte("0::/\n")},
			"proc/self/mountinfo":   {Data: []byte("30 20 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
			"sys/fs/cgroup/" + file: {Data: []byte(content)},
		}
	}
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		wantErr string
	}{
		{"cpu.max one field", v2("cpu.max", "100000\n"), `cpu.max: bad value "100000"`},
		{"cpu.max not a number", v2("cpu.max", "lots 100000\n"), `cpu.max: bad value "lots 100000"`},
		{"memory.max with unit", v2("memory.max", "96m\n"), `memory.max: bad value "96m"`},
		{"bad cpuset", v2("cpuset.cpus.effective", "3-1\n"), `cpuset.cpus.effective: bad value "3-1"`},
		{
			"bad mountinfo",
			fstest.MapFS{
				"proc/self/cgroup":    {Data: []byte("0::/\n")},
				"proc/self/mountinfo": {Data: []byte("30 20 0:30 / /sys/fs/cgroup\n")},
			},
			"parse mountinfo: bad line",
		},
		{
			"no mountinfo",
			fstest.MapFS{"proc/self/cgroup": {Data: []byte("0::/\n")}},
			"read cgroup mounts",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readLimits(tc.fsys)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readLimits() = %+v, %v, want an error containing %q", got, err, tc.wantErr)
			}
		})
	}
}

func TestLimitsCores(t *testing.T) {
	tests := []struct {
		l    Limits
		want int
	}{
		{Limits{}, 0},
		{Limits{CPUs: 1}, 1},
		{Limits{CPUs: 1.5}, 2},
		{Limits{CPUs: 0.1}, 1},
		{Limits{CPUs: 3, CPUSet: 2}, 2},
		{Limits{CPUs: 1.5, CPUSet: 4}, 2},
		{Limits{CPUSet: 3}, 3},
	}
	for _, tc := range tests {
		if got := tc.l.Cores(); got != tc.want {
			t.Errorf("%+v.Cores() = %d, want %d", tc.l, got, tc.want)
		}
	}
}

func TestCountCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{in: "0", want: 1},
		{in: "0-3", want: 4},
		{in: "0-3,8,10-11", want: 7},
		{in: "", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "a", wantErr: true},
		{in: "0-", wantErr: true},
	}
	for _, tc := range tests {
		got, err := countCPUList(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("countCPUList(%q) = %d, %v, want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
