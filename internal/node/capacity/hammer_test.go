package capacity

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/clocktest"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// checkInvariants recomputes the books from their entries and checks them
// against the running sums, the offer, and the port and GPU maps. l.mu is
// held, or nothing else uses l.
func checkInvariants(l *Ledger) error {
	var alloc, commit amount
	ports := make(map[int]holder)
	gpus := make(map[int]string)
	take := func(p int, h holder) error {
		if other, dup := ports[p]; dup {
			return fmt.Errorf("port %d is held by %s and %s", p, other, h)
		}
		ports[p] = h
		return nil
	}
	for id, a := range l.allocations {
		alloc = alloc.add(toAmount(a.Resources))
		for _, p := range a.Ports {
			if err := take(p, holder{"allocation", id}); err != nil {
				return err
			}
		}
		if len(a.GPUIndexes) != a.GPUs {
			return fmt.Errorf("allocation %s holds %d GPUs by count and %v by index", id, a.GPUs, a.GPUIndexes)
		}
		for _, g := range a.GPUIndexes {
			if other, dup := gpus[g]; dup {
				return fmt.Errorf("GPU %d is held by allocations %s and %s", g, other, id)
			}
			gpus[g] = id
		}
	}
	for id, c := range l.commitments {
		commit = commit.add(toAmount(c.Resources))
		for _, p := range c.Ports {
			if err := take(p, holder{"commitment", id}); err != nil {
				return err
			}
		}
	}
	switch {
	case alloc != l.allocated:
		return fmt.Errorf("allocations add up to %+v, the books say %+v", alloc, l.allocated)
	case commit != l.committed:
		return fmt.Errorf("commitments add up to %+v, the books say %+v", commit, l.committed)
	case l.onboarding.Onboarded && !l.offered.shortBy(alloc.add(commit)).isZero():
		return fmt.Errorf("allocated %+v + committed %+v exceed the offer %+v", alloc, commit, l.offered)
	case !maps2Equal(ports, l.ports):
		return fmt.Errorf("port map %v, want %v", l.ports, ports)
	case !maps2Equal(gpus, l.gpus):
		return fmt.Errorf("GPU map %v, want %v", l.gpus, gpus)
	}
	return nil
}

func maps2Equal[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// hammerStats counts what the hammer's operations did.
type hammerStats struct {
	allocated, converted, freed, committed, released atomic.Int64
	short, conflicts, notFound                       atomic.Int64
	maxMilliCPU                                      atomic.Int64 // most CPU ever in use
}

// hammer runs 16 goroutines of random Allocate, Free, Commit, Release and
// SetState on l for d, and fails t on any error other than the refusals
// the books are expected to give.
func hammer(t *testing.T, l *Ledger, clk *clocktest.Clock, d time.Duration) *hammerStats {
	t.Helper()
	st := &hammerStats{}
	var (
		errMu sync.Mutex
		errs  []error
	)
	l.changed = func() { // runs with l.mu held
		if err := checkInvariants(l); err != nil {
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}
		inUse := l.allocated.add(l.committed).milliCPU
		for m := st.maxMilliCPU.Load(); inUse > m && !st.maxMilliCPU.CompareAndSwap(m, inUse); m = st.maxMilliCPU.Load() {
		}
	}
	defer func() { l.changed = nil }()

	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			var allocs, commits []string
			for time.Now().Before(deadline) {
				if err := hammerOp(l, clk, rng, st, &allocs, &commits); err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Errorf("invariant broken: %v", err)
	}
	return st
}

// hammerOp does one random operation. Ports come from a small range and
// GPUs are few, so that collisions are common.
func hammerOp(l *Ledger, clk *clocktest.Clock, rng *rand.Rand, st *hammerStats, allocs, commits *[]string) error {
	randResources := func() api.Resources {
		return api.Resources{
			CPUs:     float64(rng.IntN(20)+1) / 10,
			MemoryMB: rng.Int64N(2048),
			DiskMB:   rng.Int64N(8192),
			GPUs:     rng.IntN(2),
		}
	}
	randPorts := func() []int {
		var ports []int
		for range rng.IntN(3) {
			if p := 20000 + rng.IntN(64); !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
		return ports
	}
	pick := func(ids *[]string) string {
		if len(*ids) == 0 {
			return ""
		}
		i := rng.IntN(len(*ids))
		id := (*ids)[i]
		*ids = slices.Delete(*ids, i, i+1)
		return id
	}
	expected := func(err error) error {
		var se *ShortError
		switch {
		case err == nil:
		case errors.As(err, &se):
			st.short.Add(1)
		case errors.Is(err, errdefs.ErrConflict):
			st.conflicts.Add(1)
		case errors.Is(err, errdefs.ErrNotFound):
			st.notFound.Add(1)
		default:
			return err
		}
		return nil
	}

	if rng.IntN(10) == 0 {
		clk.Advance(time.Millisecond)
	}
	switch op := rng.IntN(100); {
	case op < 35: // allocate, sometimes from a commitment, sometimes asking for GPU indexes
		a := api.Allocation{Kind: api.AllocationPool, Name: "s", Resources: randResources(), Ports: randPorts()}
		if rng.IntN(4) == 0 {
			a.GPUs, a.GPUIndexes = 0, []int{rng.IntN(4)}
		}
		from := ""
		if op < 10 {
			from = pick(commits)
			if from != "" { // fit it into what was committed
				a.Resources = api.Resources{CPUs: 0.1, MemoryMB: 1}
				a.GPUIndexes = nil
			}
		}
		got, err := l.Allocate(a, from)
		if err == nil {
			*allocs = append(*allocs, got.ID)
			st.allocated.Add(1)
			if from != "" {
				st.converted.Add(1)
			}
		}
		return expected(err)
	case op < 60:
		id := pick(allocs)
		if id == "" {
			return nil
		}
		if err := l.Free(id); err != nil {
			return fmt.Errorf("Free(%s): %w", id, err) // our own allocation: must be there
		}
		st.freed.Add(1)
	case op < 80:
		ttl := time.Duration(5+rng.IntN(45)) * time.Millisecond
		c, err := l.Commit("job", randResources(), randPorts(), ttl)
		if err == nil {
			*commits = append(*commits, c.ID)
			st.committed.Add(1)
		}
		return expected(err)
	case op < 92:
		id := pick(commits)
		if id == "" {
			return nil
		}
		err := l.Release(id) // not found when it expired
		if err == nil {
			st.released.Add(1)
		}
		return expected(err)
	default:
		if len(*allocs) > 0 {
			return l.SetState((*allocs)[rng.IntN(len(*allocs))], "running")
		}
	}
	return nil
}

// freeAll frees every allocation and commitment, and checks that the books
// are back to zero.
func freeAll(t *testing.T, l *Ledger) {
	t.Helper()
	nr, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range nr.Allocations {
		if err := l.Free(a.ID); err != nil {
			t.Errorf("Free(%s): %v", a.ID, err)
		}
	}
	for _, c := range nr.Commitments {
		if err := l.Release(c.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Release(%s): %v", c.ID, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.allocated.isZero() || !l.committed.isZero() || len(l.ports) != 0 || len(l.gpus) != 0 ||
		len(l.allocations) != 0 || len(l.commitments) != 0 {
		t.Errorf("books after freeing everything: allocated %+v, committed %+v, ports %v, GPUs %v",
			l.allocated, l.committed, l.ports, l.gpus)
	}
}

func TestHammer(t *testing.T) {
	d := 2 * time.Second
	if testing.Short() {
		d = 200 * time.Millisecond
	}
	clk := clocktest.New()
	l := onboarded(t, Config{Now: clk.Now})
	st := hammer(t, l, clk, d)
	t.Logf("allocated %d (%d from commitments), freed %d, committed %d, released %d; refused: %d short, %d conflicts, %d not found; most CPU in use %.1f of %v",
		st.allocated.Load(), st.converted.Load(), st.freed.Load(), st.committed.Load(), st.released.Load(),
		st.short.Load(), st.conflicts.Load(), st.notFound.Load(), float64(st.maxMilliCPU.Load())/1000, l.onboarding.Offered.CPUs)
	for name, n := range map[string]int64{
		"allocations": st.allocated.Load(), "conversions": st.converted.Load(), "short refusals": st.short.Load(),
		"conflicts": st.conflicts.Load(), "expired commitments": st.notFound.Load(),
	} {
		if n == 0 {
			t.Errorf("the hammer made no %s; it tests less than it should", name)
		}
	}
	freeAll(t, l)
	if nr, _ := l.Resources(); nr.Free != nr.Offered {
		t.Errorf("Free = %+v after freeing everything, want the offer %+v", nr.Free, nr.Offered)
	}
}

// TestHammerState hammers a ledger with a state file and checks that the
// file, read back, holds exactly the books in memory.
func TestHammerState(t *testing.T) {
	d := 500 * time.Millisecond
	if testing.Short() {
		d = 100 * time.Millisecond
	}
	clk := clocktest.New()
	cfg := Config{Now: clk.Now, StatePath: filepath.Join(t.TempDir(), "capacity.json")}
	l := onboarded(t, cfg)
	st := hammer(t, l, clk, d)
	t.Logf("allocated %d, freed %d, committed %d with a state file", st.allocated.Load(), st.freed.Load(), st.committed.Load())
	want, err := l.Resources()
	if err != nil {
		t.Fatal(err)
	}
	got, err := newTest(t, cfg).Resources()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("books read back from the state file (-memory +file):\n%s", diff)
	}
	freeAll(t, l)
}

func TestFractionsFillExactly(t *testing.T) {
	l := onboarded(t, Config{}) // 4 CPUs
	for i := range 40 {
		if _, err := l.Allocate(pool("tenth", api.Resources{CPUs: 0.1}), ""); err != nil {
			t.Fatalf("Allocate(0.1 CPU) #%d: %v", i+1, err)
		}
	}
	if _, err := l.Allocate(pool("tenth", api.Resources{CPUs: 0.1}), ""); !errors.As(err, new(*ShortError)) {
		t.Errorf("Allocate(0.1 CPU) #41 = %v, want a *ShortError", err)
	}
	if nr, _ := l.Resources(); nr.Allocated.CPUs != 4 || nr.Free.CPUs != 0 {
		t.Errorf("Allocated %v, Free %v CPUs; want 4 and 0", nr.Allocated.CPUs, nr.Free.CPUs)
	}
}

// BenchmarkAllocateFree allocates and frees in parallel: in memory with an
// injected machine probe, in memory reading /proc and statfs, and with a
// state file written (and fsynced) on every change.
func BenchmarkAllocateFree(b *testing.B) {
	hw := api.Hardware{Cores: 1 << 20, MemoryBytes: 1 << 50, DiskBytes: 1 << 50}
	for _, bc := range []struct {
		name string
		cfg  func(b *testing.B) Config
	}{
		{"memory", func(*testing.B) Config { return Config{Hardware: hw, MachineFree: roomy} }},
		{"memory+proc", func(*testing.B) Config {
			return Config{Hardware: hw, MachineFree: func() (api.Resources, error) {
				r, err := ReadMachineFree(".")
				r.MemoryMB, r.DiskMB = 1<<40, 1<<40 // measured, but let everything fit
				return r, err
			}}
		}},
		{"state", func(b *testing.B) Config {
			return Config{Hardware: hw, MachineFree: roomy, StatePath: filepath.Join(b.TempDir(), "capacity.json")}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := onboarded(b, bc.cfg(b))
			// A few standing allocations, so the state file is not empty.
			for range 20 {
				if _, err := l.Allocate(pool("standing", api.Resources{CPUs: 1, MemoryMB: 1024}), ""); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a, err := l.Allocate(pool("bench", api.Resources{CPUs: 0.5, MemoryMB: 256}), "")
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Free(a.ID); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
		})
	}
}
