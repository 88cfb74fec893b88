package workerpool

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// While MayStart says no, buffered tasks stay buffered: an agent out of
// touch with its server starts none of what it holds. Revoked tasks are
// dropped unstarted, with no report and no return, and a revoked running
// task is stopped; after Resume the rest run.
func TestMayStartGatesAndRevokeDrops(t *testing.T) {
	src := newSource(append(tasks("t", 4, "sleep", "300ms"), task("long", "sleep", "30s"))...)
	src.SetOpen(true)
	var open atomic.Bool
	cfg := config(t, "worker", 1, 8)
	cfg.MayStart = open.Load
	// Fetched in order: long last, so it runs only once the others ran.
	p := start(t, cfg, src)
	waitFor(t, 20*time.Second, "all five buffered", func() bool { return p.Stats().Buffered == 5 })
	time.Sleep(300 * time.Millisecond) // a worker that could start one would have by now
	if st := p.Stats(); st.Busy != 0 || st.Buffered != 5 {
		t.Fatalf("gate closed: %d busy, %d buffered; want 0 and 5", st.Busy, st.Buffered)
	}
	if got := p.Revoke([]string{"t-001", "t-003", "nope"}); got != 2 {
		t.Fatalf("Revoke of two buffered and one unknown = %d, want 2", got)
	}
	open.Store(true)
	p.Resume()
	waitFor(t, 20*time.Second, "the long task to run", func() bool {
		st := p.Stats()
		return st.Busy == 1 && st.Buffered == 0 && len(src.Record().Reports) == 2
	})
	if got := p.Revoke([]string{"long"}); got != 0 {
		t.Errorf("Revoke of a running task = %d dropped from the buffer, want 0", got)
	}
	waitFor(t, 20*time.Second, "the revoked running task to stop", func() bool { return len(src.Record().Reports) == 3 })
	src.SetOpen(false)
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Fatalf("Run = %v", err)
	}
	rec := src.Record()
	var ran []string
	for _, r := range rec.Reports {
		ran = append(ran, r.TaskID)
		if r.TaskID == "long" && r.Reason != revokedReason {
			t.Errorf("the revoked running task ended with %q, want %q", r.Reason, revokedReason)
		}
	}
	slices.Sort(ran)
	if want := []string{"long", "t-000", "t-002"}; !slices.Equal(ran, want) {
		t.Errorf("reported %v, want %v: revoked buffered tasks never start", ran, want)
	}
	if len(rec.Returned) != 0 {
		t.Errorf("returned %v: revoked tasks are not this node's to return", rec.Returned)
	}
}
