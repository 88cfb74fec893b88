package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/node/capacity"
	"github.com/nodemgr/nodemgr/internal/node/portalloc"
	"github.com/nodemgr/nodemgr/internal/node/service"
)

// dirTrees finds every artifact in one tree.
type dirTrees string

func (d dirTrees) Tree(string) (string, error) { return string(d), nil }

// serviceBooks is an agent with the real supervisor, port allocator and
// books over dataDir: enough to drive the local API's service routes.
type serviceBooks struct {
	a      *Agent
	cancel context.CancelFunc
	done   chan error
}

func startServiceBooks(t *testing.T, dataDir, tree string) *serviceBooks {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	w := &workloads{log: log, changed: make(chan struct{}, 1)}
	var err error
	w.ports, err = portalloc.New(portalloc.Config{Min: 40000, Max: 40100, StatePath: filepath.Join(dataDir, "ports.json")})
	if err != nil {
		t.Fatal(err)
	}
	w.services, err = service.New(service.Config{
		Prefix: dataDir, StateDir: filepath.Join(dataDir, "services"),
		Artifacts: dirTrees(tree), Ports: servicePorts{w.ports}, OnChange: w.servicesChanged,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := testBooks(t, dataDir)
	if on, _ := l.Resources(); !on.Onboarding.Onboarded {
		if _, err := l.Onboard(50, 1); err != nil {
			t.Fatal(err)
		}
	}
	w.capacity = l
	w.reconcileBooks()
	sb := &serviceBooks{a: &Agent{log: log, wl: w}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	sb.cancel = cancel
	go func() { sb.done <- w.services.Run(ctx) }()
	return sb
}

// stopAgent ends the supervisor as an agent's exit does: services run on.
func (sb *serviceBooks) stopAgent(t *testing.T) {
	t.Helper()
	sb.cancel()
	if err := <-sb.done; err != nil {
		t.Fatal(err)
	}
}

func (sb *serviceBooks) action(t *testing.T, coord, action string) api.Service {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/services/"+coord+"/"+action, nil)
	req.SetPathValue("coordinate", coord)
	req.SetPathValue("action", action)
	rec := httptest.NewRecorder()
	if err := sb.a.handleServiceAction(rec, req); err != nil {
		t.Fatalf("service %s %s: %v", action, coord, err)
	}
	var v api.Service
	json.Unmarshal(rec.Body.Bytes(), &v)
	return v
}

// allocations lists the books as `allocation ls` shows them.
func (sb *serviceBooks) allocations(t *testing.T) map[string]api.Allocation {
	t.Helper()
	l, err := sb.a.wl.books()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Allocation{}
	for _, a := range l.List() {
		out[a.ID] = sb.a.wl.allocationView(a)
	}
	return out
}

// testBooks is the books of a 4-core, 8 GiB, 100 GiB machine, kept in
// dir.
func testBooks(t *testing.T, dir string) *capacity.Ledger {
	t.Helper()
	l, err := capacity.New(capacity.Config{StatePath: filepath.Join(dir, "capacity.json"),
		Hardware: api.Hardware{Cores: 4, MemoryBytes: 8 << 30, DiskBytes: 100 << 30}, DataDir: dir,
		MachineFree: func() (api.Resources, error) {
			return api.Resources{CPUs: 4, MemoryMB: 8 << 10, DiskMB: 100 << 10}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sleepService is a data dir, and an artifact tree whose bin/svc sleeps,
// for a service test; it skips where services cannot run.
func sleepService(t *testing.T) (dataDir, tree string) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("services need Linux /proc")
	}
	dataDir, tree = t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(tree, "bin"), 0o755)
	os.WriteFile(filepath.Join(tree, "bin", "svc"), []byte("#!/bin/sh\nexec sleep 300\n"), 0o755)
	return dataDir, tree
}

// TestServiceBooksFollowStopAndRestart is item 1 of issue 13: after a stop
// (or drain) and a restart the service runs and holds its port, so it must
// be in the books again, also after an agent restart; stopped, it holds
// nothing.
func TestServiceBooksFollowStopAndRestart(t *testing.T) {
	dataDir, tree := sleepService(t)
	const coord = "1.sleep.ops.test"
	id := allocationID(api.AllocationService, coord)
	spec := api.ServiceSpec{Coordinate: coord, Artifact: "acme:sleep:1.0", Command: []string{"bin/svc"}, ExpectedMemoryMB: 64, StopGrace: api.Duration(time.Second)}

	sb := startServiceBooks(t, dataDir, tree)
	t.Cleanup(func() { sb.a.wl.services.Stop(context.Background(), coord) })
	if _, err := sb.a.wl.startService(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	wantBooked := func(when string, sb *serviceBooks) {
		t.Helper()
		a, ok := sb.allocations(t)[id]
		v, _ := sb.a.wl.services.Get(coord)
		if !ok || a.Resources.MemoryMB != 64 || len(a.Ports) != 1 || a.Ports[0] != v.Port || v.State != api.ServiceRunning {
			t.Errorf("%s: allocation %s = %+v (booked %v); want it holding 64 MB and port %d of the %s service", when, id, a, ok, v.Port, v.State)
		}
	}
	wantBooked("after start", sb)

	for _, stop := range []string{"stop", "drain"} {
		sb.action(t, coord, stop)
		if a, ok := sb.allocations(t)[id]; ok {
			t.Errorf("after %s: the stopped service still holds %+v", stop, a)
		}
		sb.action(t, coord, "restart")
		wantBooked("after "+stop+" and restart", sb)
	}

	// A new agent over the same books and records finds it booked.
	sb.stopAgent(t)
	sb = startServiceBooks(t, dataDir, tree)
	waitUntilT(t, "the new agent adopts the service", func() bool {
		v, err := sb.a.wl.services.Get(coord)
		return err == nil && v.State == api.ServiceRunning
	})
	wantBooked("after an agent restart", sb)

	// Stopped while no agent ran the books' sync (the record says stopped,
	// the books say booked): the next agent gives it back.
	sb.action(t, coord, "stop")
	sb.stopAgent(t)
	l, _ := sb.a.wl.books()
	if _, err := l.Allocate(api.Allocation{ID: id, Kind: api.AllocationService, Name: coord}, ""); err != nil {
		t.Fatal(err)
	}
	sb = startServiceBooks(t, dataDir, tree)
	if a, ok := sb.allocations(t)[id]; ok {
		t.Errorf("after an agent restart the stopped service holds %+v", a)
	}
	sb.stopAgent(t)
}

func waitUntilT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServiceBooksItsResourcesFromACommitment: a service that names its
// resources and a commitment (an ensemble's replica) books those
// resources from the commitment, which is used up; its stored spec keeps
// no commitment, so a restart books afresh.
func TestServiceBooksItsResourcesFromACommitment(t *testing.T) {
	dataDir, tree := sleepService(t)
	const coord = "1.api.ensemble.shop"
	sb := startServiceBooks(t, dataDir, tree)
	t.Cleanup(func() { sb.a.wl.services.Stop(context.Background(), coord); sb.stopAgent(t) })
	l, _ := sb.a.wl.books()
	want := api.Resources{CPUs: 1.5, MemoryMB: 300}
	c, err := l.Commit("ensemble:shop", want, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	spec := api.ServiceSpec{Coordinate: coord, Artifact: "acme:sleep:1.0", Command: []string{"bin/svc"}, Port: -1,
		Resources: &want, Commitment: c.ID, StopGrace: api.Duration(time.Second)}
	if _, err := sb.a.wl.startService(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	res, _ := l.Resources()
	a, ok := sb.allocations(t)[allocationID(api.AllocationService, coord)]
	if !ok || a.Resources.CPUs != 1.5 || a.Resources.MemoryMB != 300 || len(res.Commitments) != 0 {
		t.Fatalf("booked %+v (%v), commitments %+v; want 1.5 CPUs and 300 MB, the commitment used up", a, ok, res.Commitments)
	}
	if v, _ := sb.a.wl.services.Get(coord); v.Spec.Commitment != "" {
		t.Errorf("the stored spec keeps commitment %q; a restart would name one used up", v.Spec.Commitment)
	}
	sb.action(t, coord, "stop")
	sb.action(t, coord, "restart")
	if a, ok := sb.allocations(t)[allocationID(api.AllocationService, coord)]; !ok || a.Resources.CPUs != 1.5 {
		t.Errorf("after a restart: booked %+v (%v); want its resources again", a, ok)
	}
}
