package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func mustEnqueue(t *testing.T, s store.Store, nodeID, method string) store.Notification {
	t.Helper()
	body := fmt.Appendf(nil, `{"method":%q}`, method)
	nt, err := s.Enqueue(t.Context(), nodeID, method, body)
	if err != nil {
		t.Fatalf("Enqueue(%q, %q) = %v, want nil", nodeID, method, err)
	}
	return nt
}

func mustPending(t *testing.T, s store.Store, nodeID string, after uint64) []store.Notification {
	t.Helper()
	got, err := s.Pending(t.Context(), nodeID, after)
	if err != nil {
		t.Fatalf("Pending(%q, %d) = %v, want nil", nodeID, after, err)
	}
	if got == nil {
		t.Errorf("Pending(%q, %d) = nil, want a non-nil slice", nodeID, after)
	}
	return got
}

func seqs(nts []store.Notification) []uint64 {
	out := []uint64{}
	for _, nt := range nts {
		out = append(out, nt.Seq)
	}
	return out
}

func testEnqueueSeqs(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	mustCreateNode(t, s, newNode("n2"))

	var n1 []store.Notification
	for i, method := range []string{"shutdown", "update", "ping"} {
		body := fmt.Appendf(nil, `{"i":%d}`, i)
		nt, err := s.Enqueue(t.Context(), "n1", method, body)
		if err != nil {
			t.Fatalf("Enqueue(%q, %q) = %v, want nil", "n1", method, err)
		}
		want := store.Notification{NodeID: "n1", Seq: uint64(i + 1), Method: method, Body: body, CreatedAt: nt.CreatedAt}
		if diff := cmp.Diff(want, nt); diff != "" {
			t.Errorf("Enqueue(%q, %q) mismatch (-want +got):\n%s", "n1", method, diff)
		}
		if !recent(nt.CreatedAt) {
			t.Errorf("Enqueue(%q, %q).CreatedAt = %v, want about now", "n1", method, nt.CreatedAt)
		}
		n1 = append(n1, nt)
		// Seqs are per node: n2's interleave without touching n1's.
		mustEnqueue(t, s, "n2", method)
	}

	if diff := cmp.Diff(n1, mustPending(t, s, "n1", 0)); diff != "" {
		t.Errorf("Pending(%q, 0) differs from what Enqueue returned (-enqueue +pending):\n%s", "n1", diff)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, seqs(mustPending(t, s, "n2", 0))); diff != "" {
		t.Errorf("Pending(%q, 0) seqs mismatch (-want +got):\n%s", "n2", diff)
	}

	// A nil body reads back empty, not nil.
	nt, err := s.Enqueue(t.Context(), "n1", "empty", nil)
	if err != nil {
		t.Fatalf("Enqueue(%q, %q, nil) = %v, want nil", "n1", "empty", err)
	}
	got := mustPending(t, s, "n1", nt.Seq-1)
	if len(got) != 1 || got[0].Body == nil || len(got[0].Body) != 0 {
		t.Errorf("Pending(%q, %d) = %+v, want one notification with an empty body", "n1", nt.Seq-1, got)
	}
}

func testEnqueueConcurrent(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	const workers, each = 16, 20
	var (
		mu   sync.Mutex
		got  []uint64
		wg   sync.WaitGroup
		errs = make(chan error, workers*each)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				nt, err := s.Enqueue(t.Context(), "n1", fmt.Sprintf("m%d-%d", w, i), []byte(`{}`))
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				got = append(got, nt.Seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Enqueue(%q) from %d goroutines = %v, want nil", "n1", workers, err)
	}

	want := make([]uint64, workers*each)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Enqueue(%q) from %d goroutines: seqs not exactly 1..%d (-want +got):\n%s", "n1", workers, len(want), diff)
	}
	if diff := cmp.Diff(want, seqs(mustPending(t, s, "n1", 0))); diff != "" {
		t.Errorf("Pending(%q, 0) seqs mismatch (-want +got):\n%s", "n1", diff)
	}
}

func testPending(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	mustCreateNode(t, s, newNode("empty"))
	for _, m := range []string{"a", "b", "c"} {
		mustEnqueue(t, s, "n1", m)
	}
	tests := []struct {
		node  string
		after uint64
		want  []uint64
	}{
		{"n1", 0, []uint64{1, 2, 3}},
		{"n1", 1, []uint64{2, 3}},
		{"n1", 2, []uint64{3}},
		{"n1", 3, []uint64{}},
		{"n1", 100, []uint64{}},
		{"empty", 0, []uint64{}},
	}
	for _, tc := range tests {
		got := mustPending(t, s, tc.node, tc.after)
		if diff := cmp.Diff(tc.want, seqs(got)); diff != "" {
			t.Errorf("Pending(%q, %d) seqs mismatch (-want +got):\n%s", tc.node, tc.after, diff)
		}
	}
}

func testAck(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	if err := s.Ack(t.Context(), "n1", 0); err != nil {
		t.Errorf("Ack(%q, 0) with nothing queued = %v, want nil", "n1", err)
	}
	for _, m := range []string{"a", "b", "c"} {
		mustEnqueue(t, s, "n1", m)
	}
	// Each step acks, then maybe enqueues one, then checks what is pending.
	steps := []struct {
		ack     uint64
		enqueue bool
		want    []uint64
	}{
		{ack: 2, want: []uint64{3}},
		{ack: 1, want: []uint64{3}}, // an old ack again
		{ack: 2, want: []uint64{3}},
		{ack: 2, enqueue: true, want: []uint64{3, 4}},
		{ack: 4, want: []uint64{}},
		{ack: 4, enqueue: true, want: []uint64{5}}, // 4 is not reused
	}
	for _, st := range steps {
		if err := s.Ack(t.Context(), "n1", st.ack); err != nil {
			t.Fatalf("Ack(%q, %d) = %v, want nil", "n1", st.ack, err)
		}
		if st.enqueue {
			mustEnqueue(t, s, "n1", "more")
		}
		if diff := cmp.Diff(st.want, seqs(mustPending(t, s, "n1", 0))); diff != "" {
			t.Errorf("Pending(%q, 0) after Ack(%d) seqs mismatch (-want +got):\n%s", "n1", st.ack, diff)
		}
	}
}

func testSeqsSurviveDeleteNode(t *testing.T, s store.Store) {
	mustCreateNode(t, s, newNode("n1"))
	mustEnqueue(t, s, "n1", "a")
	mustEnqueue(t, s, "n1", "b")
	if err := s.DeleteNode(t.Context(), "n1"); err != nil {
		t.Fatalf("DeleteNode(%q) = %v, want nil", "n1", err)
	}
	// A node registered again under the same ID must not see seqs that an
	// agent may already have acknowledged.
	mustCreateNode(t, s, newNode("n1"))
	if got := mustPending(t, s, "n1", 0); len(got) != 0 {
		t.Errorf("Pending(%q, 0) for a new node with an old ID = %v, want none", "n1", seqs(got))
	}
	if nt := mustEnqueue(t, s, "n1", "c"); nt.Seq != 3 {
		t.Errorf("Enqueue(%q) after delete and register = seq %d, want 3", "n1", nt.Seq)
	}
}

func testNotificationsUnknownNode(t *testing.T, s store.Store) {
	if _, err := s.Enqueue(t.Context(), "ghost", "ping", []byte(`{}`)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Enqueue(%q) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
	if _, err := s.Pending(t.Context(), "ghost", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pending(%q, 0) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
	if err := s.Ack(t.Context(), "ghost", 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Ack(%q, 1) = %v, want %v", "ghost", err, errdefs.ErrNotFound)
	}
}
