package workerpool

import (
	"slices"
	"time"
)

// Stats is a snapshot of a pool.
type Stats struct {
	Workers   int // configured
	Alive     int // worker processes running
	Connected int // workers that said hello and are not retired
	Busy      int // workers holding a task
	Buffered  int // prefetched tasks not yet started
	Respawns  int // workers started again after dying or being dropped
	Dropped   int // workers dropped for breaking the protocol
	Reported  int // attempts reported to the source
	// FetchLatency is the time from a worker's fetch arriving to its task
	// being written back, over the latest samples.
	FetchLatency Latency
	PerWorker    []WorkerStats // by worker ID
}

// WorkerStats describes one worker slot.
type WorkerStats struct {
	ID     int
	PID    int    // 0 while not running
	CPUs   []int  // nil: not pinned
	TaskID string // the task it holds, if any
}

// Latency summarises latency samples.
type Latency struct {
	Samples int // how many the percentiles are over
	P50     time.Duration
	P99     time.Duration
}

// latencies keeps the latest samples in a ring.
type latencies struct {
	ring []time.Duration
	next int
	full bool
}

const latencySamples = 4096

func (l *latencies) add(d time.Duration) {
	if l.ring == nil {
		l.ring = make([]time.Duration, latencySamples)
	}
	l.ring[l.next] = d
	l.next++
	if l.next == len(l.ring) {
		l.next, l.full = 0, true
	}
}

func (l *latencies) summary() Latency {
	n := l.next
	if l.full {
		n = len(l.ring)
	}
	if n == 0 {
		return Latency{}
	}
	s := slices.Clone(l.ring[:n])
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(n-1, int(q*float64(n)))] }
	return Latency{Samples: n, P50: at(0.50), P99: at(0.99)}
}
