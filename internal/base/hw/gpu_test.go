package hw

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nodemgr/nodemgr/api"
)

func TestParseNvidiaSMI(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name    string
		out     string
		want    []api.GPU
		wantErr bool
	}{
		{
			name: "empty",
			out:  "",
			want: []api.GPU{},
		},
		{
			name: "one",
			out:  "0, GPU-1b2c3d4e-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, 81559, 550.54.15\n",
			want: []api.GPU{{Index: 0, UUID: "GPU-1b2c3d4e-0000-1111-2222-333344445555", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 81559 * mib, Driver: "550.54.15"}},
		},
		{
			name: "two with blank lines and CRLF",
			out:  "0, GPU-a, Tesla T4, 15360, 535.104.05\r\n\r\n1, GPU-b, Tesla T4, 15360, 535.104.05\r\n",
			want: []api.GPU{
				{Index: 0, UUID: "GPU-a", Name: "Tesla T4", MemoryBytes: 15360 * mib, Driver: "535.104.05"},
				{Index: 1, UUID: "GPU-b", Name: "Tesla T4", MemoryBytes: 15360 * mib, Driver: "535.104.05"},
			},
		},
		{
			name: "not available values",
			out:  "3, [N/A], NVIDIA GH200 480GB, [Not Supported], [N/A]\n",
			want: []api.GPU{{Index: 3, Name: "NVIDIA GH200 480GB"}},
		},
		{
			name: "quote in name",
			out:  `0, GPU-a, Weird "Edition" GPU, 1024, 1.0` + "\n",
			want: []api.GPU{{Index: 0, UUID: "GPU-a", Name: `Weird "Edition" GPU`, MemoryBytes: 1024 * mib, Driver: "1.0"}},
		},
		{name: "too few fields", out: "0, GPU-a, Tesla T4, 15360\n", wantErr: true},
		{name: "too many fields", out: "0, GPU-a, Tesla T4, 15360, 535, extra\n", wantErr: true},
		{name: "bad index", out: "x, GPU-a, Tesla T4, 15360, 535\n", wantErr: true},
		{name: "missing index", out: "[N/A], GPU-a, Tesla T4, 15360, 535\n", wantErr: true},
		{name: "negative index", out: "-1, GPU-a, Tesla T4, 15360, 535\n", wantErr: true},
		{name: "bad memory", out: "0, GPU-a, Tesla T4, 15 GiB, 535\n", wantErr: true},
		{name: "memory overflows", out: "0, GPU-a, Tesla T4, 18446744073709551615, 535\n", wantErr: true},
		{name: "error text", out: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNvidiaSMI([]byte(tc.out))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseNvidiaSMI(%q) = %v, want error", tc.out, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseNvidiaSMI(%q) = %v", tc.out, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseNvidiaSMI(%q) mismatch (-want +got):\n%s", tc.out, diff)
			}
		})
	}
}

// fakeNvidiaSMI puts a shell script named nvidia-smi first on PATH.
func fakeNvidiaSMI(t *testing.T, script string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("fake nvidia-smi is a shell script")
	}
	dir := t.TempDir()
	err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\n"+script+"\n"), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestDetectGPUs(t *testing.T) {
	tests := []struct {
		name    string
		script  string // "" means no nvidia-smi on PATH
		want    []api.GPU
		wantErr string // substring of the error; "" means none
	}{
		{
			name: "absent",
			want: []api.GPU{},
		},
		{
			name:   "works",
			script: `echo "0, GPU-a, Tesla T4, 15360, 535.104.05"`,
			want:   []api.GPU{{Index: 0, UUID: "GPU-a", Name: "Tesla T4", MemoryBytes: 15360 << 20, Driver: "535.104.05"}},
		},
		{
			name:   "no devices",
			script: "echo 'No devices were found'; exit 6",
			want:   []api.GPU{},
		},
		{
			name:    "driver broken",
			script:  "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
			want:    []api.GPU{},
			wantErr: "exit status 9: NVIDIA-SMI has failed",
		},
		{
			name:    "garbage",
			script:  "echo hello",
			want:    []api.GPU{},
			wantErr: "parse nvidia-smi output",
		},
		{
			name:    "hangs",
			script:  "exec sleep 30",
			want:    []api.GPU{},
			wantErr: "deadline exceeded",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.script == "" {
				t.Setenv("PATH", t.TempDir())
			} else {
				fakeNvidiaSMI(t, tc.script)
			}
			defer func(d time.Duration) { gpuTimeout = d }(gpuTimeout)
			gpuTimeout = 200 * time.Millisecond

			got, err := detectGPUs(context.Background())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("detectGPUs() error = %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("detectGPUs() error = %v, want one containing %q", err, tc.wantErr)
			}
			if got == nil {
				t.Errorf("detectGPUs() = nil slice, want non-nil")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("detectGPUs() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDetectGPUsCancelled(t *testing.T) {
	fakeNvidiaSMI(t, "exec sleep 30")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := detectGPUs(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("detectGPUs(cancelled) error = %v, want context.Canceled", err)
	}
}
