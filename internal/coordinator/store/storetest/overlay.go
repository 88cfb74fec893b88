package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func testOverlay(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"o1", "o2", "o3", "o4"} {
		if _, err := s.CreateNode(ctx, newNode(id)); err != nil {
			t.Fatal(err)
		}
	}
	member := func(id, key string) store.OverlayMember {
		return store.OverlayMember{NodeID: id, PublicKey: key, ListenPort: 51820, Endpoint: "10.0.0.1:51820", Kind: api.OverlayUserspace, Block: 99}
	}
	rev := func() int64 {
		r, err := s.OverlayRevision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rev0 := rev()
	for i, id := range []string{"o1", "o2", "o3"} {
		m, err := s.JoinOverlay(ctx, member(id, "key-"+id), 3)
		if err != nil || m.Block != i || m.JoinedAt.IsZero() {
			t.Fatalf("JoinOverlay(%s) = %+v, %v; want block %d, whatever the member asked", id, m, err, i)
		}
	}
	if _, err := s.JoinOverlay(ctx, member("o4", "key-o4"), 3); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("JoinOverlay past the last block = %v, want unavailable", err)
	}
	if _, err := s.JoinOverlay(ctx, member("o4", "key-o1"), 4); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("JoinOverlay with another node's key = %v, want conflict", err)
	}
	if _, err := s.JoinOverlay(ctx, member("nope", "key-nope"), 4); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("JoinOverlay(unknown node) = %v, want not found", err)
	}
	rev1 := rev()
	if rev1 == rev0 {
		t.Errorf("OverlayRevision did not move after three joins (%d)", rev1)
	}
	// A second join that changes nothing writes nothing.
	if m, err := s.JoinOverlay(ctx, member("o2", "key-o2"), 3); err != nil || m.Block != 1 || rev() != rev1 {
		t.Errorf("JoinOverlay(o2 again) = %+v, %v, revision %d; want block 1 and revision %d", m, err, rev(), rev1)
	}
	// A new key and endpoint keep the block.
	moved := member("o2", "key-o2-new")
	moved.Endpoint = "10.0.0.9:4000"
	if m, err := s.JoinOverlay(ctx, moved, 3); err != nil || m.Block != 1 || m.PublicKey != "key-o2-new" {
		t.Errorf("JoinOverlay(o2, new key) = %+v, %v; want block 1 with the new key", m, err)
	}
	if rev() == rev1 {
		t.Error("OverlayRevision did not move after a new key")
	}
	// A deleted node frees its block for the next one.
	if err := s.DeleteNode(ctx, "o1"); err != nil {
		t.Fatal(err)
	}
	if m, err := s.JoinOverlay(ctx, member("o4", "key-o4"), 3); err != nil || m.Block != 0 {
		t.Errorf("JoinOverlay(o4) after o1 went = %+v, %v; want o1's block 0", m, err)
	}
	got, err := s.ListOverlay(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range got {
		ids = append(ids, m.NodeID)
	}
	if want := []string{"o4", "o2", "o3"}; !slices.Equal(ids, want) || got[1].Endpoint != "10.0.0.9:4000" || got[1].Kind != api.OverlayUserspace {
		t.Errorf("ListOverlay = %+v, want %v by block with o2's new endpoint", got, want)
	}
}
