package ensemble

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestValidate(t *testing.T) {
	svc := api.AllocationSpec{
		Name: "queue", Resources: api.Resources{CPUs: 1, MemoryMB: 256},
		Service: &api.ServiceSpec{Artifact: "shop:queue:1.0", Command: []string{"bin/queue"}},
	}
	ok := container("web", 2, 0.5, 256)
	spec := func(f func(*api.EnsembleSpec)) api.EnsembleSpec {
		s := api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{svc, ok}}
		s.Allocations[0].Service = new(*svc.Service)
		s.Allocations[1].Container = new(*ok.Container)
		f(&s)
		return s
	}
	first := func(f func(*api.AllocationSpec)) api.EnsembleSpec {
		return spec(func(s *api.EnsembleSpec) { f(&s.Allocations[1]) })
	}
	many := make([]api.AllocationSpec, MaxAllocations+1) // counted before they are read

	tests := []struct {
		name      string
		spec      api.EnsembleSpec
		wantField string // "" for valid
		wantMsg   string // a part of the message, when it matters
	}{
		{name: "valid", spec: spec(func(*api.EnsembleSpec) {})},
		{name: "kind named", spec: first(func(a *api.AllocationSpec) { a.Kind = api.AllocationContainer })},
		{name: "ports over what it publishes", spec: first(func(a *api.AllocationSpec) {
			a.Container.Ports = []api.ContainerPort{{Container: 80}}
			a.Ports = 3
		})},
		{name: "container limits equal to the resources", spec: first(func(a *api.AllocationSpec) { a.Container.CPUs, a.Container.MemoryMB = 0.5, 256 })},
		{name: "restore deadline", spec: spec(func(s *api.EnsembleSpec) { s.RestoreDeadline = api.Duration(time.Minute) })},
		{name: "no restore", spec: spec(func(s *api.EnsembleSpec) { s.NoRestore = true })},
		{name: "service without a port", spec: spec(func(s *api.EnsembleSpec) { s.Allocations[0].Service.Port = -1 })},

		{name: "no name", spec: spec(func(s *api.EnsembleSpec) { s.Name = "" }), wantField: "name"},
		{name: "bad name", spec: spec(func(s *api.EnsembleSpec) { s.Name = "Shop" }), wantField: "name", wantMsg: "lowercase"},
		{name: "no allocations", spec: spec(func(s *api.EnsembleSpec) { s.Allocations = nil }), wantField: "allocations"},
		{name: "too many allocations", spec: spec(func(s *api.EnsembleSpec) { s.Allocations = many }), wantField: "allocations", wantMsg: "at most 100"},
		{name: "allocation without a name", spec: first(func(a *api.AllocationSpec) { a.Name = "" }), wantField: "allocations[1].name"},
		{name: "allocation name not a label", spec: first(func(a *api.AllocationSpec) { a.Name = "web_1" }), wantField: "allocations[1].name"},
		{name: "allocation names twice", spec: first(func(a *api.AllocationSpec) { a.Name = "queue" }), wantField: "allocations[1].name", wantMsg: "allocations[0] too"},
		{name: "no workload", spec: first(func(a *api.AllocationSpec) { a.Container = nil }), wantField: "allocations[1]", wantMsg: "set one of container and service"},
		{name: "two workloads", spec: first(func(a *api.AllocationSpec) { a.Service = svc.Service }), wantField: "allocations[1]"},
		{name: "kind not the workload's", spec: first(func(a *api.AllocationSpec) { a.Kind = api.AllocationService }), wantField: "allocations[1].kind"},
		{name: "unknown kind", spec: first(func(a *api.AllocationSpec) { a.Kind = api.AllocationPool }), wantField: "allocations[1].kind"},
		{name: "count over", spec: first(func(a *api.AllocationSpec) { a.Count = 101 }), wantField: "allocations[1].count", wantMsg: "allocations[1].count: must be 1..100"},
		{name: "count negative", spec: first(func(a *api.AllocationSpec) { a.Count = -1 }), wantField: "allocations[1].count"},
		{name: "no CPUs", spec: first(func(a *api.AllocationSpec) { a.Resources.CPUs = 0 }), wantField: "allocations[1].resources.cpus"},
		{name: "NaN CPUs", spec: first(func(a *api.AllocationSpec) { a.Resources.CPUs = math.NaN() }), wantField: "allocations[1].resources.cpus"},
		{name: "no memory", spec: first(func(a *api.AllocationSpec) { a.Resources.MemoryMB = 0 }), wantField: "allocations[1].resources.memory_mb"},
		{name: "negative GPUs", spec: first(func(a *api.AllocationSpec) { a.Resources.GPUs = -1 }), wantField: "allocations[1].resources.gpus"},
		{name: "negative disk", spec: first(func(a *api.AllocationSpec) { a.Resources.DiskMB = -1 }), wantField: "allocations[1].resources.disk_mb"},
		{name: "ports over", spec: first(func(a *api.AllocationSpec) { a.Ports = MaxPorts + 1 }), wantField: "allocations[1].ports"},
		{name: "ports under what it publishes", spec: first(func(a *api.AllocationSpec) {
			a.Container.Ports = []api.ContainerPort{{Container: 80}, {Container: 443}}
			a.Ports = 1
		}), wantField: "allocations[1].ports", wantMsg: "publishes 2"},
		{name: "bad tag", spec: first(func(a *api.AllocationSpec) { a.Placement.Tags = []string{"ok", " bad"} }), wantField: "allocations[1].placement.tags[1]"},
		{name: "bad group", spec: first(func(a *api.AllocationSpec) { a.Placement.Groups = []string{"Ops"} }), wantField: "allocations[1].placement.groups[0]"},
		{name: "node twice", spec: first(func(a *api.AllocationSpec) { a.Placement.Nodes = []string{"n1", "n1"} }), wantField: "allocations[1].placement.nodes[1]"},
		{name: "spread and pack", spec: first(func(a *api.AllocationSpec) { a.Placement.Spread, a.Placement.Pack = true, true }), wantField: "allocations[1].placement"},
		{name: "container ID", spec: first(func(a *api.AllocationSpec) { a.Container.ID = "web1" }), wantField: "allocations[1].container.id"},
		{name: "container commitment", spec: first(func(a *api.AllocationSpec) { a.Container.Commitment = "c1" }), wantField: "allocations[1].container.commitment"},
		{name: "container CPUs differ", spec: first(func(a *api.AllocationSpec) { a.Container.CPUs = 2 }), wantField: "allocations[1].container.cpus"},
		{name: "container memory differs", spec: first(func(a *api.AllocationSpec) { a.Container.MemoryMB = 128 }), wantField: "allocations[1].container.memory_mb"},
		{name: "container host port", spec: first(func(a *api.AllocationSpec) {
			a.Container.Ports = []api.ContainerPort{{Container: 80, Host: 8080}}
		}), wantField: "allocations[1].container.ports[0].host"},
		{name: "service host port", spec: spec(func(s *api.EnsembleSpec) { s.Allocations[0].Service.Port = 8080 }), wantField: "allocations[0].service.port"},
		{name: "service limits equal to the resources", spec: spec(func(s *api.EnsembleSpec) {
			s.Allocations[0].Service.Limits = &api.ServiceLimits{CPUs: 1, MemoryMB: 256}
		})},
		{name: "service coordinate", spec: spec(func(s *api.EnsembleSpec) { s.Allocations[0].Service.Coordinate = "1.queue.shop.prod" }), wantField: "allocations[0].service.coordinate"},
		{name: "service commitment", spec: spec(func(s *api.EnsembleSpec) { s.Allocations[0].Service.Commitment = "c1" }), wantField: "allocations[0].service.commitment"},
		{name: "service resources", spec: spec(func(s *api.EnsembleSpec) { s.Allocations[0].Service.Resources = &api.Resources{CPUs: 1} }), wantField: "allocations[0].service.resources"},
		{name: "service limits under the resources", spec: spec(func(s *api.EnsembleSpec) {
			s.Allocations[0].Service.Limits = &api.ServiceLimits{CPUs: 0.5, MemoryMB: 64}
		})},
		{name: "service CPU limit over", spec: spec(func(s *api.EnsembleSpec) {
			s.Allocations[0].Service.Limits = &api.ServiceLimits{CPUs: 2}
		}), wantField: "allocations[0].service.limits.cpus", wantMsg: "no more than it books"},
		{name: "service memory limit over", spec: spec(func(s *api.EnsembleSpec) {
			s.Allocations[0].Service.Limits = &api.ServiceLimits{MemoryMB: 512}
		}), wantField: "allocations[0].service.limits.memory_mb"},
		{name: "policy", spec: spec(func(s *api.EnsembleSpec) { s.Policy = Spread })},
		{name: "unknown policy", spec: spec(func(s *api.EnsembleSpec) { s.Policy = "random" }), wantField: "policy", wantMsg: "binpack, spread"},
		{name: "provision deadline", spec: spec(func(s *api.EnsembleSpec) { s.ProvisionDeadline = api.Duration(time.Minute) })},
		{name: "negative provision deadline", spec: spec(func(s *api.EnsembleSpec) { s.ProvisionDeadline = api.Duration(-time.Second) }), wantField: "provision_deadline"},
		{name: "negative restore deadline", spec: spec(func(s *api.EnsembleSpec) { s.RestoreDeadline = api.Duration(-time.Second) }), wantField: "restore_deadline"},
		{name: "long restore deadline", spec: spec(func(s *api.EnsembleSpec) { s.RestoreDeadline = api.Duration(25 * time.Hour) }), wantField: "restore_deadline"},
		{name: "restore deadline and no restore", spec: spec(func(s *api.EnsembleSpec) {
			s.RestoreDeadline = api.Duration(time.Minute)
			s.NoRestore = true
		}), wantField: "restore_deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.spec)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.wantField {
				t.Fatalf("Validate = %v, want a field error on %s", err, tc.wantField)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Validate = %v, not an ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Validate = %q, want it to say %q", err, tc.wantMsg)
			}
		})
	}
}
