package capacity

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Share bounds, in percent of the registered capability.
const (
	MinShare = 10
	MaxShare = 90
)

// Config configures a Ledger.
type Config struct {
	// StatePath is the JSON file that keeps the books across restarts. It
	// is written atomically (temp file, fsync, rename; mode 0600) before
	// each change is acknowledged. Empty keeps the books in memory only.
	StatePath string
	// Hardware is what hw.Detect found; Onboard registers it.
	Hardware api.Hardware
	// DataDir is the directory whose filesystem's free space counts as the
	// machine's free disk. Empty means the directory of StatePath, or the
	// working directory without one.
	DataDir string
	// Now tells the time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
	// MachineFree measures what the machine really has free now. Nil reads
	// /proc/meminfo, /proc/loadavg, statfs(DataDir) and the cgroup's limits
	// (see ReadMachineFree). It is called without the ledger locked. Tests
	// inject one.
	MachineFree func() (api.Resources, error)
	// Ports, if set, is the node's port allocator, kept in step with the
	// commitments: the ports a commitment names are taken from it for as
	// long as the commitment lasts, so nothing else can bind them.
	Ports PortLocker
}

// PortLocker takes ports from the node's port allocator for commitments.
type PortLocker interface {
	// Lock takes ports for owner, all or none. Ports owner holds already
	// count as taken; a port out of the range, held by another owner,
	// resting in quarantine or used by another process is refused.
	Lock(owner string, ports []int) error
	// Unlock gives back what owner holds: into quarantine, or at once
	// when the ports are handed on to the workload the commitment was for.
	Unlock(owner string, quarantine bool)
}

// commitmentOwner is a commitment's name in the port allocator.
func commitmentOwner(id string) string { return "commitment:" + id }

// Ledger is a node's resource books. It is safe for concurrent use.
type Ledger struct {
	path        string
	hw          api.Hardware
	now         func() time.Time
	machineFree func() (api.Resources, error)
	portLock    PortLocker // nil: commitments' ports are only in the books

	// mu guards everything below, and the state file: it is written with
	// mu held, so the file changes in the same order as the books. The
	// file is small and changes are rare next to the workloads they
	// describe (see BenchmarkAllocateFree for the cost).
	mu          sync.Mutex
	onboarding  api.Onboarding
	offered     amount
	allocations map[string]api.Allocation
	commitments map[string]api.Commitment
	allocated   amount // sum over allocations
	committed   amount // sum over commitments
	ports       map[int]holder
	gpus        map[int]string // GPU index → allocation ID

	// changed, if set, is called with mu held after every change (tests
	// check invariants with it).
	changed func()
}

// holder names what holds a port.
type holder struct {
	kind string // "allocation" or "commitment"
	id   string
}

func (h holder) String() string { return h.kind + " " + h.id }

// New returns a ledger with the books found at cfg.StatePath, or empty
// books (not onboarded) if there is no such file yet.
func New(cfg Config) (*Ledger, error) {
	l := &Ledger{
		path:        cfg.StatePath,
		hw:          cfg.Hardware,
		now:         cfg.Now,
		machineFree: cfg.MachineFree,
		portLock:    cfg.Ports,
		allocations: make(map[string]api.Allocation),
		commitments: make(map[string]api.Commitment),
		ports:       make(map[int]holder),
		gpus:        make(map[int]string),
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.machineFree == nil {
		dir := machineDir(cfg)
		l.machineFree = func() (api.Resources, error) { return ReadMachineFree(dir) }
	}
	if l.path == "" {
		return l, nil
	}
	st, found, err := loadState(l.path)
	if err != nil || !found {
		return l, err
	}
	l.restore(st)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire() // those that ended while the agent was away give their ports back
	l.relockPorts()
	return l, nil
}

// relockPorts takes the ports of the live commitments again, in case the
// port allocator's own file lost them. l.mu is held.
func (l *Ledger) relockPorts() {
	if l.portLock == nil {
		return
	}
	for _, c := range l.commitments {
		if len(c.Ports) > 0 {
			_ = l.portLock.Lock(commitmentOwner(c.ID), c.Ports) // held already, or taken since: the books still hold them
		}
	}
}

// machineDir is the directory whose free space is the machine's free disk.
func machineDir(cfg Config) string {
	switch {
	case cfg.DataDir != "":
		return cfg.DataDir
	case cfg.StatePath != "":
		return dirOf(cfg.StatePath)
	}
	return "."
}

// Onboard offers sharePercent of this machine to workloads. It registers
// the capability found in Config.Hardware with score, the CPU benchmark
// score (see Benchmark). A node that is onboarded already may change its
// share, as long as the new offer still covers what is allocated and
// committed.
func (l *Ledger) Onboard(sharePercent int, score float64) (api.Onboarding, error) {
	if sharePercent < MinShare || sharePercent > MaxShare {
		return api.Onboarding{}, fmt.Errorf("onboard: %w",
			errdefs.Field("share", "must be between %d and %d percent, got %d", MinShare, MaxShare, sharePercent))
	}
	if math.IsNaN(score) || math.IsInf(score, 0) || score < 0 {
		return api.Onboarding{}, fmt.Errorf("onboard: %w", errdefs.Field("cpu_score", "must be a number ≥ 0, got %v", score))
	}
	reg, err := registered(l.hw)
	if err != nil {
		return api.Onboarding{}, fmt.Errorf("onboard: %w", err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	now := l.now()
	reg.CPUScore, reg.MeasuredAt = score, now
	offered := offer(toAmount(reg.Resources), sharePercent)
	inUse := l.allocated.add(l.committed)
	if short := offered.shortBy(inUse); !short.isZero() {
		return api.Onboarding{}, errdefs.Conflict("onboard with a %d %% share: it offers %s, but allocations and commitments hold %s "+
			"(short: %s); free some of them first, or choose a larger share",
			sharePercent, offered.format(inUse.nonZero()), inUse.format(inUse.nonZero()), short.format(short.nonZero()))
	}

	prev, prevOffered := l.onboarding, l.offered
	l.onboarding = api.Onboarding{
		Onboarded:    true,
		SharePercent: sharePercent,
		Registered:   reg,
		Offered:      offered.resources(),
		OnboardedAt:  now,
	}
	l.offered = offered
	if err := l.save(); err != nil {
		l.onboarding, l.offered = prev, prevOffered
		return api.Onboarding{}, fmt.Errorf("onboard: %w", err)
	}
	l.notify()
	return l.onboarding, nil
}

// registered is the capability of the machine hw describes, without the
// CPU score. A machine whose cores or memory were not detected cannot be
// offered: every workload would be refused, or worse, overbooked.
func registered(hw api.Hardware) (api.Capability, error) {
	if hw.Cores <= 0 || hw.MemoryBytes == 0 {
		return api.Capability{}, fmt.Errorf("the hardware probe found %d cores and %d bytes of memory; "+
			"check the agent's log for the probe's error and restart it: %w", hw.Cores, hw.MemoryBytes, errdefs.ErrUnavailable)
	}
	return api.Capability{Resources: api.Resources{
		CPUs:     cpus(hw),
		MemoryMB: int64(hw.MemoryBytes >> 20),
		DiskMB:   int64(hw.DiskBytes >> 20),
		GPUs:     len(hw.GPUs),
	}}, nil
}

// cpus is how many CPUs the machine has to offer: its cores, or a
// cgroup's CPU quota where that allows less.
func cpus(hw api.Hardware) float64 {
	if hw.CPULimit > 0 && hw.CPULimit < float64(hw.Cores) {
		return hw.CPULimit
	}
	return float64(hw.Cores)
}

// offer is reg × share %, rounded down: CPUs to hundredths, the rest to
// whole units.
func offer(reg amount, share int) amount {
	s := int64(share)
	return amount{
		milliCPU: reg.milliCPU * s / 100 / 10 * 10,
		memMB:    reg.memMB * s / 100,
		diskMB:   reg.diskMB * s / 100,
		gpus:     reg.gpus * s / 100,
	}
}

// Offboard stops offering this node's resources. It is refused while
// allocations exist, unless force: then they stay in the books until their
// owners free them (the workloads still run and hold what they hold), but
// nothing new is placed. Commitments are dropped either way: they only
// reserved room for workloads that can no longer be placed.
func (l *Ledger) Offboard(force bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	if len(l.allocations) > 0 && !force {
		return errdefs.Conflict("offboard: %d allocation(s) still hold resources: %s; stop those workloads first, or offboard with --force",
			len(l.allocations), l.describeAllocations(5))
	}
	prev, prevOffered, prevCommitments := l.onboarding, l.offered, slices.Collect(maps.Values(l.commitments))
	for id := range l.commitments {
		l.removeCommitment(id)
	}
	l.onboarding, l.offered = api.Onboarding{}, amount{}
	if err := l.save(); err != nil {
		l.onboarding, l.offered = prev, prevOffered
		for _, c := range prevCommitments {
			l.addCommitment(c)
		}
		return fmt.Errorf("offboard: %w", err)
	}
	l.notify()
	return nil
}

// describeAllocations lists up to n allocations for a message. l.mu is held.
func (l *Ledger) describeAllocations(n int) string {
	list := l.sortedAllocations()
	var parts []string
	for i, a := range list {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(list)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", a.Kind, a.Name, a.ID))
	}
	return strings.Join(parts, ", ")
}

// Commit locks r and ports for ttl, for a workload about to be placed; pass
// the commitment's ID to Allocate to turn it into the allocation. owner
// says who committed (e.g. the scheduler's job id). It is refused, like
// Allocate, when r does not fit.
func (l *Ledger) Commit(owner string, r api.Resources, ports []int, ttl time.Duration) (api.Commitment, error) {
	c, want, err := checkCommitment(owner, r, ports, ttl)
	if err != nil {
		return api.Commitment{}, fmt.Errorf("commit: %w", err)
	}
	machine, err := l.measure()
	if err != nil {
		return api.Commitment{}, fmt.Errorf("commit for %s: %w", owner, err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	if err := l.fits(want, amount{}, machine); err != nil {
		return api.Commitment{}, fmt.Errorf("commit for %s: %w", owner, err)
	}
	if err := l.portsFree(c.Ports, ""); err != nil {
		return api.Commitment{}, fmt.Errorf("commit for %s: %w", owner, err)
	}
	c.ID = l.unusedID("c-")
	c.ExpiresAt = l.now().Add(ttl)
	if l.portLock != nil && len(c.Ports) > 0 {
		if err := l.portLock.Lock(commitmentOwner(c.ID), c.Ports); err != nil {
			return api.Commitment{}, fmt.Errorf("commit for %s: %w", owner, err)
		}
	}
	l.addCommitment(c)
	if err := l.save(); err != nil {
		l.removeCommitment(c.ID)
		l.unlockPorts(c, false)
		return api.Commitment{}, fmt.Errorf("commit for %s: %w", owner, err)
	}
	l.notify()
	return cloneCommitment(c), nil
}

// Release gives back a commitment's resources and ports.
func (l *Ledger) Release(commitmentID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	c, ok := l.commitments[commitmentID]
	if !ok {
		return errdefs.NotFound("release commitment %s: no such commitment (it may have expired)", commitmentID)
	}
	l.removeCommitment(c.ID)
	if err := l.save(); err != nil {
		l.addCommitment(c)
		return fmt.Errorf("release commitment %s: %w", c.ID, err)
	}
	l.unlockPorts(c, true)
	l.notify()
	return nil
}

// unlockPorts gives a commitment's ports back to the port allocator. l.mu
// is held.
func (l *Ledger) unlockPorts(c api.Commitment, quarantine bool) {
	if l.portLock != nil && len(c.Ports) > 0 {
		l.portLock.Unlock(commitmentOwner(c.ID), quarantine)
	}
}

// Allocate records a workload's hold on resources and ports, all or
// nothing. It assigns an ID if a.ID is empty and picks free GPUs if
// a.GPUIndexes is empty. With fromCommitment, that commitment is turned
// into the allocation: it must cover a's resources, its ports may be among
// a's, and what it held beyond a is given back.
//
// a must fit in the books (offered − committed − allocated), and its
// memory and disk must also fit in what the machine really has free now;
// CPUs are checked against the books only, since idle CPU swings from
// moment to moment and a busy core is shared, not exhausted. Two
// allocations made at the same moment both see the same machine; the
// books keep them honest between themselves.
func (l *Ledger) Allocate(a api.Allocation, fromCommitment string) (api.Allocation, error) {
	op := strings.Join(slices.DeleteFunc([]string{"allocate", a.Kind, a.Name}, func(s string) bool { return s == "" }), " ")
	a, want, err := l.checkAllocation(a)
	if err != nil {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}
	machine, err := l.measure()
	if err != nil {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	if !l.onboarding.Onboarded {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, errNotOnboarded)
	}
	if a.ID == "" {
		a.ID = l.unusedID("a-")
	} else if _, dup := l.allocations[a.ID]; dup {
		return api.Allocation{}, errdefs.Conflict("%s: allocation %s exists already; free it first or choose another id", op, a.ID)
	}
	var from api.Commitment
	if fromCommitment != "" {
		c, ok := l.commitments[fromCommitment]
		if !ok {
			return api.Allocation{}, errdefs.NotFound("%s: commitment %s: no such commitment (it may have expired); allocate without it",
				op, fromCommitment)
		}
		if short := toAmount(c.Resources).shortBy(want); !short.isZero() {
			return api.Allocation{}, errdefs.Conflict("%s: commitment %s holds %s, which does not cover %s (short: %s); commit more, or allocate without it",
				op, c.ID, toAmount(c.Resources).format(dimAll), want.format(want.nonZero()), short.format(short.nonZero()))
		}
		from = c
	}
	if err := l.fits(want, toAmount(from.Resources), machine); err != nil {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := l.portsFree(a.Ports, from.ID); err != nil {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}
	if a.GPUIndexes, err = l.pickGPUs(a.GPUIndexes, a.GPUs); err != nil {
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}
	a.CreatedAt = l.now()

	if from.ID != "" {
		l.removeCommitment(from.ID)
	}
	l.addAllocation(a)
	if err := l.save(); err != nil {
		l.removeAllocation(a.ID)
		if from.ID != "" {
			l.addCommitment(from)
		}
		return api.Allocation{}, fmt.Errorf("%s: %w", op, err)
	}
	// The workload the commitment was for takes its ports next.
	l.unlockPorts(from, false)
	l.notify()
	return cloneAllocation(a), nil
}

// measure returns what the machine has free, or nil where this platform
// cannot tell (then the books alone decide).
func (l *Ledger) measure() (*amount, error) {
	r, err := l.machineFree()
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("measure the machine's free memory and disk: %w", err)
	}
	m := toAmount(r)
	return &m, nil
}

// fits checks want against the books, counting credit (a commitment being
// converted) as free, and its memory and disk against machine, if known.
// l.mu is held.
func (l *Ledger) fits(want, credit amount, machine *amount) error {
	if !l.onboarding.Onboarded {
		return errNotOnboarded
	}
	free := l.offered.sub(l.committed).sub(l.allocated).atLeastZero().add(credit)
	if e := newShortError(want, free, dimAll, false); e != nil {
		return e
	}
	if machine != nil {
		if e := newShortError(want, *machine, dimMem|dimDisk, true); e != nil {
			return e
		}
	}
	return nil
}

// portsFree checks that no allocation or commitment holds any of ports,
// except the commitment except (being converted). l.mu is held.
func (l *Ledger) portsFree(ports []int, except string) error {
	for _, p := range ports {
		if h, held := l.ports[p]; held && !(h.kind == "commitment" && h.id == except) {
			return errdefs.Conflict("port %d is held by %s; ask the port allocator for another", p, h)
		}
	}
	return nil
}

// pickGPUs returns the GPUs to hold: asked if given (they must be free),
// else the n free ones with the lowest indexes. The books have already
// checked that n GPUs are free by count. l.mu is held.
func (l *Ledger) pickGPUs(asked []int, n int) ([]int, error) {
	for _, i := range asked {
		if id, held := l.gpus[i]; held {
			return nil, errdefs.Conflict("GPU %d is held by allocation %s; ask for another, or leave gpu_indexes empty to get free ones", i, id)
		}
	}
	if len(asked) > 0 || n == 0 {
		return asked, nil
	}
	var picked []int
	for _, i := range l.gpuIndexes() {
		if _, held := l.gpus[i]; !held {
			picked = append(picked, i)
			if len(picked) == n {
				return picked, nil
			}
		}
	}
	return nil, errdefs.Conflict("only %d of the machine's GPUs are free, %d asked for", len(picked), n)
}

// Free gives back an allocation's resources and ports.
func (l *Ledger) Free(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	a, ok := l.allocations[id]
	if !ok {
		return errdefs.NotFound("free allocation %s: no such allocation", id)
	}
	l.removeAllocation(id)
	if err := l.save(); err != nil {
		l.addAllocation(a)
		return fmt.Errorf("free allocation %s: %w", id, err)
	}
	l.notify()
	return nil
}

// SetState records an allocation's state as its owner reports it.
func (l *Ledger) SetState(id, state string) error {
	if len(state) > maxStateLen {
		return fmt.Errorf("set state of allocation %s: %w", id, errdefs.Field("state", "is %d bytes long; at most %d", len(state), maxStateLen))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	a, ok := l.allocations[id]
	if !ok {
		return errdefs.NotFound("set state of allocation %s: no such allocation", id)
	}
	if a.State == state {
		return nil
	}
	prev := a.State
	a.State = state
	l.allocations[id] = a
	if err := l.save(); err != nil {
		a.State = prev
		l.allocations[id] = a
		return fmt.Errorf("set state of allocation %s: %w", id, err)
	}
	l.notify()
	return nil
}

// Get returns one allocation.
func (l *Ledger) Get(id string) (api.Allocation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.allocations[id]
	if !ok {
		return api.Allocation{}, errdefs.NotFound("allocation %s", id)
	}
	return cloneAllocation(a), nil
}

// List returns the allocations, oldest first.
func (l *Ledger) List() []api.Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	list := l.sortedAllocations()
	for i := range list {
		list[i] = cloneAllocation(list[i])
	}
	return list
}

// Resources returns the books, and what the machine has free now.
func (l *Ledger) Resources() (api.NodeResources, error) {
	machine, merr := l.machineFree()

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expire() > 0 {
		if err := l.save(); err != nil {
			return api.NodeResources{}, fmt.Errorf("node resources: drop expired commitments: %w", err)
		}
	}
	nr := api.NodeResources{
		Onboarding:  l.onboarding,
		Committed:   l.committed.resources(),
		Allocated:   l.allocated.resources(),
		Free:        l.offered.sub(l.committed).sub(l.allocated).atLeastZero().resources(),
		Commitments: make([]api.Commitment, 0, len(l.commitments)),
		Allocations: l.sortedAllocations(),
	}
	for i := range nr.Allocations {
		nr.Allocations[i] = cloneAllocation(nr.Allocations[i])
	}
	for _, c := range l.sortedCommitments() {
		nr.Commitments = append(nr.Commitments, cloneCommitment(c))
	}
	switch {
	case merr == nil:
		nr.MachineFree = &machine
		nr.Usage = Usage(l.hw, machine)
	case errors.Is(merr, errors.ErrUnsupported):
		nr.MachineFreeError = "not measured on this platform"
	default:
		nr.MachineFreeError = merr.Error()
	}
	return nr, nil
}

// Usage derives how busy the machine is from its size and what is free
// (ReadMachineFree): the books show it, and agents' heartbeats carry it
// for the dashboard's charts.
func Usage(hw api.Hardware, free api.Resources) *api.MachineUsage {
	u := &api.MachineUsage{
		MemoryUsedMB: max(int64(hw.MemoryBytes>>20)-free.MemoryMB, 0),
		DiskUsedMB:   max(int64(hw.DiskBytes>>20)-free.DiskMB, 0),
	}
	if n := cpus(hw); n > 0 {
		busy := 100 * (n - free.CPUs) / n
		u.CPUPercent = math.Round(min(max(busy, 0), 100)*10) / 10
	}
	return u
}
