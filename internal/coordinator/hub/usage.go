package hub

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// The dashboard charts a node's CPU and memory over the last hour. The
// samples ride on heartbeats and live in memory only, bounded: one slot per
// minute for an hour per node (the latest beat of the minute wins), 16 bytes
// a slot, and at most usageMaxNodes nodes: about 20 MB at most. A node past
// the cap gets no chart until one of the others is deleted or the server
// restarts.
const (
	usageSlots    = 60
	usageSlotSize = time.Minute
	usageMaxNodes = 20_000
)

// UsageBook holds the usage rings of the nodes connected to this server.
type UsageBook struct {
	mu    sync.Mutex
	nodes map[string]*usageRing
}

// usageRing is one node's last hour: slot i holds the sample of the minute
// whose number modulo usageSlots is i.
type usageRing [usageSlots]usageSlot

// usageSlot is a sample, packed: unix seconds (0: empty), CPU % and MB.
type usageSlot struct {
	at     int64
	cpu    float32
	memory int32
}

// Record keeps u as the node's sample for the minute of at.
func (b *UsageBook) Record(node string, at time.Time, u *api.MachineUsage) {
	if u == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.nodes[node]
	if r == nil {
		if len(b.nodes) >= usageMaxNodes {
			return
		}
		if b.nodes == nil {
			b.nodes = map[string]*usageRing{}
		}
		r = new(usageRing)
		b.nodes[node] = r
	}
	minute := at.Truncate(usageSlotSize)
	r[minute.Unix()/int64(usageSlotSize/time.Second)%usageSlots] = usageSlot{
		at: at.Unix(), cpu: float32(u.CPUPercent), memory: int32(min(u.MemoryUsedMB, math.MaxInt32))}
}

// History returns the node's samples of the hour before now, oldest first.
func (b *UsageBook) History(node string, now time.Time) []api.UsageSample {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []api.UsageSample{}
	r := b.nodes[node]
	if r == nil {
		return out
	}
	from := now.Add(-usageSlots * usageSlotSize).Unix()
	for _, s := range r {
		if s.at > from && s.at <= now.Unix() {
			out = append(out, api.UsageSample{At: time.Unix(s.at, 0).UTC(), CPUPercent: math.Round(float64(s.cpu)*10) / 10,
				MemoryUsedMB: int64(s.memory)})
		}
	}
	sortSamples(out)
	return out
}

// Forget drops a deleted node's samples.
func (b *UsageBook) Forget(node string) {
	b.mu.Lock()
	delete(b.nodes, node)
	b.mu.Unlock()
}

func sortSamples(s []api.UsageSample) {
	slices.SortFunc(s, func(a, b api.UsageSample) int { return a.At.Compare(b.At) })
}
