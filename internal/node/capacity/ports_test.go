package capacity

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/clocktest"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/portalloc"
)

// allocatorLock is the agent's commitmentPorts over a real allocator.
type allocatorLock struct{ a *portalloc.Allocator }

func (p allocatorLock) Lock(owner string, ports []int) error {
	_, err := p.a.Allocate(owner, portalloc.Request{Ports: ports})
	return err
}

func (p allocatorLock) Unlock(owner string, quarantine bool) {
	if quarantine {
		p.a.ReleaseOwner(owner)
	} else {
		p.a.HandOver(owner)
	}
}

// A commitment's ports are checked by the node's port allocator and taken
// from it while the commitment lasts; when it ends they rest in
// quarantine, unless the workload it was for takes them.
func TestCommitmentPortsAreLocked(t *testing.T) {
	clk := clocktest.New()
	// A port another process holds, inside the range.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	lo, hi := busy-50, busy+50
	ports, err := portalloc.New(portalloc.Config{Min: lo, Max: hi, Quarantine: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	l := onboarded(t, Config{Now: clk.Now, Ports: allocatorLock{ports}})
	free := freeRun(t, busy+1, hi, 3) // free, free+1 and free+2

	for _, tc := range []struct {
		name string
		port int
		want error
	}{
		{"out of the range", hi + 1, errdefs.ErrInvalid},
		{"held by another process", busy, errdefs.ErrConflict},
	} {
		if _, err := l.Commit("job", api.Resources{CPUs: 1}, []int{tc.port}, time.Minute); !errors.Is(err, tc.want) {
			t.Errorf("Commit(port %s) = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := ports.Allocate("service:web", portalloc.Request{Ports: []int{free + 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit("job", api.Resources{CPUs: 1}, []int{free + 1}, time.Minute); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Commit(a port a service holds) = %v, want a conflict", err)
	}
	if nr, _ := l.Resources(); len(nr.Commitments) != 0 || nr.Committed != (api.Resources{}) {
		t.Fatalf("refused commitments left something in the books: %+v", nr)
	}

	c, err := l.Commit("job", api.Resources{CPUs: 1}, []int{free}, time.Minute)
	if err != nil {
		t.Fatalf("Commit(a free port) = %v", err)
	}
	if _, err := ports.Allocate("service:late", portalloc.Request{Ports: []int{free}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a service asking for a committed port = %v, want a conflict", err)
	}
	clk.Advance(time.Minute) // the commitment expires
	if nr, _ := l.Resources(); len(nr.Commitments) != 0 {
		t.Fatalf("commitment %s did not expire", c.ID)
	}
	if _, err := ports.Allocate("service:late", portalloc.Request{Ports: []int{free}}); !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "quarantine") {
		t.Errorf("an expired commitment's port taken at once = %v, want it in quarantine", err)
	}

	// Turned into the allocation it was for, its port is the workload's
	// to take at once.
	c2, err := l.Commit("job-2", api.Resources{CPUs: 1}, []int{free + 2}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allocate(api.Allocation{Kind: api.AllocationContainer, Name: "job-2", Resources: api.Resources{CPUs: 1}}, c2.ID); err != nil {
		t.Fatalf("Allocate from %s: %v", c2.ID, err)
	}
	if _, err := ports.Allocate("container:job-2", portalloc.Request{Ports: []int{free + 2}}); err != nil {
		t.Errorf("the workload taking its commitment's port = %v, want it granted", err)
	}
}

// freeRun is a port in [from, to) that, with the n-1 after it, no process
// holds now: the range is among the ephemeral ports, which the machine's
// other connections take as they come (CI runs packages side by side).
func freeRun(t *testing.T, from, to, n int) int {
	t.Helper()
	free := func(p int) bool {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
next:
	for p := from; p+n <= to; p++ {
		for i := range n {
			if !free(p + i) {
				continue next
			}
		}
		return p
	}
	t.Fatalf("no %d free ports in a row in [%d, %d)", n, from, to)
	return 0
}
