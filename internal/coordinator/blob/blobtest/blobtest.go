// Package blobtest is the conformance suite for blob.Store: every
// backend runs it (Dir on a temporary directory, S3 on moto), so they
// behave alike. MotoS3 sets up an S3 bucket on moto for it.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
)

// Run runs the suite. newStore returns an empty store; it is called once
// per subtest.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s blob.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"DigestMismatch", testDigestMismatch},
		{"SizeCap", testSizeCap},
		{"IdempotentPut", testIdempotentPut},
		{"PutRefreshesModTime", testPutRefreshesModTime},
		{"Absent", testAbsent},
		{"Delete", testDelete},
		{"Walk", testWalk},
		{"ConcurrentPuts", testConcurrentPuts},
		{"CancelledPut", testCancelledPut},
		{"Collect", testCollect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore(t)) })
	}
}

func testRoundTrip(t *testing.T, s blob.Store) {
	tests := []struct {
		name     string
		data     []byte
		withWant bool
	}{
		{"empty", nil, false},
		{"small", []byte("hello, blob\n"), false},
		{"small with digest", []byte("hello, digest\n"), true},
		{"3 MiB with digest", content(3<<20, 1), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want blob.Digest
			if tc.withWant {
				want = blob.Sum(tc.data)
			}
			got, err := s.Put(ctxFor(t), bytes.NewReader(tc.data), want, 0)
			if err != nil {
				t.Fatalf("Put = %v", err)
			}
			checkInfo(t, "Put", got, tc.data)
			stat, err := s.Stat(ctxFor(t), got.Digest)
			if err != nil {
				t.Fatalf("Stat(%s) = %v", got.Digest, err)
			}
			checkInfo(t, "Stat", stat, tc.data)
			if data := read(t, s, got.Digest); !bytes.Equal(data, tc.data) {
				t.Errorf("Open(%s) read %d bytes, not the %d put", got.Digest, len(data), len(tc.data))
			}
		})
	}
}

func testDigestMismatch(t *testing.T, s blob.Store) {
	data, other := []byte("the content"), []byte("other content")
	tests := []struct {
		name   string
		stored bool // other is stored already, so Put may take its short cut
	}{
		{"want absent", false},
		{"want stored", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before []blob.Info
			if tc.stored {
				before = append(before, put(t, s, other))
			}
			_, err := s.Put(ctxFor(t), bytes.NewReader(data), blob.Sum(other), 0)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Put(content, want %s) = %v, want an ErrInvalid", blob.Sum(other), err)
			}
			checkStored(t, s, before)
			for _, info := range before {
				s.Delete(ctxFor(t), info.Digest)
			}
		})
	}
}

func testSizeCap(t *testing.T, s blob.Store) {
	stored := put(t, s, []byte("eleven byte"))
	tests := []struct {
		name     string
		data     string
		withWant bool
		max      int64
		wantErr  bool
	}{
		{"at the cap", "ten bytes!", false, 10, false},
		{"over the cap", "eleven bytes", false, 10, true},
		{"over the cap, stored already", "eleven byte", true, 10, true},
		{"no cap", strings.Repeat("x", 100_000), false, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want blob.Digest
			if tc.withWant {
				want = blob.Sum([]byte(tc.data))
			}
			_, err := s.Put(ctxFor(t), strings.NewReader(tc.data), want, tc.max)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Put(%d bytes, cap %d) = %v", len(tc.data), tc.max, err)
				}
				s.Delete(ctxFor(t), blob.Sum([]byte(tc.data)))
				return
			}
			if !errors.Is(err, errdefs.ErrTooLarge) || !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Put(%d bytes, cap %d) = %v, want an ErrTooLarge that is an ErrInvalid", len(tc.data), tc.max, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.max)) || !strings.Contains(err.Error(), "--blob-max-size") {
				t.Errorf("Put error %q does not name the cap and how to raise it", err)
			}
			checkStored(t, s, []blob.Info{stored})
		})
	}
}

func testIdempotentPut(t *testing.T, s blob.Store) {
	data := []byte("stored twice")
	first := put(t, s, data)
	again, err := s.Put(ctxFor(t), bytes.NewReader(data), blob.Digest{}, 0)
	if err != nil {
		t.Fatalf("second Put = %v", err)
	}
	checkInfo(t, "second Put", again, data)
	withWant, err := s.Put(ctxFor(t), bytes.NewReader(data), first.Digest, 0)
	if err != nil {
		t.Fatalf("third Put, digest given = %v", err)
	}
	checkInfo(t, "third Put", withWant, data)
	checkStored(t, s, []blob.Info{first})
	if got := read(t, s, first.Digest); !bytes.Equal(got, data) {
		t.Errorf("Open(%s) = %q, want %q", first.Digest, got, data)
	}
}

// testPutRefreshesModTime: a repeated Put, with the digest given (the
// short cut) or not, makes the blob young again for Collect.
func testPutRefreshesModTime(t *testing.T, s blob.Store) {
	a, b := []byte("refreshed by a plain put"), []byte("refreshed by a put with its digest")
	put(t, s, a)
	put(t, s, b)
	before := stat(t, s, blob.Sum(a)).ModTime
	if bt := stat(t, s, blob.Sum(b)).ModTime; bt.After(before) {
		before = bt
	}
	// S3 keeps LastModified to the second: wait for the next one.
	<-time.After(1100 * time.Millisecond)
	if _, err := s.Put(ctxFor(t), bytes.NewReader(a), blob.Digest{}, 0); err != nil {
		t.Fatalf("Put again = %v", err)
	}
	if _, err := s.Put(ctxFor(t), bytes.NewReader(b), blob.Sum(b), 0); err != nil {
		t.Fatalf("Put again, digest given = %v", err)
	}
	for _, data := range [][]byte{a, b} {
		if after := stat(t, s, blob.Sum(data)).ModTime; !after.After(before) {
			t.Errorf("ModTime of %q after a second Put = %v, want after %v", data, after, before)
		}
	}
}

func testAbsent(t *testing.T, s blob.Store) {
	d := blob.Sum([]byte("never stored"))
	if _, err := s.Stat(ctxFor(t), d); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat(%s) = %v, want ErrNotFound", d, err)
	}
	if rc, _, err := s.Open(ctxFor(t), d); !errors.Is(err, errdefs.ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Open(%s) = %v, want ErrNotFound", d, err)
	}
	if err := s.Delete(ctxFor(t), d); err != nil {
		t.Errorf("Delete(%s) = %v, want nil", d, err)
	}
	if _, err := s.Stat(ctxFor(t), blob.Digest{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Stat(zero digest) = %v, want ErrInvalid", err)
	}
	checkStored(t, s, nil)
}

func testDelete(t *testing.T, s blob.Store) {
	gone, kept := put(t, s, []byte("deleted")), put(t, s, []byte("kept"))
	for range 2 { // the second time it is absent
		if err := s.Delete(ctxFor(t), gone.Digest); err != nil {
			t.Fatalf("Delete(%s) = %v", gone.Digest, err)
		}
	}
	if _, err := s.Stat(ctxFor(t), gone.Digest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat(%s) after Delete = %v, want ErrNotFound", gone.Digest, err)
	}
	checkStored(t, s, []blob.Info{kept})
}

func testWalk(t *testing.T, s blob.Store) {
	var infos []blob.Info
	for i := range 5 {
		infos = append(infos, put(t, s, content(i*1000, uint64(i))))
	}
	checkStored(t, s, infos)

	stop := errors.New("stop")
	calls := 0
	err := s.Walk(ctxFor(t), func(blob.Info) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("Walk with fn failing = %v after %d calls, want fn's error after 1", err, calls)
	}
}

func testConcurrentPuts(t *testing.T, s blob.Store) {
	same := content(1<<20, 42)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			var want blob.Digest
			if i%2 == 0 {
				want = blob.Sum(same)
			}
			info, err := s.Put(ctxFor(t), bytes.NewReader(same), want, 0)
			if err == nil && (info.Digest != blob.Sum(same) || info.Size != int64(len(same))) {
				err = fmt.Errorf("got %s, %d bytes; want %s, %d bytes", info.Digest, info.Size, blob.Sum(same), len(same))
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := s.Put(ctxFor(t), bytes.NewReader(content(1000, uint64(i))), blob.Digest{}, 0)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Put = %v", err)
		}
	}
	want := []blob.Info{{Digest: blob.Sum(same), Size: int64(len(same))}}
	for i := range 8 {
		want = append(want, blob.Info{Digest: blob.Sum(content(1000, uint64(i))), Size: 1000})
	}
	checkStored(t, s, want)
	if got := read(t, s, blob.Sum(same)); !bytes.Equal(got, same) {
		t.Errorf("Open(%s) after concurrent Puts read %d bytes, not the content put", blob.Sum(same), len(got))
	}
}

func testCancelledPut(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, bytes.NewReader([]byte("never")), blob.Digest{}, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Put(cancelled context) = %v, want context.Canceled", err)
	}
	checkStored(t, s, nil)
}

func testCollect(t *testing.T, s blob.Store) {
	used, unused1, unused2 := put(t, s, []byte("in use")), put(t, s, []byte("unused")), put(t, s, []byte("unused too"))
	inUse := func(d blob.Digest) bool { return d == used.Digest }

	// All were stored just now: younger than an hour's retention.
	stats, err := blob.Collect(ctxFor(t), s, inUse, time.Now().Add(-time.Hour))
	if want := (blob.CollectStats{Kept: 3}); err != nil || stats != want {
		t.Fatalf("Collect(retention 1h) = %+v, %v; want %+v", stats, err, want)
	}
	checkStored(t, s, []blob.Info{used, unused1, unused2})

	// A cutoff in the future makes them all old enough.
	stats, err = blob.Collect(ctxFor(t), s, inUse, time.Now().Add(time.Hour))
	want := blob.CollectStats{Kept: 1, Deleted: 2, Freed: unused1.Size + unused2.Size}
	if err != nil || stats != want {
		t.Fatalf("Collect(all old) = %+v, %v; want %+v", stats, err, want)
	}
	checkStored(t, s, []blob.Info{used})
}

// content is n pseudo-random bytes, the same for the same seed.
func content(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, s blob.Store, data []byte) blob.Info {
	t.Helper()
	info, err := s.Put(ctxFor(t), bytes.NewReader(data), blob.Digest{}, 0)
	if err != nil {
		t.Fatalf("Put(%d bytes) = %v", len(data), err)
	}
	return info
}

func stat(t *testing.T, s blob.Store, d blob.Digest) blob.Info {
	t.Helper()
	info, err := s.Stat(ctxFor(t), d)
	if err != nil {
		t.Fatalf("Stat(%s) = %v", d, err)
	}
	return info
}

func read(t *testing.T, s blob.Store, d blob.Digest) []byte {
	t.Helper()
	rc, info, err := s.Open(ctxFor(t), d)
	if err != nil {
		t.Fatalf("Open(%s) = %v", d, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", d, err)
	}
	if info.Digest != d || info.Size != int64(len(data)) {
		t.Errorf("Open(%s) info = %s, %d bytes; read %d bytes", d, info.Digest, info.Size, len(data))
	}
	return data
}

// checkInfo checks that info describes data.
func checkInfo(t *testing.T, op string, info blob.Info, data []byte) {
	t.Helper()
	if info.Digest != blob.Sum(data) || info.Size != int64(len(data)) || info.ModTime.IsZero() {
		t.Errorf("%s = %s, %d bytes, at %v; want %s, %d bytes, a ModTime", op, info.Digest, info.Size, info.ModTime, blob.Sum(data), len(data))
	}
}

// checkStored checks that Walk lists exactly the blobs in want (by digest
// and size), in digest order, each with a ModTime.
func checkStored(t *testing.T, s blob.Store, want []blob.Info) {
	t.Helper()
	var got []blob.Info
	if err := s.Walk(ctxFor(t), func(info blob.Info) error { got = append(got, info); return nil }); err != nil {
		t.Fatalf("Walk = %v", err)
	}
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b blob.Info) int { return strings.Compare(a.Digest.Hex(), b.Digest.Hex()) })
	if len(got) != len(want) {
		t.Fatalf("Walk listed %d blobs %v, want %d %v", len(got), digests(got), len(want), digests(want))
	}
	for i := range got {
		if got[i].Digest != want[i].Digest || got[i].Size != want[i].Size || got[i].ModTime.IsZero() {
			t.Errorf("Walk[%d] = %s, %d bytes, at %v; want %s, %d bytes, a ModTime", i, got[i].Digest, got[i].Size, got[i].ModTime, want[i].Digest, want[i].Size)
		}
	}
}

func digests(infos []blob.Info) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.Digest.String())
	}
	return out
}
