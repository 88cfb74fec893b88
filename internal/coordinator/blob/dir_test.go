package blob_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/blob"
	"github.com/nodemgr/nodemgr/internal/coordinator/blob/blobtest"
)

func newDir(t testing.TB) (*blob.Dir, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "blobs")
	s, err := blob.NewDir(root)
	if err != nil {
		t.Fatalf("NewDir: %v", err)
	}
	return s, root
}

func TestConformanceDir(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { s, _ := newDir(t); return s })
}

// TestDirLayout: blobs are private files under sha256/<first two hex
// digits>/<hex>.
func TestDirLayout(t *testing.T) {
	s, root := newDir(t)
	info, err := s.Put(ctxFor(t), bytes.NewReader([]byte("hello")), blob.Digest{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "sha256", helloHex[:2], helloHex)
	if info.Digest.Hex() != helloHex {
		t.Fatalf("Put(hello) = %s, want sha256:%s", info.Digest, helloHex)
	}
	for p, want := range map[string]os.FileMode{
		path:                          0o600,
		filepath.Dir(path):            0o700 | os.ModeDir,
		filepath.Join(root, "sha256"): 0o700 | os.ModeDir,
		filepath.Join(root, "tmp"):    0o700 | os.ModeDir,
		root:                          0o700 | os.ModeDir,
	} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("stat %s = %v, %v; want mode %v", p, fi.Mode(), err, want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
		t.Errorf("tmp holds %d files after a Put, want none", len(entries))
	}
}

// TestDirWalkRemovesStaleTemps: Walk deletes what a crashed Put left
// (older than an hour), leaves a Put in progress alone, and lists
// neither, nor files that are not blobs.
func TestDirWalkRemovesStaleTemps(t *testing.T) {
	s, root := newDir(t)
	info, err := s.Put(ctxFor(t), bytes.NewReader([]byte("hello")), blob.Digest{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(root, "tmp", "put-1"), filepath.Join(root, "tmp", "put-2")
	foreign := filepath.Join(root, "sha256", helloHex[:2], "notes.txt")
	misplaced := filepath.Join(root, "sha256", "00", helloHex)
	os.MkdirAll(filepath.Dir(misplaced), 0o700)
	for _, p := range []string{stale, fresh, foreign, misplaced} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)

	var got []blob.Digest
	if err := s.Walk(ctxFor(t), func(i blob.Info) error { got = append(got, i.Digest); return nil }); err != nil {
		t.Fatalf("Walk = %v", err)
	}
	if len(got) != 1 || got[0] != info.Digest {
		t.Errorf("Walk listed %v, want only %s", got, info.Digest)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s (2h old temp) after Walk = %v, want it removed", stale, err)
	}
	for _, p := range []string{fresh, foreign, misplaced} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("stat %s after Walk = %v, want it left alone", p, err)
		}
	}
}

// TestDirCollectRetention: with real ages (backdated files), Collect
// deletes an unused blob older than the retention and keeps a younger
// one, and a repeated Put rescues an old blob.
func TestDirCollectRetention(t *testing.T) {
	s, root := newDir(t)
	var infos []blob.Info
	for _, data := range []string{"old", "young", "old but put again"} {
		info, err := s.Put(ctxFor(t), bytes.NewReader([]byte(data)), blob.Digest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	old := time.Now().Add(-48 * time.Hour)
	for _, i := range []int{0, 2} {
		h := infos[i].Digest.Hex()
		os.Chtimes(filepath.Join(root, "sha256", h[:2], h), old, old)
	}
	if _, err := s.Put(ctxFor(t), bytes.NewReader([]byte("old but put again")), infos[2].Digest, 0); err != nil {
		t.Fatal(err)
	}
	stats, err := blob.Collect(ctxFor(t), s, func(blob.Digest) bool { return false }, time.Now().Add(-24*time.Hour))
	want := blob.CollectStats{Kept: 2, Deleted: 1, Freed: 3}
	if err != nil || stats != want {
		t.Fatalf("Collect(24h retention) = %+v, %v; want %+v", stats, err, want)
	}
	if _, err := s.Stat(ctxFor(t), infos[0].Digest); err == nil {
		t.Errorf("Stat(old blob) after Collect = nil error, want it deleted")
	}
}

func BenchmarkDirPut(b *testing.B) {
	s, _ := newDir(b)
	data := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	for i := 0; b.Loop(); i++ {
		copy(data, []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}) // a new blob each time
		if _, err := s.Put(ctxFor(b), bytes.NewReader(data), blob.Digest{}, 0); err != nil {
			b.Fatal(err)
		}
	}
}
