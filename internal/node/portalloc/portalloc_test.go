package portalloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/clocktest"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// clock is a settable clock for Config.Now.

// allFree is a probe that finds every port free.
func allFree(int) bool { return true }

// busy is a probe that finds the given ports in use.
func busy(ports ...int) func(int) bool {
	return func(p int) bool { return !slices.Contains(ports, p) }
}

func newTest(t *testing.T, cfg Config) *Allocator {
	t.Helper()
	if cfg.Probe == nil {
		cfg.Probe = allFree
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return a
}

func fieldOf(err error) string {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		wantField string // "" if New must succeed
		wantFree  int
	}{
		{name: "defaults", cfg: Config{}, wantFree: 65535 - 16384 + 1},
		{name: "one port", cfg: Config{Min: 30000, Max: 30000}, wantFree: 1},
		{name: "only min", cfg: Config{Min: 65000}, wantFree: 536},
		{name: "negative min", cfg: Config{Min: -1, Max: 10}, wantField: "min"},
		{name: "min too big", cfg: Config{Min: 70000, Max: 70001}, wantField: "min"},
		{name: "max too big", cfg: Config{Min: 1000, Max: 65536}, wantField: "max"},
		{name: "negative max", cfg: Config{Min: 1000, Max: -5}, wantField: "max"},
		{name: "min above max", cfg: Config{Min: 20000, Max: 19999}, wantField: "max"},
		{name: "only max below default min", cfg: Config{Max: 2000}, wantField: "max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Probe = allFree
			a, err := New(tc.cfg)
			if tc.wantField != "" {
				if !errors.Is(err, errdefs.ErrInvalid) || fieldOf(err) != tc.wantField {
					t.Fatalf("New(%+v) = %v, want an invalid %q", tc.cfg, err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tc.cfg, err)
			}
			if got := a.Free(); got != tc.wantFree {
				t.Errorf("Free() = %d, want %d", got, tc.wantFree)
			}
		})
	}
}

func TestAllocateBadInput(t *testing.T) {
	tests := []struct {
		name      string
		owner     string
		req       Request
		wantField string
		wantText  string
	}{
		{name: "empty owner", owner: "", req: Request{Count: 1}, wantField: "owner", wantText: "must not be empty"},
		{name: "long owner", owner: strings.Repeat("x", maxOwnerLen+1), req: Request{Count: 1}, wantField: "owner", wantText: "at most 256"},
		{name: "owner not UTF-8", owner: "svc\xff", req: Request{Count: 1}, wantField: "owner", wantText: "UTF-8"},
		{name: "nothing asked", owner: "a", req: Request{}, wantField: "count", wantText: "at least one port"},
		{name: "empty ports", owner: "a", req: Request{Ports: []int{}}, wantField: "count", wantText: "at least one port"},
		{name: "negative count", owner: "a", req: Request{Count: -1}, wantField: "count", wantText: "negative"},
		{name: "count above range", owner: "a", req: Request{Count: 11}, wantField: "count", wantText: "has only 10"},
		{name: "huge count", owner: "a", req: Request{Count: int(^uint(0) >> 1)}, wantField: "count", wantText: "has only 10"},
		{name: "ports and count above range", owner: "a", req: Request{Ports: []int{20000, 20001}, Count: 9}, wantField: "count", wantText: "11 ports"},
		{name: "port below range", owner: "a", req: Request{Ports: []int{20000, 19999}}, wantField: "ports[1]", wantText: "outside the range 20000-20009"},
		{name: "port above range", owner: "a", req: Request{Ports: []int{20010}}, wantField: "ports[0]", wantText: "outside"},
		{name: "port zero", owner: "a", req: Request{Ports: []int{0}}, wantField: "ports[0]", wantText: "outside"},
		{name: "negative port", owner: "a", req: Request{Ports: []int{20001, 20002, -20003}}, wantField: "ports[2]", wantText: "outside"},
		{name: "port beyond 65535", owner: "a", req: Request{Ports: []int{70000}}, wantField: "ports[0]", wantText: "outside"},
		{name: "duplicate port", owner: "a", req: Request{Ports: []int{20001, 20002, 20001}}, wantField: "ports[2]", wantText: "twice (also ports[0])"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTest(t, Config{Min: 20000, Max: 20009})
			got, err := a.Allocate(tc.owner, tc.req)
			if !errors.Is(err, errdefs.ErrInvalid) || fieldOf(err) != tc.wantField {
				t.Fatalf("Allocate(%q, %+v) = %v, %v, want an invalid %q", tc.owner, tc.req, got, err, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("Allocate(%q, %+v) = %v, want it to say %q", tc.owner, tc.req, err, tc.wantText)
			}
			if got != nil || len(a.Held()) != 0 || a.Free() != 10 {
				t.Errorf("a bad request changed the state: got %v, held %v, free %d", got, a.Held(), a.Free())
			}
		})
	}
}

func TestAllocateConflicts(t *testing.T) {
	const min, max = 20000, 20009
	clk := clocktest.New()
	a := newTest(t, Config{Min: min, Max: max, Now: clk.Now, Probe: busy(20007)})
	if _, err := a.Allocate("svc-a", Request{Ports: []int{20001, 20002}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release("svc-a", 20002); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		owner string
		req   Request
		class error
		want  string
	}{
		{name: "held by another", owner: "svc-b", req: Request{Ports: []int{20001}}, class: errdefs.ErrConflict, want: `ports[0]: port 20001 is held by "svc-a"`},
		{name: "held by the same owner", owner: "svc-a", req: Request{Ports: []int{20005, 20001}}, class: errdefs.ErrConflict, want: `ports[1]: port 20001 is held by "svc-a"`},
		{name: "in quarantine", owner: "svc-b", req: Request{Ports: []int{20002}}, class: errdefs.ErrConflict, want: `port 20002 was released by "svc-a" and rests in quarantine until 2025-01-02T03:05:05Z`},
		{name: "used by the OS", owner: "svc-b", req: Request{Ports: []int{20007}}, class: errdefs.ErrConflict, want: "ports[0]: port 20007 is in use by another process"},
		{name: "not enough free", owner: "svc-b", req: Request{Count: 9}, class: errdefs.ErrUnavailable, want: "only 8 of the 10 ports in 20000-20009 are free (1 held, 1 in quarantine)"},
		{name: "not enough free after probing", owner: "svc-b", req: Request{Count: 8}, class: errdefs.ErrUnavailable, want: "only 7 of the 10 ports in 20000-20009 are free (1 held, 1 in quarantine, 1 in use by other processes)"},
		{name: "specific ports leave too few", owner: "svc-b", req: Request{Ports: []int{20000}, Count: 7}, class: errdefs.ErrUnavailable, want: "only 6 of the 10 ports in 20000-20009 are free (1 held, 1 in quarantine, 1 in use by other processes)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.Allocate(tc.owner, tc.req)
			if !errors.Is(err, tc.class) {
				t.Fatalf("Allocate(%q, %+v) = %v, %v, want %v", tc.owner, tc.req, got, err, tc.class)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Allocate(%q, %+v) = %v, want it to say %q", tc.owner, tc.req, err, tc.want)
			}
			if diff := cmp.Diff(map[int]string{20001: "svc-a"}, a.Held()); diff != "" {
				t.Errorf("a refused request changed Held() (-want +got):\n%s", diff)
			}
			if got := a.Free(); got != 8 {
				t.Errorf("Free() = %d, want 8", got)
			}
		})
	}
}

func TestAllOrNothing(t *testing.T) {
	tests := []struct {
		name  string
		probe func(int) bool
		req   Request
		class error
	}{
		{name: "third port held", req: Request{Ports: []int{20003, 20004, 20001}}, class: errdefs.ErrConflict},
		{name: "third port in quarantine", req: Request{Ports: []int{20003, 20004, 20002}}, class: errdefs.ErrConflict},
		{name: "third port used by the OS", probe: busy(20005), req: Request{Ports: []int{20003, 20004, 20005}}, class: errdefs.ErrConflict},
		{name: "specific ports free, random ones short", req: Request{Ports: []int{20003, 20004}, Count: 7}, class: errdefs.ErrUnavailable},
		{name: "random ones short after probing", probe: busy(20000, 20005, 20006), req: Request{Ports: []int{20003}, Count: 5}, class: errdefs.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTest(t, Config{Min: 20000, Max: 20009, StatePath: filepath.Join(t.TempDir(), "ports.json"), Probe: tc.probe})
			mustAllocate(t, a, "old", Request{Ports: []int{20001, 20002}})
			if err := a.Release("old", 20002); err != nil {
				t.Fatal(err)
			}
			before := a.Held()
			got, err := a.Allocate("new", tc.req)
			if !errors.Is(err, tc.class) || got != nil {
				t.Fatalf("Allocate(%+v) = %v, %v, want %v and no ports", tc.req, got, err, tc.class)
			}
			if diff := cmp.Diff(before, a.Held()); diff != "" {
				t.Errorf("Held() changed (-before +after):\n%s", diff)
			}
			if got := a.Free(); got != 8 {
				t.Errorf("Free() = %d, want 8", got)
			}
			// Every port that was free still is: the request can be met in
			// full once nothing stands in its way.
			for _, p := range []int{20003, 20004} {
				if o, ok := a.Owner(p); ok {
					t.Errorf("Owner(%d) = %q, want none", p, o)
				}
			}
			assertFileMatches(t, a)
		})
	}
}

func mustAllocate(t *testing.T, a *Allocator, owner string, req Request) []int {
	t.Helper()
	got, err := a.Allocate(owner, req)
	if err != nil {
		t.Fatalf("Allocate(%q, %+v): %v", owner, req, err)
	}
	return got
}

func TestAllocateGrants(t *testing.T) {
	a := newTest(t, Config{Min: 20000, Max: 20009})
	got := mustAllocate(t, a, "svc", Request{Ports: []int{20009, 20000}, Count: 3})
	if len(got) != 5 || got[0] != 20009 || got[1] != 20000 {
		t.Fatalf("Allocate = %v, want 20009, 20000, then 3 random ports", got)
	}
	for _, p := range got {
		if p < 20000 || p > 20009 {
			t.Errorf("granted port %d is outside the range", p)
		}
		if o, ok := a.Owner(p); !ok || o != "svc" {
			t.Errorf("Owner(%d) = %q, %v, want svc", p, o, ok)
		}
	}
	if n := len(a.Held()); n != 5 {
		t.Errorf("len(Held()) = %d, want 5", n)
	}
	if got := a.Free(); got != 5 {
		t.Errorf("Free() = %d, want 5", got)
	}
	// The rest of the range, in one go.
	rest := mustAllocate(t, a, "svc2", Request{Count: 5})
	all := append(slices.Clone(got), rest...)
	slices.Sort(all)
	if want := []int{20000, 20001, 20002, 20003, 20004, 20005, 20006, 20007, 20008, 20009}; !slices.Equal(all, want) {
		t.Errorf("granted %v, want the whole range once", all)
	}
	if _, err := a.Allocate("svc3", Request{Count: 1}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "want 1 random port, but only 0") {
		t.Errorf("Allocate on a full range = %v, want unavailable saying 1 random port (singular) and only 0 are free", err)
	}
	if _, err := a.Allocate("svc3", Request{Count: 2}); !strings.Contains(err.Error(), "want 2 random ports,") {
		t.Errorf("Allocate(2) on a full range = %v, want it to say 2 random ports", err)
	}
}

func TestReleaseBadInput(t *testing.T) {
	tests := []struct {
		name      string
		owner     string
		ports     []int
		class     error
		wantField string
		wantText  string
	}{
		{name: "empty owner", owner: "", ports: []int{20001}, class: errdefs.ErrInvalid, wantField: "owner"},
		{name: "owner not UTF-8", owner: "\xc0", ports: []int{20001}, class: errdefs.ErrInvalid, wantField: "owner"},
		{name: "no ports", owner: "a", ports: nil, class: errdefs.ErrInvalid, wantField: "ports"},
		{name: "duplicate port", owner: "a", ports: []int{20001, 20001}, class: errdefs.ErrInvalid, wantField: "ports[1]"},
		{name: "port not held", owner: "a", ports: []int{20001, 20005}, class: errdefs.ErrNotFound, wantText: "ports[1]: port 20005 is not held"},
		{name: "port outside the range", owner: "a", ports: []int{80}, class: errdefs.ErrNotFound, wantText: "port 80 is not held"},
		{name: "port released already", owner: "a", ports: []int{20003}, class: errdefs.ErrNotFound, wantText: `port 20003 is not held: "a" released it already`},
		{name: "port of another owner", owner: "a", ports: []int{20001, 20002}, class: errdefs.ErrConflict, wantText: `ports[1]: port 20002 is held by "b"`},
		{name: "unknown owner", owner: "c", ports: []int{20001}, class: errdefs.ErrConflict, wantText: `port 20001 is held by "a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTest(t, Config{Min: 20000, Max: 20009, StatePath: filepath.Join(t.TempDir(), "ports.json")})
			mustAllocate(t, a, "a", Request{Ports: []int{20001, 20003}})
			mustAllocate(t, a, "b", Request{Ports: []int{20002}})
			if err := a.Release("a", 20003); err != nil {
				t.Fatal(err)
			}
			err := a.Release(tc.owner, tc.ports...)
			if !errors.Is(err, tc.class) {
				t.Fatalf("Release(%q, %v) = %v, want %v", tc.owner, tc.ports, err, tc.class)
			}
			if got := fieldOf(err); got != tc.wantField {
				t.Errorf("Release(%q, %v) = %v, want field %q", tc.owner, tc.ports, err, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("Release(%q, %v) = %v, want it to say %q", tc.owner, tc.ports, err, tc.wantText)
			}
			// Nothing was released, not even the ports that were the owner's.
			if diff := cmp.Diff(map[int]string{20001: "a", 20002: "b"}, a.Held()); diff != "" {
				t.Errorf("Held() after a refused release (-want +got):\n%s", diff)
			}
			assertFileMatches(t, a)
		})
	}
}

func TestQuarantine(t *testing.T) {
	clk := clocktest.New()
	a := newTest(t, Config{Min: 20000, Max: 20001, Quarantine: time.Minute, Now: clk.Now})
	mustAllocate(t, a, "a", Request{Ports: []int{20000}})
	if err := a.Release("a", 20000); err != nil {
		t.Fatal(err)
	}
	if got := a.Free(); got != 1 {
		t.Errorf("Free() with one port in quarantine = %d, want 1", got)
	}
	// A random draw never lands on the resting port.
	if got := mustAllocate(t, a, "b", Request{Count: 1}); got[0] != 20001 {
		t.Fatalf("Allocate(Count 1) = %v, want the port not in quarantine", got)
	}
	if _, err := a.Allocate("c", Request{Count: 1}); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "1 in quarantine") {
		t.Errorf("Allocate(Count 1) with the other port resting = %v, want unavailable, 1 in quarantine", err)
	}

	// Start over to check the boundary exactly.
	clk = clocktest.New()
	a = newTest(t, Config{Min: 20000, Max: 20001, Quarantine: time.Minute, Now: clk.Now})
	mustAllocate(t, a, "a", Request{Ports: []int{20000}})
	if err := a.Release("a", 20000); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("b", Request{Count: 2}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Allocate(Count 2) during quarantine = %v, want unavailable", err)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	if _, err := a.Allocate("b", Request{Ports: []int{20000}}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "quarantine") {
		t.Errorf("Allocate(20000) 1ns before the quarantine ends = %v, want a conflict about quarantine", err)
	}
	clk.Advance(time.Nanosecond)
	if got := a.Free(); got != 2 {
		t.Errorf("Free() once the quarantine is over = %d, want 2", got)
	}
	mustAllocate(t, a, "b", Request{Ports: []int{20000}})

	// ReleaseOwner quarantines as well.
	if got := a.ReleaseOwner("b"); !slices.Equal(got, []int{20000}) {
		t.Errorf("ReleaseOwner(b) = %v, want [20000]", got)
	}
	if _, err := a.Allocate("c", Request{Ports: []int{20000}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Allocate(20000) after ReleaseOwner = %v, want a conflict", err)
	}
}

// The owner that released a port may take it back during its quarantine (a
// service stopped and started again keeps its port); a stale quarantine
// entry left by that must not end a later quarantine early.
func TestQuarantineOwnerReclaims(t *testing.T) {
	clk := clocktest.New()
	a := newTest(t, Config{Min: 20000, Max: 20001, Quarantine: time.Minute, Now: clk.Now})
	mustAllocate(t, a, "svc", Request{Ports: []int{20000}})
	if err := a.Release("svc", 20000); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("other", Request{Ports: []int{20000}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Allocate(20000) by another owner in quarantine = %v, want conflict", err)
	}
	mustAllocate(t, a, "svc", Request{Ports: []int{20000}})
	if got := a.Free(); got != 1 {
		t.Errorf("Free() after the owner took its port back = %d, want 1", got)
	}
	clk.Advance(30 * time.Second)
	if err := a.Release("svc", 20000); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second) // the first quarantine is over, the second is not
	if _, err := a.Allocate("other", Request{Ports: []int{20000}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Allocate(20000) by another owner during the second quarantine = %v, want conflict", err)
	}
	clk.Advance(30 * time.Second)
	mustAllocate(t, a, "other", Request{Ports: []int{20000}})
}

func TestQuarantineOff(t *testing.T) {
	a := newTest(t, Config{Min: 20000, Max: 20000, Quarantine: -1})
	for i := range 3 {
		owner := fmt.Sprint("svc", i)
		mustAllocate(t, a, owner, Request{Count: 1})
		if err := a.Release(owner, 20000); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Free(); got != 1 {
		t.Errorf("Free() = %d, want 1", got)
	}
}

func TestReleaseOwner(t *testing.T) {
	a := newTest(t, Config{Min: 20000, Max: 20009, StatePath: filepath.Join(t.TempDir(), "ports.json")})
	mustAllocate(t, a, "a", Request{Ports: []int{20007, 20001}})
	mustAllocate(t, a, "b", Request{Ports: []int{20002}})
	mustAllocate(t, a, "a", Request{Ports: []int{20004}})
	if got, want := a.ReleaseOwner("a"), []int{20001, 20004, 20007}; !slices.Equal(got, want) {
		t.Errorf("ReleaseOwner(a) = %v, want %v", got, want)
	}
	if got := a.ReleaseOwner("a"); got != nil {
		t.Errorf("second ReleaseOwner(a) = %v, want nil", got)
	}
	if got := a.ReleaseOwner("nobody"); got != nil {
		t.Errorf("ReleaseOwner(nobody) = %v, want nil", got)
	}
	if diff := cmp.Diff(map[int]string{20002: "b"}, a.Held()); diff != "" {
		t.Errorf("Held() (-want +got):\n%s", diff)
	}
	if got := a.Free(); got != 6 {
		t.Errorf("Free() = %d, want 6 (3 in quarantine, 1 held)", got)
	}
	assertFileMatches(t, a)
}

// TestRandomIsUniform checks that random ports are spread over the free ones
// rather than handed out in order.
func TestRandomIsUniform(t *testing.T) {
	const size, draws = 50, 20000
	a := newTest(t, Config{Min: 30000, Max: 30000 + size - 1, Quarantine: -1})
	mustAllocate(t, a, "fixed", Request{Ports: []int{30000, 30010}})
	counts := make(map[int]int)
	sequential := 0
	for range draws / 2 {
		got := mustAllocate(t, a, "r", Request{Count: 2})
		counts[got[0]]++
		counts[got[1]]++
		if got[1] == got[0]+1 {
			sequential++
		}
		if err := a.Release("r", got...); err != nil {
			t.Fatal(err)
		}
	}
	if counts[30000] != 0 || counts[30010] != 0 {
		t.Errorf("held ports were drawn: %d and %d times", counts[30000], counts[30010])
	}
	want := float64(draws) / (size - 2)
	for p := 30001; p < 30000+size; p++ {
		if p == 30010 {
			continue
		}
		// The standard deviation is about sqrt(want) = 20; 30% is 6 of them.
		if got := float64(counts[p]); got < want*0.7 || got > want*1.3 {
			t.Errorf("port %d drawn %v times, want about %.0f", p, got, want)
		}
	}
	// Two ports in a row would come up 1 time in 48 by chance.
	if sequential > draws/2/10 {
		t.Errorf("%d of %d draws of 2 were consecutive ports", sequential, draws/2)
	}
}

// listenRange finds a port that the test can listen on with the port above
// it free as well, and listens on the lower one with network.
func listenRange(t *testing.T, network string) (held int) {
	t.Helper()
	for range 20 {
		var port int
		var closer interface{ Close() error }
		if network == "tcp" {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port, closer = l.Addr().(*net.TCPAddr).Port, l
		} else {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port, closer = c.LocalAddr().(*net.UDPAddr).Port, c
		}
		if port < 65535 && ProbeOS(port+1) {
			t.Cleanup(func() { closer.Close() })
			return port
		}
		closer.Close()
	}
	t.Skip("found no free pair of ports")
	return 0
}

func TestOSUsedPortIsSkipped(t *testing.T) {
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			used := listenRange(t, network)
			a, err := New(Config{Min: used, Max: used + 1, Quarantine: -1}) // the real probe
			if err != nil {
				t.Fatal(err)
			}
			for range 10 {
				got := mustAllocate(t, a, "svc", Request{Count: 1})
				if got[0] != used+1 {
					t.Fatalf("Allocate(Count 1) = %v, want [%d]: %d is in use", got, used+1, used)
				}
				if err := a.Release("svc", got...); err != nil {
					t.Fatal(err)
				}
			}
			_, err = a.Allocate("svc", Request{Ports: []int{used}})
			if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "in use by another process") {
				t.Errorf("Allocate(%d) = %v, want a conflict: in use by another process", used, err)
			}
			_, err = a.Allocate("svc", Request{Count: 2})
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "only 1 of the 2 ports") {
				t.Errorf("Allocate(Count 2) = %v, want unavailable: only 1 of the 2 ports are free", err)
			}
			if len(a.Held()) != 0 {
				t.Errorf("Held() = %v after refused requests", a.Held())
			}
		})
	}
}

func TestProbeOS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if ProbeOS(port) {
		t.Errorf("ProbeOS(%d) = true while a TCP listener holds it", port)
	}
	l.Close()
	if !ProbeOS(port) {
		t.Errorf("ProbeOS(%d) = false after the listener closed", port)
	}
	c, err := net.ListenPacket("udp", "[::]:0")
	if err != nil {
		c, err = net.ListenPacket("udp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
	}
	port = c.LocalAddr().(*net.UDPAddr).Port
	if ProbeOS(port) {
		t.Errorf("ProbeOS(%d) = true while a UDP socket holds it", port)
	}
	c.Close()
}

func TestPersistence(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agent", "state") // New makes the directories
	path := filepath.Join(dir, "ports.json")
	clk := clocktest.New()
	cfg := Config{Min: 20000, Max: 20009, Quarantine: time.Minute, StatePath: path, Now: clk.Now, Probe: allFree}
	a := newTest(t, cfg)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("New did not create the state file: %v", err)
	}
	random := mustAllocate(t, a, "svc-a", Request{Ports: []int{20001, 20002}, Count: 2})
	other := mustAllocate(t, a, "svc-b", Request{Count: 1})
	if err := a.Release("svc-a", 20002); err != nil {
		t.Fatal(err)
	}
	clk.Advance(30 * time.Second)

	b := newTest(t, cfg) // an agent restart
	if diff := cmp.Diff(a.Held(), b.Held()); diff != "" {
		t.Errorf("Held() after reload (-before +after):\n%s", diff)
	}
	if len(b.Held()) != 4 || b.Free() != a.Free() {
		t.Errorf("after reload: Held() = %v, Free() = %d, want 4 held and Free() = %d", b.Held(), b.Free(), a.Free())
	}
	if o, _ := b.Owner(random[2]); o != "svc-a" {
		t.Errorf("Owner(%d) after reload = %q, want svc-a", random[2], o)
	}
	_, err := b.Allocate("svc-c", Request{Ports: []int{20002}})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), `released by "svc-a"`) {
		t.Errorf("Allocate(20002) after reload = %v, want a conflict: still in quarantine", err)
	}
	clk.Advance(30 * time.Second)
	mustAllocate(t, b, "svc-c", Request{Ports: []int{20002}})

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %d files, want only ports.json (no temporary files left)", len(entries))
	}

	// A quarantine that ended while the agent was down is gone on reload.
	if err := b.Release("svc-b", other...); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	c := newTest(t, cfg)
	if got := c.Free(); got != 6 {
		t.Errorf("Free() after a reload past the quarantine = %d, want 6", got)
	}
}

func TestOwnerNamesSurviveTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.json")
	cfg := Config{Min: 20000, Max: 20009, StatePath: path, Probe: allFree}
	a := newTest(t, cfg)
	owners := []string{`quote"back\\slash`, "new\nline\ttab", "ünï/cödé 🚀", "<html>&", strings.Repeat("x", maxOwnerLen)}
	for i, o := range owners {
		mustAllocate(t, a, o, Request{Ports: []int{20000 + i}})
	}
	b := newTest(t, cfg)
	if diff := cmp.Diff(a.Held(), b.Held()); diff != "" {
		t.Errorf("Held() after reload (-before +after):\n%s", diff)
	}
}

func TestLoadRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ports.json")
	stale := filepath.Join(dir, ".ports.json.tmp-123")
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	newTest(t, Config{Min: 20000, Max: 20009, StatePath: path})
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file is still there: %v", err)
	}
}

func TestCorruptStateFile(t *testing.T) {
	tests := []struct {
		name, content, why string
	}{
		{name: "empty", content: "", why: "unexpected end of JSON input"},
		{name: "garbage", content: "not json", why: "invalid character"},
		{name: "truncated", content: `{"version": 1, "held": [{"port": 20001,`, why: "unexpected end"},
		{name: "wrong type", content: `{"version": 1, "held": {"20001": "a"}}`, why: "cannot unmarshal"},
		{name: "no version", content: `{"held": []}`, why: "version is 0, want 1"},
		{name: "future version", content: `{"version": 2}`, why: "version is 2"},
		{name: "port zero", content: `{"version": 1, "held": [{"port": 0, "owner": "a"}]}`, why: "held[0]: 0 is not a port number"},
		{name: "port too big", content: `{"version": 1, "held": [{"port": 65536, "owner": "a"}]}`, why: "not a port number"},
		{name: "no owner", content: `{"version": 1, "held": [{"port": 20001}]}`, why: "held[0]: owner: must not be empty"},
		{name: "held twice", content: `{"version": 1, "held": [{"port": 20001, "owner": "a"}, {"port": 20001, "owner": "b"}]}`, why: "held[1]: port 20001 is listed twice (also held[0])"},
		{name: "held and resting", content: `{"version": 1, "held": [{"port": 20001, "owner": "a"}], "quarantine": [{"port": 20001, "owner": "b", "until": "2025-01-02T03:04:05Z"}]}`, why: "quarantine[0]: port 20001 is listed twice"},
		{name: "no until", content: `{"version": 1, "quarantine": [{"port": 20001, "owner": "b"}]}`, why: "quarantine[0]: until is missing"},
		{name: "bad until", content: `{"version": 1, "quarantine": [{"port": 20001, "owner": "b", "until": "soon"}]}`, why: "cannot parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ports.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{Min: 20000, Max: 20009, StatePath: path, Probe: allFree})
			if err == nil {
				t.Fatalf("New with state %q succeeded, want an error", tc.content)
			}
			for _, want := range []string{path, "is corrupt", tc.why, "move it away"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New with state %q = %v, want it to say %q", tc.content, err, want)
				}
			}
			// The file is left for a person to look at.
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Errorf("the corrupt file was changed to %q", b)
			}
		})
	}
}

func TestStatePathUnwritable(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{StatePath: filepath.Join(notDir, "ports.json"), Probe: allFree}); err == nil {
		t.Error("New with a state path under a regular file succeeded")
	}
}

// TestSaveFailureChangesNothing checks that a change that cannot be saved is
// not made: otherwise a restart would forget a port that a workload uses.
func TestSaveFailureChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "ports.json")
	clk := clocktest.New()
	a := newTest(t, Config{Min: 20000, Max: 20009, StatePath: path, Now: clk.Now})
	mustAllocate(t, a, "a", Request{Ports: []int{20001, 20002}})
	if err := os.RemoveAll(dir); err != nil { // now no temporary file can be made
		t.Fatal(err)
	}

	if got, err := a.Allocate("b", Request{Ports: []int{20003}, Count: 2}); err == nil || !strings.Contains(err.Error(), "save port state "+path) {
		t.Errorf("Allocate with an unwritable state = %v, %v, want a save error", got, err)
	}
	if err := a.Release("a", 20001); err == nil || !strings.Contains(err.Error(), "save port state") {
		t.Errorf("Release with an unwritable state = %v, want a save error", err)
	}
	if diff := cmp.Diff(map[int]string{20001: "a", 20002: "a"}, a.Held()); diff != "" {
		t.Errorf("Held() after failed saves (-want +got):\n%s", diff)
	}
	if got := a.Free(); got != 8 {
		t.Errorf("Free() = %d, want 8", got)
	}

	// ReleaseOwner cannot report the error; it releases in memory and the
	// file catches up with the next save.
	if got := a.ReleaseOwner("a"); len(got) != 2 {
		t.Errorf("ReleaseOwner(a) = %v, want both ports", got)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mustAllocate(t, a, "b", Request{Ports: []int{20005}})
	assertFileMatches(t, a)
	st, _, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Quarantine) != 2 {
		t.Errorf("state file quarantine = %+v, want ports 20001 and 20002", st.Quarantine)
	}
}

// assertFileMatches checks that the state file says what the allocator holds
// in memory.
func assertFileMatches(t *testing.T, a *Allocator) {
	t.Helper()
	a.mu.Lock()
	mem := a.snapshot()
	a.mu.Unlock()
	disk, found, err := loadState(a.path)
	if err != nil || !found {
		t.Fatalf("load state %s: found %v, %v", a.path, found, err)
	}
	// A quarantine that is over means nothing, and the allocator drops it
	// without writing the file.
	now := a.now()
	over := func(r restingPort) bool { return !now.Before(r.Until) }
	mem.Quarantine = slices.DeleteFunc(mem.Quarantine, over)
	disk.Quarantine = slices.DeleteFunc(disk.Quarantine, over)
	if diff := cmp.Diff(mem, disk); diff != "" {
		t.Errorf("state file differs from memory (-memory +file):\n%s", diff)
	}
}

// TestHammer runs many owners against a small range at once and checks,
// from the outside, that no port is ever granted twice, that nothing leaks,
// and that the state file ends up equal to the state in memory.
func TestHammer(t *testing.T) {
	const (
		min, max   = 40000, 40063
		goroutines = 16
	)
	ops := 2000
	if testing.Short() {
		ops = 300
	}
	osUsed := []int{40010, 40033}
	var ticks atomic.Int64
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return base.Add(time.Duration(ticks.Load()) * time.Millisecond) }
	path := filepath.Join(t.TempDir(), "ports.json")
	cfg := Config{Min: min, Max: max, Quarantine: 20 * time.Millisecond, StatePath: path, Now: now, Probe: busy(osUsed...)}
	a := newTest(t, cfg)

	var (
		mu      sync.Mutex
		granted = make(map[int]string) // what the test has seen granted and not yet released
	)
	take := func(owner string, ports []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ports {
			if o, ok := granted[p]; ok {
				t.Errorf("port %d granted to %s while %s holds it", p, owner, o)
			}
			if p < min || p > max || slices.Contains(osUsed, p) {
				t.Errorf("port %d granted to %s: outside the range or used by the OS", p, owner)
			}
			granted[p] = owner
		}
	}
	// give forgets ports before they are released: once released they may
	// be granted to someone else at any moment.
	give := func(owner string, ports []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ports {
			if granted[p] != owner {
				t.Errorf("test bug: %s gives back %d, held by %q", owner, p, granted[p])
			}
			delete(granted, p)
		}
	}

	var grants, conflicts, unavailable atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("g", g)
			var mine []int
			for range ops {
				ticks.Add(1)
				switch op := rand.IntN(100); {
				case op < 55: // allocate: random, specific or both
					var req Request
					if op < 35 || rand.IntN(2) == 0 {
						req.Count = 1 + rand.IntN(6)
					}
					if op >= 35 {
						for range 1 + rand.IntN(3) {
							req.Ports = append(req.Ports, min+rand.IntN(max-min+1))
						}
					}
					got, err := a.Allocate(owner, req)
					switch {
					case err == nil:
						if len(got) != len(req.Ports)+req.Count {
							t.Errorf("Allocate(%+v) = %v: wrong number of ports", req, got)
						}
						take(owner, got)
						mine = append(mine, got...)
						grants.Add(1)
					case errors.Is(err, errdefs.ErrConflict):
						conflicts.Add(1)
					case errors.Is(err, errdefs.ErrUnavailable):
						unavailable.Add(1)
					case errors.Is(err, errdefs.ErrInvalid) && strings.Contains(err.Error(), "twice"):
					default:
						t.Errorf("Allocate(%+v): unexpected error %v", req, err)
					}
				case op < 85: // release some of mine
					if len(mine) == 0 {
						continue
					}
					rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
					n := 1 + rand.IntN(len(mine))
					some := mine[:n]
					give(owner, some)
					if err := a.Release(owner, some...); err != nil {
						t.Errorf("Release(%v): %v", some, err)
					}
					mine = slices.Clone(mine[n:])
				case op < 92: // release everything
					give(owner, mine)
					got := a.ReleaseOwner(owner)
					slices.Sort(got)
					slices.Sort(mine)
					if !slices.Equal(got, mine) {
						t.Errorf("ReleaseOwner(%s) = %v, want %v", owner, got, mine)
					}
					mine = nil
				default: // release a port that is not mine
					p := min + rand.IntN(max-min+1)
					if slices.Contains(mine, p) {
						continue
					}
					err := a.Release(owner, p)
					if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrConflict) {
						t.Errorf("Release(%d) of a port %s does not hold = %v, want not found or conflict", p, owner, err)
					}
				}
			}
			// Leave some held for the file check below.
			if g%2 == 0 {
				give(owner, mine)
				a.ReleaseOwner(owner)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d grants, %d conflicts, %d unavailable", grants.Load(), conflicts.Load(), unavailable.Load())
	if grants.Load() == 0 || conflicts.Load() == 0 || unavailable.Load() == 0 {
		t.Errorf("the mix of requests did not exercise grants, conflicts and exhaustion")
	}

	mu.Lock()
	if diff := cmp.Diff(granted, a.Held()); diff != "" {
		t.Errorf("Held() differs from what the test saw granted (-test +allocator):\n%s", diff)
	}
	mu.Unlock()
	assertFileMatches(t, a)
	b := newTest(t, cfg)
	if diff := cmp.Diff(a.Held(), b.Held()); diff != "" {
		t.Errorf("Held() after reload (-before +after):\n%s", diff)
	}

	for g := range goroutines {
		a.ReleaseOwner(fmt.Sprint("g", g))
	}
	assertFileMatches(t, a)
	ticks.Add(int64(cfg.Quarantine/time.Millisecond) + 1)
	if got := a.Free(); got != max-min+1 {
		t.Errorf("Free() after releasing everything and waiting out the quarantine = %d, want %d", got, max-min+1)
	}
	if held := a.Held(); len(held) != 0 {
		t.Errorf("Held() = %v, want empty", held)
	}
}

// BenchmarkAllocateRelease measures one random port allocated and released,
// from parallel goroutines.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, bc := range []struct {
		name  string
		probe func(int) bool
		state bool
	}{
		{name: "probe=off", probe: allFree},
		{name: "probe=on", probe: ProbeOS},
		{name: "probe=off,state=file", probe: allFree, state: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// A clock that moves 10ms a call keeps a few thousand ports in
			// quarantine, as a busy node would.
			var ticks atomic.Int64
			base := time.Now()
			cfg := Config{Probe: bc.probe, Now: func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * 10 * time.Millisecond) }}
			if bc.state {
				cfg.StatePath = filepath.Join(b.TempDir(), "ports.json")
			}
			a, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			var id atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				owner := fmt.Sprint("bench", id.Add(1))
				for pb.Next() {
					got, err := a.Allocate(owner, Request{Count: 1})
					if err != nil {
						b.Error(err)
						return
					}
					if err := a.Release(owner, got...); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocations/s")
		})
	}
}
