package api

import "testing"

func TestWorkersOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		ws   WorkerSchedule
		hw   Hardware
		want int
	}{
		{"set by the suite", WorkerSchedule{WorkerCount: 3}, Hardware{Cores: 16}, 3},
		{"one per core", WorkerSchedule{}, Hardware{Cores: 8}, 8},
		{"one per CPU of quota, rounded up", WorkerSchedule{}, Hardware{Cores: 8, CPULimit: 1.5}, 2},
		{"the cores of an exclusive binding", WorkerSchedule{CPUBinding: &CPUBinding{Cores: []int{0, 1, 2}, Strategy: BindExclusive}}, Hardware{Cores: 8}, 3},
		{"hardware not known", WorkerSchedule{}, Hardware{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ws.WorkersOn(tc.hw); got != tc.want {
				t.Errorf("WorkersOn(%+v) = %d, want %d", tc.hw, got, tc.want)
			}
		})
	}
}
