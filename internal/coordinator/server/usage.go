package server

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
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

// usageBook holds the usage rings of the nodes connected to this server.
type usageBook struct {
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

// record keeps u as the node's sample for the minute of at.
func (b *usageBook) record(node string, at time.Time, u *api.MachineUsage) {
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

// history returns the node's samples of the hour before now, oldest first.
func (b *usageBook) history(node string, now time.Time) []api.UsageSample {
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

// forget drops a deleted node's samples.
func (b *usageBook) forget(node string) {
	b.mu.Lock()
	delete(b.nodes, node)
	b.mu.Unlock()
}

func sortSamples(s []api.UsageSample) {
	slices.SortFunc(s, func(a, b api.UsageSample) int { return a.At.Compare(b.At) })
}

func (s *Server) handleNodeUsage(w http.ResponseWriter, r *http.Request) error {
	n, err := s.resolveNode(r.Context(), r.PathValue("node"), api.RoleRead)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, api.UsageHistory{Node: n.ID, Samples: s.usage.history(n.ID, time.Now())})
	return nil
}

// handleSummary counts nodes, suites and tasks for the dashboard's overview:
// counts the store keeps, so it stays cheap with many rows. The counts are
// not filtered by group, hence admins only.
func (s *Server) handleSummary(w http.ResponseWriter, r *http.Request) error {
	nodes, err := s.store.CountNodes(r.Context())
	if err != nil {
		return fmt.Errorf("count nodes: %w", err)
	}
	suites, tasks, err := s.store.CountSuites(r.Context())
	if err != nil {
		return fmt.Errorf("count suites: %w", err)
	}
	httpapi.WriteJSON(w, http.StatusOK, api.Summary{Nodes: nodes, Suites: suites, Tasks: tasks})
	return nil
}
