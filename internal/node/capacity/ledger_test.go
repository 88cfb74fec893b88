package capacity

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/clocktest"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// clock is a settable clock for Config.Now.

// testHardware is a machine with 8 cores, 16 GiB of memory, 100 GiB of disk
// and 4 GPUs; a 50 % share offers 4 CPUs, 8192 MB, 51200 MB and 2 GPUs.
func testHardware() api.Hardware {
	return api.Hardware{
		Cores:       8,
		MemoryBytes: 16 << 30,
		DiskBytes:   100 << 30,
		GPUs:        []api.GPU{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}},
	}
}

// roomy is a machine that has more free than any test asks for.
func roomy() (api.Resources, error) {
	return api.Resources{CPUs: 64, MemoryMB: 1 << 30, DiskMB: 1 << 30}, nil
}

// newTest returns a ledger on testHardware with a fake clock and a roomy
// machine, unless cfg says otherwise.
func newTest(t testing.TB, cfg Config) *Ledger {
	t.Helper()
	if cfg.Hardware.Cores == 0 {
		cfg.Hardware = testHardware()
	}
	if cfg.Now == nil {
		cfg.Now = clocktest.New().Now
	}
	if cfg.MachineFree == nil {
		cfg.MachineFree = roomy
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// onboarded returns a ledger onboarded with a 50 % share.
func onboarded(t testing.TB, cfg Config) *Ledger {
	t.Helper()
	l := newTest(t, cfg)
	if _, err := l.Onboard(50, 1000); err != nil {
		t.Fatalf("Onboard(50): %v", err)
	}
	return l
}

func fieldOf(err error) string {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func pool(name string, r api.Resources) api.Allocation {
	return api.Allocation{Kind: api.AllocationPool, Name: name, Resources: r}
}

func TestOnboardShare(t *testing.T) {
	for _, tc := range []struct {
		share int
		ok    bool
	}{{9, false}, {10, true}, {50, true}, {90, true}, {91, false}, {-5, false}} {
		l := newTest(t, Config{})
		_, err := l.Onboard(tc.share, 100)
		if tc.ok && err != nil {
			t.Errorf("Onboard(%d) = %v, want success", tc.share, err)
		}
		if !tc.ok && (!errors.Is(err, errdefs.ErrInvalid) || fieldOf(err) != "share") {
			t.Errorf("Onboard(%d) = %v, want a field error naming share", tc.share, err)
		}
	}
}

func TestOffered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hw    api.Hardware
		share int
		want  api.Resources
	}{
		{"half", testHardware(), 50, api.Resources{CPUs: 4, MemoryMB: 8192, DiskMB: 51200, GPUs: 2}},
		{"cpus to hundredths", api.Hardware{Cores: 3, MemoryBytes: 1000 << 20}, 33,
			api.Resources{CPUs: 0.99, MemoryMB: 330}},
		{"one core at the least share", api.Hardware{Cores: 1, MemoryBytes: 1 << 30}, 10,
			api.Resources{CPUs: 0.1, MemoryMB: 102}},
		{"gpus round down", api.Hardware{Cores: 2, MemoryBytes: 1 << 30, GPUs: make([]api.GPU, 3)}, 90,
			api.Resources{CPUs: 1.8, MemoryMB: 921, GPUs: 2}},
		{"one gpu at half is none", api.Hardware{Cores: 2, MemoryBytes: 1 << 30, GPUs: make([]api.GPU, 1)}, 50,
			api.Resources{CPUs: 1, MemoryMB: 512}},
		{"bytes not whole MB", api.Hardware{Cores: 16, MemoryBytes: 16_000_000_000, DiskBytes: 500_000_000_000}, 50,
			api.Resources{CPUs: 8, MemoryMB: 7629, DiskMB: 238418}},
		{"odd cores at 15 %", api.Hardware{Cores: 7, MemoryBytes: 1 << 30}, 15,
			api.Resources{CPUs: 1.05, MemoryMB: 153}},
		{"cgroup quota below the cores", api.Hardware{Cores: 2, CPULimit: 1.5, MemoryBytes: 96 << 20}, 50,
			api.Resources{CPUs: 0.75, MemoryMB: 48}},
		{"cgroup quota of a third", api.Hardware{Cores: 1, CPULimit: 1.0 / 3, MemoryBytes: 1 << 30}, 90,
			api.Resources{CPUs: 0.29, MemoryMB: 921}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTest(t, Config{Hardware: tc.hw})
			got, err := l.Onboard(tc.share, 123.4)
			if err != nil {
				t.Fatalf("Onboard(%d): %v", tc.share, err)
			}
			if diff := cmp.Diff(tc.want, got.Offered); diff != "" {
				t.Errorf("Onboard(%d).Offered (-want +got):\n%s", tc.share, diff)
			}
			wantCPUs := float64(tc.hw.Cores)
			if tc.hw.CPULimit > 0 {
				wantCPUs = tc.hw.CPULimit
			}
			if !got.Onboarded || got.SharePercent != tc.share || got.Registered.CPUScore != 123.4 || got.Registered.CPUs != wantCPUs {
				t.Errorf("Onboard(%d) = %+v", tc.share, got)
			}
		})
	}
}

func TestOnboardNeedsHardware(t *testing.T) {
	l := newTest(t, Config{Hardware: api.Hardware{Cores: 4}})
	_, err := l.Onboard(50, 1)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("Onboard without memory = %v, want unavailable naming memory", err)
	}
	if _, err := newTest(t, Config{}).Onboard(50, -1); fieldOf(err) != "cpu_score" {
		t.Errorf("Onboard(score -1) = %v, want a field error naming cpu_score", err)
	}
}

func TestAllocateFits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		want  api.Resources
		short api.Resources // zero: fits
		msg   string
	}{
		{"fits", api.Resources{CPUs: 2, MemoryMB: 4096}, api.Resources{}, ""},
		{"everything offered", api.Resources{CPUs: 4, MemoryMB: 8192, DiskMB: 51200, GPUs: 2}, api.Resources{}, ""},
		{"fractions add up exactly", api.Resources{CPUs: 0.1 + 0.2 + 3.7}, api.Resources{}, ""},
		{"cpus", api.Resources{CPUs: 5, MemoryMB: 4096}, api.Resources{CPUs: 1},
			"does not fit on this node: needs 5 CPUs, 4096 MB memory; free 4 CPUs, 8192 MB memory (short: 1 CPU)"},
		{"memory and disk", api.Resources{CPUs: 0.5, MemoryMB: 10000, DiskMB: 60000}, api.Resources{MemoryMB: 1808, DiskMB: 8800},
			"needs 0.5 CPUs, 10000 MB memory, 60000 MB disk; free 4 CPUs, 8192 MB memory, 51200 MB disk (short: 1808 MB memory, 8800 MB disk)"},
		{"gpus", api.Resources{GPUs: 3}, api.Resources{GPUs: 1}, "needs 3 GPUs; free 2 GPUs (short: 1 GPU)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := onboarded(t, Config{})
			got, err := l.Allocate(pool("s1", tc.want), "")
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("Allocate(%+v) = %v, want success", tc.want, err)
				}
				if got.ID == "" || got.CreatedAt.IsZero() {
					t.Errorf("Allocate(%+v) = %+v, want an id and a creation time", tc.want, got)
				}
				return
			}
			var se *ShortError
			if !errors.As(err, &se) || !errors.Is(err, errdefs.ErrConflict) {
				t.Fatalf("Allocate(%+v) = %v, want a *ShortError that is a conflict", tc.want, err)
			}
			if se.Machine {
				t.Errorf("ShortError.Machine = true, want false")
			}
			if diff := cmp.Diff(tc.short, se.Short); diff != "" {
				t.Errorf("Short (-want +got):\n%s", diff)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "allocate pool s1: ") {
				t.Errorf("Allocate(%+v) = %q, want it to contain %q", tc.want, err, tc.msg)
			}
			if n := len(l.List()); n != 0 {
				t.Errorf("after a refused allocation List has %d entries, want 0", n)
			}
		})
	}
}

func TestAllocateMachineFree(t *testing.T) {
	machine := api.Resources{CPUs: 0, MemoryMB: 1000, DiskMB: 50}
	l := onboarded(t, Config{MachineFree: func() (api.Resources, error) { return machine, nil }})

	// CPUs are booked, not measured: an idle estimate of 0 refuses nothing.
	if _, err := l.Allocate(pool("cpu", api.Resources{CPUs: 2, MemoryMB: 500}), ""); err != nil {
		t.Fatalf("Allocate(2 CPUs, 500 MB) on a busy machine: %v", err)
	}
	_, err := l.Allocate(pool("mem", api.Resources{MemoryMB: 2000}), "")
	var se *ShortError
	if !errors.As(err, &se) || !se.Machine {
		t.Fatalf("Allocate(2000 MB) with 1000 MB available = %v, want a machine *ShortError", err)
	}
	want := "does not fit on this machine now: needs 2000 MB memory; the machine has 1000 MB memory available (short: 1000 MB memory)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q, want it to contain %q", err, want)
	}
	if _, err := l.Allocate(pool("disk", api.Resources{DiskMB: 51}), ""); !errors.As(err, &se) || se.Short.DiskMB != 1 {
		t.Errorf("Allocate(51 MB disk) with 50 MB available = %v, want short 1 MB disk", err)
	}

	broken := onboarded(t, Config{MachineFree: func() (api.Resources, error) { return api.Resources{}, errors.New("no /proc") }})
	if _, err := broken.Allocate(pool("x", api.Resources{CPUs: 1}), ""); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("Allocate with a failing machine probe = %v, want its error", err)
	}
	unsupported := onboarded(t, Config{MachineFree: func() (api.Resources, error) { return api.Resources{}, errors.ErrUnsupported }})
	if _, err := unsupported.Allocate(pool("x", api.Resources{MemoryMB: 8192}), ""); err != nil {
		t.Errorf("Allocate where the machine cannot be measured = %v, want the books to decide", err)
	}
}

func TestNotOnboarded(t *testing.T) {
	l := newTest(t, Config{})
	_, err := l.Allocate(pool("s1", api.Resources{CPUs: 1}), "")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "nodemgr node onboard NODE --share 50") {
		t.Errorf("Allocate before onboarding = %v, want unavailable with the command to run", err)
	}
	if _, err := l.Commit("job", api.Resources{CPUs: 1}, nil, time.Minute); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Commit before onboarding = %v, want unavailable", err)
	}
}

func TestInvalidAllocation(t *testing.T) {
	l := onboarded(t, Config{})
	for _, tc := range []struct {
		a     api.Allocation
		field string
	}{
		{api.Allocation{Kind: "vm", Name: "x"}, "kind"},
		{api.Allocation{Kind: api.AllocationService}, "name"},
		{pool("x", api.Resources{CPUs: -1}), "cpus"},
		{pool("x", api.Resources{MemoryMB: -1}), "memory_mb"},
		{pool("x", api.Resources{DiskMB: -1}), "disk_mb"},
		{pool("x", api.Resources{GPUs: -1}), "gpus"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", Ports: []int{0}}, "ports"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", Ports: []int{70000}}, "ports"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", Ports: []int{20000, 20000}}, "ports"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", GPUIndexes: []int{7}}, "gpu_indexes"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", GPUIndexes: []int{1, 1}}, "gpu_indexes"},
		{api.Allocation{Kind: api.AllocationPool, Name: "x", GPUIndexes: []int{1}, Resources: api.Resources{GPUs: 2}}, "gpus"},
		{api.Allocation{ID: strings.Repeat("x", 200), Kind: api.AllocationPool, Name: "x"}, "id"},
	} {
		if _, err := l.Allocate(tc.a, ""); fieldOf(err) != tc.field {
			t.Errorf("Allocate(%+v) = %v, want a field error naming %s", tc.a, err, tc.field)
		}
	}
}

func TestCommitmentExpires(t *testing.T) {
	clk := clocktest.New()
	path := filepath.Join(t.TempDir(), "capacity.json")
	l := onboarded(t, Config{Now: clk.Now, StatePath: path})
	c, err := l.Commit("job-1", api.Resources{CPUs: 3, MemoryMB: 1024}, []int{20000}, time.Minute)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if !c.ExpiresAt.Equal(clk.Now().Add(time.Minute)) || !strings.HasPrefix(c.ID, "c-") {
		t.Errorf("Commit = %+v", c)
	}
	if _, err := l.Allocate(pool("s1", api.Resources{CPUs: 2}), ""); err == nil {
		t.Fatalf("Allocate(2 CPUs) with 3 of 4 committed succeeded")
	}
	if _, err := l.Allocate(api.Allocation{Kind: api.AllocationService, Name: "svc", Ports: []int{20000}}, ""); !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "commitment "+c.ID) {
		t.Errorf("Allocate(port 20000) while committed = %v, want a conflict naming the commitment", err)
	}

	clk.Advance(time.Minute)
	nr, err := l.Resources()
	if err != nil {
		t.Fatalf("Resources: %v", err)
	}
	if len(nr.Commitments) != 0 || nr.Committed != (api.Resources{}) || nr.Free.CPUs != 4 {
		t.Errorf("after expiry Resources = %+v, want nothing committed and 4 CPUs free", nr)
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.Contains(string(b), c.ID) {
		t.Errorf("state file after expiry still holds %s (err %v):\n%s", c.ID, err, b)
	}
	if _, err := l.Allocate(api.Allocation{Kind: api.AllocationService, Name: "svc", Ports: []int{20000}, Resources: api.Resources{CPUs: 4}}, ""); err != nil {
		t.Errorf("Allocate after the commitment expired: %v", err)
	}
	if err := l.Release(c.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Release(expired) = %v, want not found", err)
	}
}

func TestAllocateFromCommitment(t *testing.T) {
	l := onboarded(t, Config{})
	c, err := l.Commit("job-1", api.Resources{CPUs: 4, MemoryMB: 2048}, []int{20000, 20001}, time.Minute)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// The whole offer is committed: only the commitment's owner can place.
	if _, err := l.Allocate(pool("other", api.Resources{CPUs: 1}), ""); err == nil {
		t.Fatalf("Allocate without the commitment succeeded while everything is committed")
	}
	if _, err := l.Allocate(pool("big", api.Resources{CPUs: 4, MemoryMB: 4096}), c.ID); !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "does not cover") {
		t.Errorf("Allocate(more than committed) = %v, want a conflict saying it does not cover", err)
	}
	if _, err := l.Allocate(pool("x", api.Resources{CPUs: 1}), "c-nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Allocate(from unknown commitment) = %v, want not found", err)
	}
	a, err := l.Allocate(api.Allocation{Kind: api.AllocationContainer, Name: "job-1",
		Resources: api.Resources{CPUs: 3, MemoryMB: 2048}, Ports: []int{20000}}, c.ID)
	if err != nil {
		t.Fatalf("Allocate(from commitment): %v", err)
	}
	nr, _ := l.Resources()
	want := api.Resources{CPUs: 1, MemoryMB: 8192 - 2048, DiskMB: 51200, GPUs: 2}
	if diff := cmp.Diff(want, nr.Free); diff != "" || len(nr.Commitments) != 0 {
		t.Errorf("after converting, Free (-want +got):\n%s\ncommitments %v", diff, nr.Commitments)
	}
	// The commitment's unused port went back with it.
	if _, err := l.Allocate(api.Allocation{Kind: api.AllocationService, Name: "svc", Ports: []int{20001}}, ""); err != nil {
		t.Errorf("Allocate(port 20001) after the commitment was converted: %v", err)
	}
	if err := l.Release(c.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Release(converted) = %v, want not found", err)
	}
	if err := l.Free(a.ID); err != nil {
		t.Errorf("Free(%s): %v", a.ID, err)
	}
}

func TestCommitRelease(t *testing.T) {
	l := onboarded(t, Config{})
	for _, tc := range []struct {
		owner string
		r     api.Resources
		ttl   time.Duration
		field string
	}{
		{"", api.Resources{CPUs: 1}, time.Minute, "owner"},
		{"job", api.Resources{CPUs: 1}, 0, "ttl"},
		{"job", api.Resources{MemoryMB: -1}, time.Minute, "memory_mb"},
	} {
		if _, err := l.Commit(tc.owner, tc.r, nil, tc.ttl); fieldOf(err) != tc.field {
			t.Errorf("Commit(%q, %+v, %v) = %v, want a field error naming %s", tc.owner, tc.r, tc.ttl, err, tc.field)
		}
	}
	if _, err := l.Commit("job", api.Resources{GPUs: 3}, nil, time.Minute); !errors.As(err, new(*ShortError)) {
		t.Errorf("Commit(3 GPUs of 2) = %v, want a *ShortError", err)
	}
	c, err := l.Commit("job", api.Resources{CPUs: 4}, nil, time.Hour)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := l.Release(c.ID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := l.Commit("job", api.Resources{CPUs: 4}, nil, time.Hour); err != nil {
		t.Errorf("Commit after Release: %v", err)
	}
}

func TestGPUs(t *testing.T) {
	hw := testHardware() // 4 GPUs, 2 offered
	l := newTest(t, Config{Hardware: hw})
	if _, err := l.Onboard(90, 1); err != nil { // 3 offered
		t.Fatal(err)
	}
	a, err := l.Allocate(api.Allocation{Kind: api.AllocationContainer, Name: "a", GPUIndexes: []int{1}}, "")
	if err != nil || a.GPUs != 1 {
		t.Fatalf("Allocate(gpu 1) = %+v, %v; want 1 GPU", a, err)
	}
	b, err := l.Allocate(pool("b", api.Resources{GPUs: 2}), "")
	if err != nil || !slices.Equal(b.GPUIndexes, []int{0, 2}) {
		t.Fatalf("Allocate(2 GPUs) = %v, %v; want GPUs 0 and 2", b.GPUIndexes, err)
	}
	if _, err := l.Allocate(pool("c", api.Resources{GPUs: 1}), ""); !errors.As(err, new(*ShortError)) {
		t.Errorf("Allocate(a 4th GPU of 3 offered) = %v, want a *ShortError", err)
	}
	if err := l.Free(b.ID); err != nil {
		t.Fatal(err)
	}
	_, err = l.Allocate(api.Allocation{Kind: api.AllocationContainer, Name: "d", GPUIndexes: []int{1}}, "")
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "GPU 1 is held by allocation "+a.ID) {
		t.Errorf("Allocate(gpu 1 again) = %v, want a conflict naming %s", err, a.ID)
	}
	d, err := l.Allocate(api.Allocation{Kind: api.AllocationContainer, Name: "d", GPUIndexes: []int{3, 2}}, "")
	if err != nil || !slices.Equal(d.GPUIndexes, []int{3, 2}) {
		t.Errorf("Allocate(gpus 3, 2) = %v, %v", d.GPUIndexes, err)
	}
}

func TestPorts(t *testing.T) {
	l := onboarded(t, Config{})
	svc := func(name string, ports ...int) api.Allocation {
		return api.Allocation{Kind: api.AllocationService, Name: name, Ports: ports}
	}
	a, err := l.Allocate(svc("a", 20000, 20001), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allocate(svc("b", 20002, 20001), ""); !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "port 20001 is held by allocation "+a.ID) {
		t.Errorf("Allocate(port 20001 twice) = %v, want a conflict naming %s", err, a.ID)
	}
	if _, err := l.Commit("job", api.Resources{}, []int{20000}, time.Minute); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Commit(port 20000 held) = %v, want a conflict", err)
	}
	// All or nothing: the refused request's free port is not held.
	if _, err := l.Allocate(svc("c", 20002), ""); err != nil {
		t.Errorf("Allocate(port 20002): %v", err)
	}
	if err := l.Free(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allocate(svc("d", 20000, 20001), ""); err != nil {
		t.Errorf("Allocate(freed ports): %v", err)
	}
}

func TestIDs(t *testing.T) {
	l := onboarded(t, Config{})
	a := pool("s1", api.Resources{CPUs: 1})
	a.ID = "pool-s1"
	if _, err := l.Allocate(a, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allocate(a, ""); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "pool-s1 exists already") {
		t.Errorf("Allocate(duplicate id) = %v, want a conflict", err)
	}
	got, err := l.Get("pool-s1")
	if err != nil || got.CPUs != 1 {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if _, err := l.Get("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want not found", err)
	}
	if err := l.Free("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Free(unknown) = %v, want not found", err)
	}
	if err := l.SetState("pool-s1", "running"); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Get("pool-s1"); got.State != "running" {
		t.Errorf("State = %q after SetState(running)", got.State)
	}
	if err := l.SetState("nope", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetState(unknown) = %v, want not found", err)
	}
}

func TestReturnedSlicesAreCopies(t *testing.T) {
	l := onboarded(t, Config{})
	ports := []int{20000}
	a, err := l.Allocate(api.Allocation{Kind: api.AllocationService, Name: "s", Ports: ports}, "")
	if err != nil {
		t.Fatal(err)
	}
	ports[0], a.Ports[0] = 1, 2
	l.List()[0].Ports[0] = 3
	if got, _ := l.Get(a.ID); got.Ports[0] != 20000 {
		t.Errorf("books' ports changed through a caller's slice: %v", got.Ports)
	}
}

func TestOffboard(t *testing.T) {
	l := onboarded(t, Config{})
	a, err := l.Allocate(pool("s1", api.Resources{CPUs: 1}), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit("job", api.Resources{CPUs: 1}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	err = l.Offboard(false)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "pool s1 ("+a.ID+")") {
		t.Fatalf("Offboard with an allocation = %v, want a conflict listing it", err)
	}
	if err := l.Offboard(true); err != nil {
		t.Fatalf("Offboard(force): %v", err)
	}
	nr, _ := l.Resources()
	if nr.Onboarded || len(nr.Allocations) != 1 || len(nr.Commitments) != 0 || nr.Free != (api.Resources{}) {
		t.Errorf("after a forced offboard Resources = %+v, want the allocation kept, commitments dropped, nothing free", nr)
	}
	if _, err := l.Allocate(pool("s2", api.Resources{}), ""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Allocate after offboarding = %v, want unavailable", err)
	}
	if err := l.Free(a.ID); err != nil {
		t.Errorf("Free after offboarding: %v", err)
	}
	if err := l.Offboard(false); err != nil {
		t.Errorf("Offboard with nothing allocated: %v", err)
	}
}

func TestReonboard(t *testing.T) {
	l := onboarded(t, Config{}) // 4 CPUs, 8192 MB offered
	if _, err := l.Allocate(pool("s1", api.Resources{CPUs: 3, MemoryMB: 1000}), ""); err != nil {
		t.Fatal(err)
	}
	_, err := l.Onboard(30, 1) // 2.4 CPUs
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "short: 0.6 CPUs") {
		t.Fatalf("Onboard(30) holding 3 CPUs = %v, want a conflict short 0.6 CPUs", err)
	}
	if nr, _ := l.Resources(); nr.SharePercent != 50 {
		t.Errorf("refused re-onboarding changed the share to %d", nr.SharePercent)
	}
	o, err := l.Onboard(40, 1) // 3.2 CPUs
	if err != nil || o.Offered.CPUs != 3.2 {
		t.Fatalf("Onboard(40) = %+v, %v; want 3.2 CPUs offered", o.Offered, err)
	}
	if nr, _ := l.Resources(); nr.Free.CPUs != 0.2 {
		t.Errorf("Free.CPUs = %v, want 0.2", nr.Free.CPUs)
	}
}

func TestResources(t *testing.T) {
	machine := api.Resources{CPUs: 6.5, MemoryMB: 12 << 10, DiskMB: 80 << 10}
	l := onboarded(t, Config{MachineFree: func() (api.Resources, error) { return machine, nil }})
	if _, err := l.Allocate(pool("s1", api.Resources{CPUs: 1.5, MemoryMB: 1024, GPUs: 1}), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit("job", api.Resources{CPUs: 0.5, DiskMB: 100}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	nr, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}
	want := api.NodeResources{
		Committed:   api.Resources{CPUs: 0.5, DiskMB: 100},
		Allocated:   api.Resources{CPUs: 1.5, MemoryMB: 1024, GPUs: 1},
		Free:        api.Resources{CPUs: 2, MemoryMB: 7168, DiskMB: 51100, GPUs: 1},
		MachineFree: &machine,
		Usage:       &api.MachineUsage{CPUPercent: 18.8, MemoryUsedMB: 4096, DiskUsedMB: 20480},
	}
	got := nr
	got.Onboarding, got.Commitments, got.Allocations = api.Onboarding{}, nil, nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resources (-want +got):\n%s", diff)
	}

	l = onboarded(t, Config{MachineFree: func() (api.Resources, error) { return api.Resources{}, errors.New("statfs /data: gone") }})
	if nr, err := l.Resources(); err != nil || nr.MachineFree != nil || nr.MachineFreeError != "statfs /data: gone" {
		t.Errorf("Resources with a failing probe = %+v, %v; want MachineFreeError", nr, err)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		hw   api.Hardware
		free api.Resources
		want api.MachineUsage
	}{
		{"host", api.Hardware{Cores: 4, MemoryBytes: 8 << 30, DiskBytes: 10 << 30},
			api.Resources{CPUs: 3, MemoryMB: 6 << 10, DiskMB: 9 << 10},
			api.MachineUsage{CPUPercent: 25, MemoryUsedMB: 2 << 10, DiskUsedMB: 1 << 10}},
		{"cgroup quota", api.Hardware{Cores: 2, CPULimit: 1.5, MemoryBytes: 96 << 20},
			api.Resources{CPUs: 1.5, MemoryMB: 56},
			api.MachineUsage{CPUPercent: 0, MemoryUsedMB: 40}},
		{"cgroup quota half used", api.Hardware{Cores: 2, CPULimit: 1.5, MemoryBytes: 96 << 20},
			api.Resources{CPUs: 0.75},
			api.MachineUsage{CPUPercent: 50, MemoryUsedMB: 96}},
	} {
		if got := Usage(tc.hw, tc.free); *got != tc.want {
			t.Errorf("%s: Usage(%+v, %+v) = %+v, want %+v", tc.name, tc.hw, tc.free, *got, tc.want)
		}
	}
}

func TestResourcesJSON(t *testing.T) {
	l := newTest(t, Config{})
	nr, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(nr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"onboarded":false`, `"free":{"cpus":0,"memory_mb":0,"disk_mb":0,"gpus":0}`,
		`"commitments":[]`, `"allocations":[]`, `"machine_free":{"cpus":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON of empty books = %s, want it to contain %s", b, want)
		}
	}
}

func TestShortErrorMessage(t *testing.T) {
	err := newShortError(amount{milliCPU: 2000, memMB: 4096}, amount{milliCPU: 1500, memMB: 8192, diskMB: 10}, dimAll, false)
	want := "does not fit on this node: needs 2 CPUs, 4096 MB memory; free 1.5 CPUs, 8192 MB memory (short: 0.5 CPUs); " +
		"free allocations or commitments (`nodemgr node resources` lists them), or onboard a larger share"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if errdefs.Code(err) != "conflict" {
		t.Errorf("Code = %q, want conflict", errdefs.Code(err))
	}
	if newShortError(amount{memMB: 5}, amount{memMB: 5}, dimAll, false) != nil {
		t.Errorf("newShortError for what fits exactly is not nil")
	}
	if newShortError(amount{milliCPU: 5000}, amount{}, dimMem|dimDisk, true) != nil {
		t.Errorf("newShortError compared CPUs it was told to leave out")
	}
}
