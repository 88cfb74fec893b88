package container_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

func TestApplyDefaults(t *testing.T) {
	tests := []struct {
		name      string
		cpus      float64
		memoryMB  int64
		defaults  container.Defaults
		wantCPUs  float64
		wantMemMB int64
		wantField string
	}{
		{"job's own limits stand", 2, 64, container.Defaults{CPUs: 1, MemoryMB: 512}, 2, 64, ""},
		{"both from the defaults", 0, 0, container.Defaults{CPUs: 1, MemoryMB: 512}, 1, 512, ""},
		{"memory from the defaults", 0.25, 0, container.Defaults{CPUs: 1, MemoryMB: 512}, 0.25, 512, ""},
		{"no cpus and no default", 0, 64, container.Defaults{MemoryMB: 512}, 0, 0, "cpus"},
		{"no memory and no default", 1, 0, container.Defaults{CPUs: 1}, 0, 0, "memory_mb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := container.ApplyDefaults(api.ContainerJob{Name: "x", CPUs: tc.cpus, MemoryMB: tc.memoryMB}, tc.defaults)
			if tc.wantField != "" {
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField || !strings.Contains(err.Error(), "container_defaults."+tc.wantField) {
					t.Errorf("ApplyDefaults = %v, want a field error on %s that names container_defaults.%[2]s", err, tc.wantField)
				}
				return
			}
			if err != nil || got.CPUs != tc.wantCPUs || got.MemoryMB != tc.wantMemMB {
				t.Errorf("ApplyDefaults = %v cpus, %v MiB, %v; want %v, %v, nil", got.CPUs, got.MemoryMB, err, tc.wantCPUs, tc.wantMemMB)
			}
		})
	}
	for _, d := range []container.Defaults{{CPUs: -1}, {CPUs: 0.001}, {MemoryMB: 3}, {MemoryMB: -5}} {
		if err := d.Check("container_defaults"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "container_defaults.") {
			t.Errorf("Defaults%+v.Check = %v, want a field error under container_defaults", d, err)
		}
	}
}
