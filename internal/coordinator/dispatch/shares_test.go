package dispatch

import (
	"fmt"
	"testing"
)

func TestFairCap(t *testing.T) {
	for _, tc := range []struct {
		name        string
		total, want int
		all         []Share
		allowed     int
	}{
		{"alone", 40, 32, []Share{{"a", 1, 0}}, 32},
		{"first of two", 40, 32, []Share{{"a", 1, 0}, {"b", 1, 0}}, 20},
		{"second of two", 40, 32, []Share{{"b", 1, 0}, {"a", 1, 20}}, 20},
		{"came after a greedy one", 40, 32, []Share{{"b", 1, 0}, {"a", 1, 32}}, 20},
		{"holds its share", 24, 21, []Share{{"a", 1, 12}, {"b", 1, 12}}, 0},
		{"odd total rounds up", 23, 32, []Share{{"a", 1, 0}, {"b", 1, 11}}, 12},
		{"weighted by workers", 40, 32, []Share{{"a", 3, 0}, {"b", 1, 0}}, 30},
		{"idle workers beat the share", 4, 8, []Share{{"a", 4, 0}, {"b", 4, 4}}, 4},
		{"idle workers of a holder", 10, 8, []Share{{"a", 8, 6}, {"b", 1, 0}}, 3},
		{"many tasks: the buffer fits", 100000, 32, []Share{{"a", 2, 30}, {"b", 2, 30}}, 32},
		{"nothing left", 0, 32, []Share{{"a", 1, 0}, {"b", 1, 0}}, 1},
		{"weight not known counts as one worker", 40, 32, []Share{{"a", 0, 0}, {"b", 1, 0}}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FairCap(tc.total, tc.want, tc.all); got != tc.allowed {
				t.Errorf("FairCap(%d, %d, %v) = %d, want %d", tc.total, tc.want, tc.all, got, tc.allowed)
			}
		})
	}
}

func TestPlanGiveback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int
		all   []Share
		want  map[string]int
	}{
		{"the greedy one gives the excess", 40, []Share{{"b", 1, 8}, {"a", 1, 32}}, map[string]int{"a": 12}},
		{"as the tasks run down", 24, []Share{{"b", 1, 0}, {"a", 1, 24}}, map[string]int{"a": 12}},
		{"nobody over their share", 24, []Share{{"b", 1, 12}, {"a", 1, 12}}, nil},
		{"asker not short", 24, []Share{{"b", 1, 13}, {"a", 1, 11}}, nil},
		{"largest excess first, only what is lacking", 30, []Share{{"c", 1, 0}, {"a", 1, 14}, {"b", 1, 16}}, map[string]int{"b": 6, "a": 4}},
		{"one last task each", 2, []Share{{"b", 1, 0}, {"a", 1, 2}}, map[string]int{"a": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanGiveback(tc.total, tc.all)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("PlanGiveback(%d, %v) = %v, want %v", tc.total, tc.all, got, tc.want)
			}
		})
	}
}

func TestUnstartedExcess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int
		all   []Share
		want  bool
	}{
		{"a holder buffers more than its share", 8, []Share{{"b", 2, 0}, {"a", 2, 8}}, true},
		{"a holder runs all it holds", 2, []Share{{"b", 2, 0}, {"a", 2, 2}}, false},
		{"every holder within its share", 12, []Share{{"c", 2, 0}, {"a", 2, 4}, {"b", 2, 4}}, false},
		{"the share of one of many", 8, []Share{{"c", 2, 0}, {"a", 2, 5}, {"b", 2, 3}}, true},
		{"weight not known counts as one worker", 3, []Share{{"b", 0, 0}, {"a", 0, 3}}, true},
		{"alone", 8, []Share{{"b", 2, 0}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unstartedExcess(tc.total, tc.all); got != tc.want {
				t.Errorf("unstartedExcess(%d, %v) = %v, want %v", tc.total, tc.all, got, tc.want)
			}
		})
	}
}
