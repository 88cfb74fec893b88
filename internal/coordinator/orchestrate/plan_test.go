package orchestrate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func machines(states ...string) []store.PoolMachine {
	out := make([]store.PoolMachine, len(states))
	for i, st := range states {
		out[i] = store.PoolMachine{ID: "m" + string(rune('a'+i)), State: st, NodeID: "n" + string(rune('a'+i)), CPUs: 1, MemoryMB: 1024}
	}
	return out
}

func TestPlanPools(t *testing.T) {
	build := api.PoolSpec{Name: "build", Tags: []string{"linux"}, Max: 4}
	gpu := api.PoolSpec{Name: "gpu", Tags: []string{"linux", "gpu"}, Groups: []string{"ml"}, Max: 2}
	suite := func(name string, ready, wc int, tags ...string) Demand {
		return Demand{Suite: name, Ready: ready, WorkerCount: wc, Tags: tags}
	}
	for _, tc := range []struct {
		name    string
		pools   []poolView
		demands []Demand
		want    map[string]int // add per pool
		limited map[string]string
	}{
		{"no demand, no min", []poolView{{spec: build}}, nil, map[string]int{"build": 0}, nil},
		{"min is kept", []poolView{{spec: api.PoolSpec{Name: "build", Min: 2, Max: 4}, live: machines(api.MachineReady)}}, nil,
			map[string]int{"build": 1}, nil},
		{"ready over worker count, rounded up", []poolView{{spec: build, cpus: 1}}, []Demand{suite("s", 5, 2, "linux")},
			map[string]int{"build": 3}, nil},
		{"capped by max", []poolView{{spec: build}}, []Demand{suite("s", 10, 1, "linux")},
			map[string]int{"build": 4}, map[string]string{"build": "at max 4 machines"}},
		{"serving nodes count", []poolView{{spec: build}}, []Demand{{Suite: "s", Ready: 4, WorkerCount: 1, Tags: []string{"linux"}, Serving: 3}},
			map[string]int{"build": 1}, nil},
		{"machines on their way count, never twice",
			[]poolView{{spec: build, live: machines(api.MachineProvisioning, api.MachineBootstrapping)}},
			[]Demand{suite("a", 2, 1, "linux"), suite("b", 1, 1, "linux")},
			map[string]int{"build": 1}, nil},
		{"a ready machine whose agent has not connected is on its way",
			[]poolView{{spec: build, live: machines(api.MachineReady), connected: map[string]bool{}}},
			[]Demand{suite("a", 1, 1, "linux")}, map[string]int{"build": 0}, nil},
		{"draining machines do not count against max",
			[]poolView{{spec: api.PoolSpec{Name: "build", Tags: []string{"linux"}, Max: 1}, live: machines(api.MachineDraining)}},
			[]Demand{suite("a", 1, 1, "linux")}, map[string]int{"build": 1}, nil},
		{"tags pick the pool", []poolView{{spec: build}, {spec: gpu}}, []Demand{{Suite: "s", Ready: 1, WorkerCount: 1, Tags: []string{"gpu"}, Group: "ml"}},
			map[string]int{"build": 0, "gpu": 1}, nil},
		{"a group the pool lacks", []poolView{{spec: build}}, []Demand{{Suite: "s", Ready: 1, WorkerCount: 1, Group: "ml"}},
			map[string]int{"build": 0}, nil},
		{"cores the machines lack", []poolView{{spec: build, cpus: 2}}, []Demand{{Suite: "s", Ready: 1, WorkerCount: 1, Cores: 4}},
			map[string]int{"build": 0}, nil},
		{"overflow goes to the next pool", []poolView{{spec: api.PoolSpec{Name: "a", Max: 1}}, {spec: api.PoolSpec{Name: "b", Max: 5}}},
			[]Demand{suite("s", 3, 1)}, map[string]int{"a": 1, "b": 2}, map[string]string{"a": "at max 1 machines"}},
		{"CPU limit", []poolView{{spec: api.PoolSpec{Name: "build", Max: 10, MaxCPUs: 5}, cpus: 2, live: machines(api.MachineReady)}},
			[]Demand{suite("s", 10, 1)}, map[string]int{"build": 2}, map[string]string{"build": "at its CPU limit"}},
		{"memory limit", []poolView{{spec: api.PoolSpec{Name: "build", Max: 10, MaxMemoryMB: 4096}, memoryMB: 1024, live: machines(api.MachineReady)}},
			[]Demand{suite("s", 10, 1)}, map[string]int{"build": 3}, map[string]string{"build": "at its memory limit"}},
		{"an ensemble's replicas ask one machine each", []poolView{{spec: build, cpus: 2, memoryMB: 4096}},
			[]Demand{{Ensemble: "shop", Suite: "shop/web", Ready: 3, WorkerCount: 1, Tags: []string{"linux"}, CPUs: 1, MemoryMB: 512}},
			map[string]int{"build": 3}, nil},
		{"a replica larger than the pool's machines", []poolView{{spec: build, cpus: 2, memoryMB: 4096}},
			[]Demand{{Ensemble: "shop", Suite: "shop/db", Ready: 1, WorkerCount: 1, CPUs: 4, MemoryMB: 512}},
			map[string]int{"build": 0}, nil},
		{"a replica with more memory than the pool's machines", []poolView{{spec: build, cpus: 2, memoryMB: 4096}},
			[]Demand{{Ensemble: "shop", Suite: "shop/db", Ready: 1, WorkerCount: 1, CPUs: 1, MemoryMB: 8192}},
			map[string]int{"build": 0}, nil},
		{"a replica for one of several groups", []poolView{{spec: build}, {spec: gpu}},
			[]Demand{{Ensemble: "shop", Suite: "shop/train", Ready: 1, WorkerCount: 1, Groups: []string{"ops", "ml"}}},
			map[string]int{"build": 0, "gpu": 1}, nil},
		{"a paused pool launches nothing, min included", []poolView{{spec: api.PoolSpec{Name: "build", Tags: []string{"linux"}, Min: 1, Max: 4, Paused: true}}},
			[]Demand{suite("s", 3, 1, "linux")}, map[string]int{"build": 0}, map[string]string{"build": "paused"}},
		{"demand passes a paused pool by", []poolView{{spec: api.PoolSpec{Name: "a", Max: 4, Paused: true}}, {spec: api.PoolSpec{Name: "b", Max: 4}}},
			[]Demand{suite("s", 2, 1)}, map[string]int{"a": 0, "b": 2}, map[string]string{"a": "paused"}},
		{"a paused pool's machines on their way still serve", []poolView{{spec: api.PoolSpec{Name: "a", Max: 4, Paused: true}, live: machines(api.MachineProvisioning)}, {spec: api.PoolSpec{Name: "b", Max: 4}}},
			[]Demand{suite("s", 2, 1)}, map[string]int{"a": 0, "b": 1}, map[string]string{"a": "paused"}},
		{"higher priority pool asked first", []poolView{{spec: api.PoolSpec{Name: "a", Max: 1}}, {spec: api.PoolSpec{Name: "z", Max: 1, Priority: 1}}},
			[]Demand{suite("s", 1, 1)}, map[string]int{"a": 0, "z": 1}, nil},
		{"same priority: the cheaper pool first", []poolView{
			{spec: api.PoolSpec{Name: "a", Max: 1, Candidates: []api.PoolCandidate{{Template: "t", Provider: "aws", Price: ptr(0.5)}}}},
			{spec: api.PoolSpec{Name: "b", Max: 1}},
			{spec: api.PoolSpec{Name: "c", Max: 1, Candidates: []api.PoolCandidate{{Template: "t", Provider: "local", Price: ptr(0.0)}, {Template: "u", Provider: "aws", Price: ptr(2.0)}}}}},
			[]Demand{suite("s", 2, 1)}, map[string]int{"a": 1, "b": 0, "c": 1}, map[string]string{"c": "at max"}},
		{"higher priority first", []poolView{{spec: api.PoolSpec{Name: "build", Max: 1}}},
			[]Demand{{Suite: "low", Ready: 1, WorkerCount: 1}, {Suite: "high", Priority: 9, Ready: 1, WorkerCount: 1}},
			map[string]int{"build": 1}, map[string]string{"build": "at max"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plans := planPools(tc.pools, tc.demands)
			for pool, want := range tc.want {
				if got := plans[pool].add; got != want {
					t.Errorf("planPools: pool %s adds %d, want %d (%s)", pool, got, want, plans[pool].demandLine())
				}
				if lim := tc.limited[pool]; !strings.HasPrefix(plans[pool].limited, lim) || (lim == "" && plans[pool].limited != "") {
					t.Errorf("planPools: pool %s limited %q, want %q", pool, plans[pool].limited, lim)
				}
			}
		})
	}
}

func TestPlanPoolsHigherPriorityIsServedFirst(t *testing.T) {
	plans := planPools([]poolView{{spec: api.PoolSpec{Name: "build", Max: 1}}},
		[]Demand{{Suite: "low", Ready: 1, WorkerCount: 1}, {Suite: "high", Priority: 9, Ready: 1, WorkerCount: 1}})
	if line := plans["build"].demandLine(); !strings.HasPrefix(line, "suite high") {
		t.Errorf("demand line %q: want the high-priority suite first", line)
	}
}

func TestNormalize(t *testing.T) {
	ok := api.PoolSpec{Name: "p", Template: "t", Provider: "docker", Max: 2}
	got, err := Normalize(ok)
	if err != nil {
		t.Fatal(err)
	}
	if got.IdleTimeout != api.Duration(DefaultIdleTimeout) || got.BootstrapTimeout != api.Duration(DefaultBootstrapTimeout) ||
		got.MaxLaunching != DefaultMaxLaunching || got.Policy != "cheapest" || got.MinAge != api.Duration(DefaultMinAge) {
		t.Errorf("Normalize(%+v) = %+v, want the defaults filled in", ok, got)
	}
	short, _ := Normalize(api.PoolSpec{Name: "p", Template: "t", Provider: "docker", Max: 2, IdleTimeout: api.Duration(10 * time.Second)})
	if short.MinAge != api.Duration(10*time.Second) {
		t.Errorf("min_age with idle_timeout 10s = %s, want capped at 10s", time.Duration(short.MinAge))
	}
	for _, tc := range []struct {
		name  string
		spec  func(*api.PoolSpec)
		field string
	}{
		{"no name", func(s *api.PoolSpec) { s.Name = "" }, "name"},
		{"no template", func(s *api.PoolSpec) { s.Template = "" }, "template"},
		{"no provider", func(s *api.PoolSpec) { s.Provider = "" }, "provider"},
		{"both forms", func(s *api.PoolSpec) { s.Candidates = []api.PoolCandidate{{Template: "a", Provider: "docker"}} }, "candidates"},
		{"candidate without template", func(s *api.PoolSpec) {
			s.Template, s.Provider, s.Candidates = "", "", []api.PoolCandidate{{Provider: "docker"}}
		}, "candidates[0].template"},
		{"negative price", func(s *api.PoolSpec) {
			s.Template, s.Provider, s.Candidates = "", "", []api.PoolCandidate{{Template: "a", Provider: "docker", Price: ptr(-1.0)}}
		}, "candidates[0].price"},
		{"a candidate twice", func(s *api.PoolSpec) {
			s.Template, s.Provider = "", ""
			s.Candidates = []api.PoolCandidate{{Template: "a", Provider: "docker"}, {Template: "a", Provider: "docker"}}
		}, "candidates[1]"},
		{"max 0", func(s *api.PoolSpec) { s.Max = 0 }, "max"},
		{"max too big", func(s *api.PoolSpec) { s.Max = 100000 }, "max"},
		{"min over max", func(s *api.PoolSpec) { s.Min = 3 }, "min"},
		{"negative cpus", func(s *api.PoolSpec) { s.MaxCPUs = -1 }, "max_cpus"},
		{"negative idle", func(s *api.PoolSpec) { s.IdleTimeout = api.Duration(-time.Second) }, "idle_timeout"},
		{"unknown policy", func(s *api.PoolSpec) { s.Policy = "random" }, "policy"},
		{"empty tag", func(s *api.PoolSpec) { s.Tags = []string{""} }, "tags[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := ok
			tc.spec(&spec)
			_, err := Normalize(spec)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("Normalize(%+v) = %v, want a field error on %s", spec, err, tc.field)
			}
		})
	}
}
