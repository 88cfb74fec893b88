package service

import (
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

func TestRestartDelay(t *testing.T) {
	spec := api.ServiceSpec{Restart: api.RestartPolicy{Delay: api.Duration(time.Second)}}
	for _, tc := range []struct {
		quick int
		want  time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, workload.MaxDelay}, {100, workload.MaxDelay}} {
		if got := restartDelay(spec, tc.quick); got != tc.want {
			t.Errorf("restartDelay(%d) = %v, want %v", tc.quick, got, tc.want)
		}
	}
}
