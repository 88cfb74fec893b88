package hw

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the probes are implemented on linux only, not %s", runtime.GOOS)
	}
	t.Setenv("PATH", t.TempDir()) // no nvidia-smi: GPUs are tested on their own

	hw, err := Detect(context.Background(), t.TempDir())
	if err != nil {
		t.Fatalf("Detect() error = %v", err)
	}
	t.Logf("Detect() = %+v", hw)
	host, _ := os.Hostname()
	if hw.Hostname != host {
		t.Errorf("Hostname = %q, want %q", hw.Hostname, host)
	}
	if hw.OS != "linux" || hw.Arch != runtime.GOARCH {
		t.Errorf("OS, Arch = %q, %q, want linux, %q", hw.OS, hw.Arch, runtime.GOARCH)
	}
	if hw.Kernel == "" {
		t.Error("Kernel is empty")
	}
	if hw.Cores <= 0 || hw.Cores > runtime.NumCPU() {
		t.Errorf("Cores = %d, want in [1, %d]", hw.Cores, runtime.NumCPU())
	}
	if hw.MemoryBytes == 0 {
		t.Error("MemoryBytes = 0")
	}
	if hw.DiskBytes == 0 {
		t.Error("DiskBytes = 0")
	}
	if hw.GPUs == nil || len(hw.GPUs) != 0 {
		t.Errorf("GPUs = %#v, want empty non-nil", hw.GPUs)
	}
}

// TestDetectExpect checks Detect against what the environment says it
// should find, for runs in a container with known limits:
//
//	docker run --cpus 1 --memory 96m -e NODEMGR_HW_EXPECT_CORES=1 \
//		-e NODEMGR_HW_EXPECT_MEMORY=100663296 IMAGE hw.test -test.run TestDetectExpect -test.v
func TestDetectExpect(t *testing.T) {
	cores, memory := os.Getenv("NODEMGR_HW_EXPECT_CORES"), os.Getenv("NODEMGR_HW_EXPECT_MEMORY")
	if cores == "" && memory == "" {
		t.Skip("set NODEMGR_HW_EXPECT_CORES and/or NODEMGR_HW_EXPECT_MEMORY to check Detect against them")
	}
	limits, err := ReadLimits()
	t.Logf("ReadLimits() = %+v, %v", limits, err)
	hw, err := Detect(context.Background(), t.TempDir())
	t.Logf("Detect() = %+v, %v", hw, err)
	if cores != "" && strconv.Itoa(hw.Cores) != cores {
		t.Errorf("Detect().Cores = %d, want %s", hw.Cores, cores)
	}
	if memory != "" && strconv.FormatUint(hw.MemoryBytes, 10) != memory {
		t.Errorf("Detect().MemoryBytes = %d, want %s", hw.MemoryBytes, memory)
	}
}

// TestDetectPartial checks that one failing probe leaves the rest measured.
func TestDetectPartial(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the probes are implemented on linux only, not %s", runtime.GOOS)
	}
	t.Setenv("PATH", t.TempDir())
	hw, err := Detect(context.Background(), "/nonexistent/data/dir")
	if err == nil || !strings.Contains(err.Error(), "detect disk: statfs /nonexistent/data/dir") {
		t.Errorf("Detect(missing dir) error = %v, want a disk error", err)
	}
	if hw.DiskBytes != 0 || hw.MemoryBytes == 0 || hw.Cores == 0 {
		t.Errorf("Detect(missing dir) = %+v, want all but disk", hw)
	}
}

func TestParseCPUInfo(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "x86",
			in:   "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n",
			want: "Intel(R) Xeon(R) Platinum 8480+",
		},
		{
			name: "raspberry pi",
			in:   "processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\n\nHardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n",
			want: "Raspberry Pi 4 Model B Rev 1.1",
		},
		{
			name: "power",
			in:   "processor\t: 0\ncpu\t\t: POWER9 (raw), altivec supported\nclock\t\t: 2300.000000MHz\n",
			want: "POWER9 (raw), altivec supported",
		},
		{
			name: "arm64 server names nothing",
			in:   "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n",
			want: "",
		},
		{
			name: "blank value skipped",
			in:   "model name\t:\nmodel name\t: AMD EPYC 9654\n",
			want: "AMD EPYC 9654",
		},
		{name: "empty", in: "", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPUInfo(strings.NewReader(tc.in))
			if err != nil || got != tc.want {
				t.Errorf("parseCPUInfo(%q) = %q, %v, want %q, nil", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseMemInfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{name: "typical", in: "MemTotal:       16318712 kB\nMemFree:         1234567 kB\n", want: 16318712 * 1024},
		{name: "not first", in: "Foo: 1 kB\nMemTotal: 2048 kB\n", want: 2048 * 1024},
		{name: "no unit", in: "MemTotal: 4096\n", want: 4096},
		{name: "missing", in: "MemFree: 1 kB\n", wantErr: true},
		{name: "bad number", in: "MemTotal: lots kB\n", wantErr: true},
		{name: "bad unit", in: "MemTotal: 1 MB\n", wantErr: true},
		{name: "empty value", in: "MemTotal:\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemInfo(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseMemInfo(%q) = %d, %v, want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
