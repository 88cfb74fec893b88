package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// testActionCache: entries are found by scope and key, never across
// scopes; a new entry replaces the old of its key; an entry's outputs are
// blobs in use while it lives; delete removes one key or a whole scope;
// expiry removes what was not used since.
func testActionCache(t *testing.T, s store.Store) {
	ctx := t.Context()
	out := api.TaskFile{Path: "a.o", Digest: digestOf("a.o"), Size: 3}
	first := store.CachedAction{TaskID: "t-1", Result: api.TaskResult{Stdout: "built", DurationMS: 900, Outputs: []api.TaskFile{out}}}
	if err := s.CacheActions(ctx, "ml", map[string]store.CachedAction{"k1": first, "k2": first}); err != nil {
		t.Fatal(err)
	}
	got, err := s.CachedActions(ctx, "ml", []string{"k1", "k3"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]store.CachedAction{"k1": first}, got); diff != "" {
		t.Errorf("CachedActions(ml, k1 k3) (-want +got):\n%s", diff)
	}
	if got, err := s.CachedActions(ctx, "ops", []string{"k1"}); err != nil || len(got) != 0 {
		t.Errorf("CachedActions(ops, k1) = %v, %v; want nothing: scopes never share", got, err)
	}
	used, err := s.BlobsInUse(ctx)
	if err != nil || !used[out.Digest] {
		t.Errorf("BlobsInUse = %v, %v; want %s, an entry's output", used, err, out.Digest)
	}

	second := store.CachedAction{TaskID: "t-2", Result: api.TaskResult{Stdout: "again"}}
	if err := s.CacheActions(ctx, "ml", map[string]store.CachedAction{"k1": second}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.CachedActions(ctx, "ml", []string{"k1"}); got["k1"].TaskID != "t-2" {
		t.Errorf("k1 after a second CacheActions = %+v, want t-2's", got["k1"])
	}
	if n, err := s.DeleteCachedActions(ctx, "ml", "k2"); n != 1 || err != nil {
		t.Errorf("DeleteCachedActions(ml, k2) = %d, %v; want 1", n, err)
	}
	if used, _ := s.BlobsInUse(ctx); used[out.Digest] {
		t.Errorf("BlobsInUse still has %s: no entry names it any more", out.Digest)
	}

	if err := s.CacheActions(ctx, "ops", map[string]store.CachedAction{"k9": second}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ExpireCachedActions(ctx, time.Now().Add(-time.Hour)); n != 0 || err != nil {
		t.Errorf("ExpireCachedActions(an hour ago) = %d, %v; want 0: all were used since", n, err)
	}
	if n, err := s.DeleteCachedActions(ctx, "ml", ""); n != 1 || err != nil {
		t.Errorf("DeleteCachedActions(ml, all) = %d, %v; want 1 (k1)", n, err)
	}
	if n, err := s.ExpireCachedActions(ctx, time.Now().Add(time.Hour)); n != 1 || err != nil {
		t.Errorf("ExpireCachedActions(in an hour) = %d, %v; want 1 (ops k9)", n, err)
	}
}
