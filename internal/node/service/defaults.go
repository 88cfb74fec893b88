package service

import (
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

// The getters below apply the defaults of a spec's zero values.

func policyOf(s api.ServiceSpec) string {
	if s.Restart.Policy == "" {
		return api.RestartAlways
	}
	return s.Restart.Policy
}

func minPeriodOf(s api.ServiceSpec) time.Duration {
	return orDefault(time.Duration(s.Restart.MinPeriod), workload.DefaultMinPeriod)
}

func maxRestartsOf(s api.ServiceSpec) int {
	if s.Restart.MaxRestarts == 0 {
		return workload.DefaultMaxRestarts
	}
	return s.Restart.MaxRestarts
}

// restartDelay is Delay doubled for each quick death after the first, up
// to workload.MaxDelay.
func restartDelay(s api.ServiceSpec, quickDeaths int) time.Duration {
	d := orDefault(time.Duration(s.Restart.Delay), workload.DefaultDelay)
	for i := 1; i < quickDeaths && d < workload.MaxDelay; i++ {
		d *= 2
	}
	return min(d, workload.MaxDelay)
}

func stopGraceOf(s api.ServiceSpec) time.Duration {
	return orDefault(time.Duration(s.StopGrace), workload.DefaultStopGrace)
}

func drainTimeoutOf(s api.ServiceSpec) time.Duration {
	return orDefault(time.Duration(s.Drain.Timeout), workload.DefaultDrainTime)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
