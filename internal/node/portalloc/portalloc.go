// Package portalloc hands out the ports of one node to the workloads that run
// on it: a service, a container, a suite's worker pool. Each is an owner that
// asks for specific ports, for N random ones, or both, and gets all of them or
// none.
//
// Ports come from a range (16384-65535 by default). A port the OS already uses
// is skipped, found by trying to bind it, since the allocator is not the only
// thing on the machine that opens sockets. A released port rests in quarantine
// for a while (60 s by default) before it is handed out again, so a late packet
// or a slow client of the old owner does not reach the new one. Random ports
// are drawn uniformly from the free ones, never sequentially, so they cannot
// be guessed.
//
// With a state path every change is written to a JSON file before it is
// acknowledged, so the agent finds the same ports held after a restart.
package portalloc

import (
	"container/heap"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Defaults for the zero values of Config.
const (
	DefaultMin        = 16384
	DefaultMax        = 65535
	DefaultQuarantine = 60 * time.Second
)

// maxOwnerLen caps owner names: they are stored in the state file and
// quoted in errors.
const maxOwnerLen = 256

// Config configures an Allocator. The zero value is usable.
type Config struct {
	// Min and Max bound the range of ports handed out, both included.
	// Zero means DefaultMin and DefaultMax.
	Min, Max int
	// Quarantine is how long a released port rests before it is handed
	// out again. Zero means DefaultQuarantine; negative turns quarantine off.
	Quarantine time.Duration
	// StatePath is the JSON file that keeps the allocator's state across
	// restarts. Empty keeps the state in memory only.
	StatePath string
	// Now tells the time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
	// Probe reports whether the OS lets a process use port. Nil means
	// ProbeOS. Tests inject one that does not touch the network. It is
	// called with the allocator locked, so that no other request can take
	// the port between the probe and the grant; it must not call back.
	Probe func(port int) bool
}

// Request asks for ports: the specific Ports, and Count more chosen at
// random. The ports granted are Ports in order, then the random ones.
type Request struct {
	Ports []int `json:"ports,omitempty"`
	Count int   `json:"count,omitempty"`
}

// Allocator hands out ports from a range. It is safe for concurrent use.
type Allocator struct {
	min, max   int
	quarantine time.Duration
	path       string
	now        func() time.Time
	probe      func(int) bool

	mu      sync.Mutex
	held    map[int]string // port → owner
	resting map[int]rest   // port → quarantine entry
	queue   restQueue      // the resting entries, soonest first

	// avail holds the ports in range that are neither held nor resting, in
	// no order; pos[p-min] is p's index in avail, or -1. Together they give
	// O(1) add, remove and uniform random choice.
	avail []int
	pos   []int32
}

type rest struct {
	owner string    // who released the port
	until time.Time // when it may be handed out again
}

// New returns an allocator for cfg, loading the state file if there is one.
func New(cfg Config) (*Allocator, error) {
	if cfg.Min == 0 {
		cfg.Min = DefaultMin
	}
	if cfg.Max == 0 {
		cfg.Max = DefaultMax
	}
	switch {
	case cfg.Min < 1 || cfg.Min > 65535:
		return nil, fmt.Errorf("port allocator: %w", errdefs.Field("min", "%d is not a port number (1-65535)", cfg.Min))
	case cfg.Max < 1 || cfg.Max > 65535:
		return nil, fmt.Errorf("port allocator: %w", errdefs.Field("max", "%d is not a port number (1-65535)", cfg.Max))
	case cfg.Min > cfg.Max:
		return nil, fmt.Errorf("port allocator: %w", errdefs.Field("max", "%d is below min %d", cfg.Max, cfg.Min))
	}
	if cfg.Quarantine == 0 {
		cfg.Quarantine = DefaultQuarantine
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Probe == nil {
		cfg.Probe = ProbeOS
	}
	a := &Allocator{
		min:        cfg.Min,
		max:        cfg.Max,
		quarantine: cfg.Quarantine,
		path:       cfg.StatePath,
		now:        cfg.Now,
		probe:      cfg.Probe,
		held:       make(map[int]string),
		resting:    make(map[int]rest),
		avail:      make([]int, 0, cfg.Max-cfg.Min+1),
		pos:        make([]int32, cfg.Max-cfg.Min+1),
	}
	for p := a.min; p <= a.max; p++ {
		a.pos[p-a.min] = int32(len(a.avail))
		a.avail = append(a.avail, p)
	}
	if a.path == "" {
		return a, nil
	}
	st, found, err := loadState(a.path)
	if err != nil {
		return nil, err
	}
	now := a.now()
	for _, h := range st.Held {
		// A held port outside the range stays held: the range may have
		// shrunk, but the workload still uses the port.
		a.held[h.Port] = h.Owner
		a.takeAvail(h.Port)
	}
	for _, q := range st.Quarantine {
		if now.Before(q.Until) {
			a.rest(q.Port, q.Owner, q.Until)
		}
	}
	if !found {
		// Write the empty state now, so a state path that cannot be
		// written fails here rather than at the first allocation.
		if err := a.save(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Allocate grants owner the ports req asks for, all of them or none.
//
// A specific port must lie in the range, and be neither held, nor in
// quarantine, nor used by another process (ErrConflict). Random ports are
// drawn uniformly from the free ones; if there are too few, the error is
// ErrUnavailable and says how many are free.
func (a *Allocator) Allocate(owner string, req Request) ([]int, error) {
	if err := a.checkRequest(owner, req); err != nil {
		return nil, fmt.Errorf("allocate ports for %q: %w", owner, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(a.now())
	granted, err := a.grant(owner, req)
	if err != nil {
		return nil, fmt.Errorf("allocate ports for %q: %w", owner, err)
	}
	return granted, nil
}

func (a *Allocator) grant(owner string, req Request) ([]int, error) {
	// The bookkeeping checks come first, so a request that cannot be met
	// costs no probe.
	for i, p := range req.Ports {
		if o, ok := a.held[p]; ok {
			return nil, errdefs.Conflict("ports[%d]: port %d is held by %q", i, p, o)
		}
		// Quarantine keeps a port from a new owner while clients of the old
		// one may still knock; the old owner itself may take it back.
		if r, ok := a.resting[p]; ok && r.owner != owner {
			return nil, errdefs.Conflict("ports[%d]: port %d was released by %q and rests in quarantine until %s",
				i, p, r.owner, r.until.Format(time.RFC3339))
		}
	}
	if free := len(a.avail) - a.countAvail(req.Ports); req.Count > free {
		return nil, fmt.Errorf("want %s, but only %d of the %d ports in %d-%d are free (%d held, %d in quarantine); free some (nodemgr allocation ls NODE) or widen port_range: %w",
			randomPorts(req.Count), free, a.max-a.min+1, a.min, a.max, len(a.held), len(a.resting), errdefs.ErrUnavailable)
	}
	for i, p := range req.Ports {
		if !a.probe(p) {
			return nil, errdefs.Conflict("ports[%d]: port %d is in use by another process", i, p)
		}
	}

	reclaimed := map[int]rest{}
	for _, p := range req.Ports {
		if r, ok := a.resting[p]; ok {
			reclaimed[p] = r // its queue entry goes stale; expire skips it
			delete(a.resting, p)
		}
		a.takeAvail(p) // so that the random draw cannot pick them again
	}
	picked := a.pick(req.Count)
	if len(picked) < req.Count {
		// pick probed every candidate, so the count of busy ports is exact.
		busy := len(a.avail) - len(picked)
		a.ungrant(req.Ports, reclaimed)
		return nil, fmt.Errorf("want %s, but only %d of the %d ports in %d-%d are free (%d held, %d in quarantine, %d in use by other processes); free some (nodemgr allocation ls NODE) or widen port_range: %w",
			randomPorts(req.Count), len(picked), a.max-a.min+1, a.min, a.max, len(a.held), len(a.resting), busy, errdefs.ErrUnavailable)
	}
	granted := append(slices.Clone(req.Ports), picked...)
	for _, p := range picked {
		a.takeAvail(p)
	}
	for _, p := range granted {
		a.held[p] = owner
	}
	if err := a.save(); err != nil {
		for _, p := range granted {
			delete(a.held, p)
		}
		a.ungrant(granted, reclaimed)
		return nil, err
	}
	return granted, nil
}

// ungrant puts ports a failed grant took back where they were: into
// quarantine if they were reclaimed from it, else among the free ones.
func (a *Allocator) ungrant(ports []int, reclaimed map[int]rest) {
	for _, p := range ports {
		if r, ok := reclaimed[p]; ok {
			a.resting[p] = r
			continue
		}
		a.addAvail(p)
	}
}

// countAvail counts the ports that are among the free ones.
func (a *Allocator) countAvail(ports []int) int {
	n := 0
	for _, p := range ports {
		if a.inRange(p) && a.pos[p-a.min] >= 0 {
			n++
		}
	}
	return n
}

// pick draws up to count ports uniformly at random from avail, skipping
// those the OS uses. It is a Fisher-Yates shuffle that stops once it has
// enough: each step takes a uniform choice among the ports not yet looked at.
// It moves the chosen ports to the front of avail but does not remove them.
func (a *Allocator) pick(count int) []int {
	if count == 0 {
		return nil
	}
	picked := make([]int, 0, count)
	for i := 0; i < len(a.avail) && len(picked) < count; i++ {
		a.swapAvail(i, i+rand.IntN(len(a.avail)-i))
		if p := a.avail[i]; a.probe(p) {
			picked = append(picked, p)
		}
	}
	return picked
}

func (a *Allocator) checkRequest(owner string, req Request) error {
	if err := checkOwner(owner); err != nil {
		return err
	}
	size := a.max - a.min + 1
	switch {
	case req.Count < 0:
		return errdefs.Field("count", "must not be negative, got %d", req.Count)
	case req.Count == 0 && len(req.Ports) == 0:
		return errdefs.Field("count", "ask for at least one port: give ports, count or both")
	case req.Count > size || len(req.Ports) > size || req.Count+len(req.Ports) > size:
		return errdefs.Field("count", "asks for %d ports in all, but the range %d-%d has only %d",
			req.Count+len(req.Ports), a.min, a.max, size)
	}
	seen := make(map[int]int, len(req.Ports))
	for i, p := range req.Ports {
		if p < a.min || p > a.max {
			return errdefs.Field(fmt.Sprintf("ports[%d]", i), "port %d is outside the range %d-%d", p, a.min, a.max)
		}
		if j, dup := seen[p]; dup {
			return errdefs.Field(fmt.Sprintf("ports[%d]", i), "port %d is asked for twice (also ports[%d])", p, j)
		}
		seen[p] = i
	}
	return nil
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return errdefs.Field("owner", "must not be empty")
	case len(owner) > maxOwnerLen:
		return errdefs.Field("owner", "is %d bytes long, at most %d are allowed", len(owner), maxOwnerLen)
	case !utf8.ValidString(owner):
		// JSON would replace the bad bytes, and the owner read back from
		// the state file would no longer match.
		return errdefs.Field("owner", "is not valid UTF-8")
	}
	return nil
}

// Release gives back ports that owner holds, all of them or none. A port
// nobody holds is ErrNotFound; one held by another owner is ErrConflict.
// Released ports go into quarantine.
func (a *Allocator) Release(owner string, ports ...int) error {
	if err := checkRelease(owner, ports); err != nil {
		return fmt.Errorf("release ports of %q: %w", owner, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	a.expire(now)
	for i, p := range ports {
		o, ok := a.held[p]
		switch {
		case ok && o != owner:
			return fmt.Errorf("release ports of %q: %w", owner, errdefs.Conflict("ports[%d]: port %d is held by %q", i, p, o))
		case ok:
		case a.resting[p].owner != "":
			return fmt.Errorf("release ports of %q: %w", owner, errdefs.NotFound("ports[%d]: port %d is not held: %q released it already", i, p, a.resting[p].owner))
		default:
			return fmt.Errorf("release ports of %q: %w", owner, errdefs.NotFound("ports[%d]: port %d is not held", i, p))
		}
	}
	a.release(owner, ports, now)
	if err := a.save(); err != nil {
		a.unrelease(owner, ports)
		return fmt.Errorf("release ports of %q: %w", owner, err)
	}
	return nil
}

func checkRelease(owner string, ports []int) error {
	if err := checkOwner(owner); err != nil {
		return err
	}
	if len(ports) == 0 {
		return errdefs.Field("ports", "name at least one port to release")
	}
	seen := make(map[int]int, len(ports))
	for i, p := range ports {
		if j, dup := seen[p]; dup {
			return errdefs.Field(fmt.Sprintf("ports[%d]", i), "port %d is named twice (also ports[%d])", p, j)
		}
		seen[p] = i
	}
	return nil
}

// ReleaseOwner gives back every port owner holds and returns them, sorted.
// The ports go into quarantine.
//
// If the state file cannot be written, the ports are released in memory
// anyway and the file catches up with the next change that is saved. That
// errs on the safe side: after a crash in between, the ports would come
// back held by an owner that is gone, never handed out twice.
func (a *Allocator) ReleaseOwner(owner string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	a.expire(now)
	ports := a.heldBy(owner)
	if len(ports) == 0 {
		return nil
	}
	a.release(owner, ports, now)
	_ = a.save()
	return ports
}

// heldBy lists the ports owner holds, sorted; a.mu is held.
func (a *Allocator) heldBy(owner string) []int {
	var ports []int
	for p, o := range a.held {
		if o == owner {
			ports = append(ports, p)
		}
	}
	sort.Ints(ports)
	return ports
}

// HandOver gives back every port owner holds without quarantine, and
// returns them, sorted: for a hold that its successor takes next (a
// commitment's ports, taken by the workload it was for). Quarantine would
// keep them from exactly that successor.
func (a *Allocator) HandOver(owner string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	ports := a.heldBy(owner)
	if len(ports) == 0 {
		return nil
	}
	for _, p := range ports {
		delete(a.held, p)
		a.addAvail(p)
	}
	_ = a.save() // as ReleaseOwner: after a crash the ports come back held, never twice
	return ports
}

// Held returns every held port and its owner.
func (a *Allocator) Held() map[int]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.held)
}

// Owner returns who holds port.
func (a *Allocator) Owner(port int) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.held[port]
	return o, ok
}

// Free returns how many ports in the range are neither held nor in
// quarantine. Ports the OS uses are counted too: finding them would mean
// probing the whole range.
func (a *Allocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(a.now())
	return len(a.avail)
}

func (a *Allocator) release(owner string, ports []int, now time.Time) {
	for _, p := range ports {
		delete(a.held, p)
		if a.quarantine > 0 {
			a.rest(p, owner, now.Add(a.quarantine))
		} else {
			a.addAvail(p)
		}
	}
}

// unrelease undoes release after the state could not be saved.
func (a *Allocator) unrelease(owner string, ports []int) {
	for _, p := range ports {
		a.held[p] = owner
		if _, ok := a.resting[p]; ok {
			delete(a.resting, p)
		} else {
			a.takeAvail(p)
		}
	}
	if a.quarantine > 0 {
		a.queue = a.queue[:0]
		for p, r := range a.resting {
			a.queue = append(a.queue, restEntry{port: p, until: r.until})
		}
		heap.Init(&a.queue)
	}
}

// rest puts port into quarantine until the given time.
func (a *Allocator) rest(port int, owner string, until time.Time) {
	a.takeAvail(port)
	a.resting[port] = rest{owner: owner, until: until}
	heap.Push(&a.queue, restEntry{port: port, until: until})
}

// expire ends the quarantine of the ports whose time is up.
func (a *Allocator) expire(now time.Time) {
	for len(a.queue) > 0 && !now.Before(a.queue[0].until) {
		e := heap.Pop(&a.queue).(restEntry)
		if r, ok := a.resting[e.port]; !ok || !r.until.Equal(e.until) {
			continue // reclaimed by its owner (and maybe released again since)
		}
		delete(a.resting, e.port)
		a.addAvail(e.port)
	}
}

func (a *Allocator) inRange(port int) bool { return port >= a.min && port <= a.max }

func (a *Allocator) addAvail(port int) {
	if !a.inRange(port) || a.pos[port-a.min] >= 0 {
		return
	}
	a.pos[port-a.min] = int32(len(a.avail))
	a.avail = append(a.avail, port)
}

func (a *Allocator) takeAvail(port int) {
	if !a.inRange(port) {
		return
	}
	i := a.pos[port-a.min]
	if i < 0 {
		return
	}
	last := len(a.avail) - 1
	a.swapAvail(int(i), last)
	a.avail = a.avail[:last]
	a.pos[port-a.min] = -1
}

func (a *Allocator) swapAvail(i, j int) {
	pi, pj := a.avail[i], a.avail[j]
	a.avail[i], a.avail[j] = pj, pi
	a.pos[pi-a.min], a.pos[pj-a.min] = int32(j), int32(i)
}

// restQueue is a min-heap of quarantine ends. With a fixed quarantine it
// would be a FIFO, but an injected or stepped clock can go backwards.
type restQueue []restEntry

type restEntry struct {
	port  int
	until time.Time
}

func (q restQueue) Len() int           { return len(q) }
func (q restQueue) Less(i, j int) bool { return q[i].until.Before(q[j].until) }
func (q restQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *restQueue) Push(x any)        { *q = append(*q, x.(restEntry)) }
func (q *restQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// randomPorts says "1 random port" or "n random ports".
func randomPorts(n int) string {
	if n == 1 {
		return "1 random port"
	}
	return fmt.Sprintf("%d random ports", n)
}
