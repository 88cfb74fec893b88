package hub

import (
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

func TestUsageBookKeepsOneSampleAMinuteForAnHour(t *testing.T) {
	var b UsageBook
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	// Two hours of beats every 20 s: the book keeps the last of each minute
	// of the last hour, never more than usageSlots.
	for at := start; at.Before(start.Add(2 * time.Hour)); at = at.Add(20 * time.Second) {
		b.Record("n1", at, &api.MachineUsage{CPUPercent: float64(at.Minute()), MemoryUsedMB: 100})
	}
	b.Record("n1", start, nil) // no usage: no sample
	now := start.Add(2*time.Hour - time.Second)
	got := b.History("n1", now)
	if len(got) != usageSlots {
		t.Fatalf("history has %d samples, want %d", len(got), usageSlots)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].At.After(got[i-1].At) {
			t.Fatalf("samples out of order at %d: %v after %v", i, got[i].At, got[i-1].At)
		}
	}
	if last := got[len(got)-1]; last.At.Second() != 40 || last.MemoryUsedMB != 100 || last.CPUPercent != float64(last.At.Minute()) {
		t.Errorf("last sample %+v, want the minute's last beat (:40), 100 MB, CPU the minute", last)
	}
	if h := b.History("n2", now); len(h) != 0 {
		t.Errorf("unknown node has %d samples, want none", len(h))
	}
	b.Forget("n1")
	if h := b.History("n1", now); len(h) != 0 {
		t.Errorf("forgotten node has %d samples, want none", len(h))
	}
}
