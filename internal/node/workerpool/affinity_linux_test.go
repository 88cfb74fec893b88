package workerpool

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
)

// TestAffinity checks, in /proc, the cores every thread of each live
// worker may run on.
func TestAffinity(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || !set.IsSet(0) || !set.IsSet(1) {
		t.Skip("needs cores 0 and 1")
	}
	cases := []struct {
		name    string
		binding *api.CPUBinding
		workers int
		want    []string // Cpus_allowed_list per worker
	}{
		{"round robin", &api.CPUBinding{Cores: []int{0, 1}, Strategy: api.BindRoundRobin}, 3, []string{"0", "1", "0"}},
		{"round robin by default", &api.CPUBinding{Cores: []int{1, 0}}, 2, []string{"1", "0"}},
		{"exclusive", &api.CPUBinding{Cores: []int{0, 1}, Strategy: api.BindExclusive}, 2, []string{"0", "1"}},
		{"exclusive, one worker", &api.CPUBinding{Cores: []int{0, 1}, Strategy: api.BindExclusive}, 1, []string{"0-1"}},
		{"shared", &api.CPUBinding{Cores: []int{0, 1}, Strategy: api.BindShared}, 2, []string{"0-1", "0-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource()
			src.SetOpen(true) // keep the workers waiting
			cfg := config(t, "worker", tc.workers, 0)
			cfg.Binding = tc.binding
			p := start(t, cfg, src)
			waitFor(t, 20*time.Second, "every worker to connect", func() bool { return p.Stats().Connected == tc.workers })
			for i, w := range p.Stats().PerWorker {
				threads, err := filepath.Glob("/proc/" + strconv.Itoa(w.PID) + "/task/*/status")
				if err != nil || len(threads) == 0 {
					t.Fatalf("worker %d (pid %d): no threads in /proc: %v", i, w.PID, err)
				}
				for _, th := range threads {
					if got := cpusAllowed(t, th); got != tc.want[i] {
						t.Errorf("worker %d %s: Cpus_allowed_list = %q, want %q", i, th, got, tc.want[i])
					}
				}
			}
		})
	}
}

func cpusAllowed(t *testing.T, statusFile string) string {
	b, err := os.ReadFile(statusFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no Cpus_allowed_list", statusFile)
	return ""
}
