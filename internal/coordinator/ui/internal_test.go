package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
)

func TestAttemptsOf(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	fail := func(n, code int) api.TaskFailure {
		return api.TaskFailure{Attempt: n, NodeID: "n1", ExitCode: code, Reason: "exit status 3", Stderr: "boom", At: at}
	}
	tests := []struct {
		name string
		task api.Task
		want []int // attempt numbers, newest first
		dur  int64 // duration of the newest
		ok   bool  // the newest succeeded
	}{
		{"running, none ended", api.Task{Attempt: 1}, nil, 0, false},
		{"finished at once", api.Task{Attempt: 1, Result: &api.TaskResult{ExitCode: 0, DurationMS: 250, NodeID: "n1"}}, []int{1}, 250, true},
		{"finished after two failures", api.Task{Attempt: 3, Failures: []api.TaskFailure{fail(1, 3), fail(2, 3)},
			Result: &api.TaskResult{ExitCode: 0, DurationMS: 90}}, []int{3, 2, 1}, 90, true},
		{"failed for good: the last failure is the result", api.Task{Attempt: 3, Failures: []api.TaskFailure{fail(1, 3), fail(2, 3), fail(3, 3)},
			Result: &api.TaskResult{ExitCode: 3, DurationMS: 12}}, []int{3, 2, 1}, 12, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := attemptsOf(tc.task)
			var ns []int
			for _, a := range got {
				ns = append(ns, a.N)
			}
			if diff := cmp.Diff(tc.want, ns); diff != "" {
				t.Fatalf("attemptsOf attempts (-want +got):\n%s", diff)
			}
			if len(got) > 0 && (got[0].Duration != tc.dur || got[0].OK != tc.ok) {
				t.Errorf("newest attempt = %+v, want duration %d ok %v", got[0], tc.dur, tc.ok)
			}
		})
	}
}

func TestRateOf(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples []doneSample
		want    float64
		ok      bool
	}{
		{"one sample", []doneSample{{t0, 5}}, 0, false},
		{"ten a second", []doneSample{{t0, 0}, {t0.Add(time.Second), 10}, {t0.Add(2 * time.Second), 20}}, 10, true},
		{"a suite left the sum", []doneSample{{t0, 100}, {t0.Add(time.Second), 10}, {t0.Add(2 * time.Second), 15}}, 2.5, true},
	}
	for _, tc := range tests {
		got, ok := rateOf(tc.samples)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: rateOf = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMakeChart(t *testing.T) {
	end := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	samples := []api.UsageSample{{At: end.Add(-60 * time.Minute), CPUPercent: 0}, {At: end.Add(-30 * time.Minute), CPUPercent: 50}, {At: end, CPUPercent: 100}}
	c := makeChart(samples, func(s api.UsageSample) float64 { return s.CPUPercent }, 100, "%")
	if c.Line != "0.0,78.0 150.0,40.0 300.0,2.0" || c.Last != "100%" || c.Max != "100%" {
		t.Errorf("makeChart = %+v", c)
	}
	one := makeChart(samples[2:], func(s api.UsageSample) float64 { return s.CPUPercent }, 100, "%")
	if n := len(strings.Fields(one.Line)); n != 2 {
		t.Errorf("one sample draws %q, want a short stroke of 2 points", one.Line)
	}
	if none := makeChart(nil, nil, 100, "%"); none.Points != 0 || none.Line != "" {
		t.Errorf("no samples draw %+v", none)
	}
}

func TestSafeReturn(t *testing.T) {
	for in, want := range map[string]string{
		"/ui/nodes?status=online": "/ui/nodes?status=online",
		"":                        "/ui/",
		"/v1/nodes":               "/ui/",
		"//evil.example/ui/":      "/ui/",
		"https://evil.example/":   "/ui/",
		"/ui/\\evil":              "/ui/",
		"/ui/x\r\nSet-Cookie: a":  "/ui/",
	} {
		if got := safeReturn(in); got != want {
			t.Errorf("safeReturn(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHostAddr(t *testing.T) {
	for in, want := range map[string]string{
		"100.64.3.1/32":  "100.64.3.1",
		"100.64.3.0/24":  "100.64.3.0/24",
		"fd00::1/128":    "fd00::1",
		"100.64.3.1":     "100.64.3.1",
		"":               "",
		"not an address": "not an address",
	} {
		if got := hostAddr(in); got != want {
			t.Errorf("hostAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
