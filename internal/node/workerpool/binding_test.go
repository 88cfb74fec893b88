package workerpool

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
)

func TestPlanCPUs(t *testing.T) {
	cores := func(c ...int) []int { return c }
	cases := []struct {
		name    string
		binding *api.CPUBinding
		workers int
		want    [][]int
		wantErr bool
	}{
		{"no binding", nil, 2, [][]int{nil, nil}, false},
		{"no cores", &api.CPUBinding{Strategy: api.BindShared}, 1, [][]int{nil}, false},
		{"round robin by default", &api.CPUBinding{Cores: cores(4, 5)}, 3, [][]int{{4}, {5}, {4}}, false},
		{"round robin", &api.CPUBinding{Cores: cores(0, 1, 2, 3), Strategy: api.BindRoundRobin}, 2, [][]int{{0}, {1}}, false},
		{"exclusive even", &api.CPUBinding{Cores: cores(0, 1, 2, 3), Strategy: api.BindExclusive}, 2, [][]int{{0, 1}, {2, 3}}, false},
		{"exclusive uneven", &api.CPUBinding{Cores: cores(0, 1, 2, 3, 4), Strategy: api.BindExclusive}, 3, [][]int{{0}, {1, 2}, {3, 4}}, false},
		{"exclusive one each", &api.CPUBinding{Cores: cores(0, 1), Strategy: api.BindExclusive}, 2, [][]int{{0}, {1}}, false},
		{"exclusive too few", &api.CPUBinding{Cores: cores(0, 1), Strategy: api.BindExclusive}, 3, nil, true},
		{"shared", &api.CPUBinding{Cores: cores(2, 3), Strategy: api.BindShared}, 2, [][]int{{2, 3}, {2, 3}}, false},
		{"unknown", &api.CPUBinding{Cores: cores(0), Strategy: "Spread"}, 1, nil, true},
		{"duplicate", &api.CPUBinding{Cores: cores(1, 1)}, 1, nil, true},
		{"negative", &api.CPUBinding{Cores: cores(-1)}, 1, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planCPUs(tc.binding, tc.workers)
			if (err != nil) != tc.wantErr {
				t.Fatalf("planCPUs(%+v, %d) error = %v, want error %v", tc.binding, tc.workers, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("planCPUs(%+v, %d) mismatch (-want +got):\n%s", tc.binding, tc.workers, diff)
			}
		})
	}
}

func TestFormatCPUs(t *testing.T) {
	cases := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0-1"},
		{[]int{3, 0, 1, 2, 8, 10, 11}, "0-3,8,10-11"},
	}
	for _, tc := range cases {
		if got := formatCPUs(tc.in); got != tc.want {
			t.Errorf("formatCPUs(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestWorkerProcs: a worker's Go runtime is sized to its share of the
// cores it may run on.
func TestWorkerProcs(t *testing.T) {
	cores := func(n int) []int {
		c := make([]int, n)
		for i := range c {
			c[i] = i
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		binding *api.CPUBinding
		workers int
		want    []int
	}{
		{"shared 4 cores, 2 workers", &api.CPUBinding{Cores: cores(4), Strategy: api.BindShared}, 2, []int{2, 2}},
		{"shared 2 cores, 4 workers", &api.CPUBinding{Cores: cores(2), Strategy: api.BindShared}, 4, []int{1, 1, 1, 1}},
		{"round robin", &api.CPUBinding{Cores: cores(2), Strategy: api.BindRoundRobin}, 3, []int{1, 1, 1}},
		{"exclusive", &api.CPUBinding{Cores: cores(5), Strategy: api.BindExclusive}, 2, []int{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planCPUs(tc.binding, tc.workers)
			if err != nil {
				t.Fatal(err)
			}
			p := &Pool{}
			for i := range tc.workers {
				p.slots = append(p.slots, &slot{id: i, cpus: plan[i]})
			}
			for i, s := range p.slots {
				if got := p.procs(s); got != tc.want[i] {
					t.Errorf("procs(worker %d on %v) = %d, want %d", i, s.cpus, got, tc.want[i])
				}
			}
		})
	}
}
