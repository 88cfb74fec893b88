package storetest

import (
	"errors"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

func testDocuments(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got, err := s.ListDocuments(ctx, store.KindTemplate, store.Page{}); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ListDocuments on an empty store = %#v, %v; want empty, not nil", got, err)
	}
	d, err := s.PutDocument(ctx, store.Document{Kind: store.KindTemplate, Name: "small", Body: []byte("name: small\n")})
	if err != nil || d.Version != 1 || d.CreatedAt.IsZero() || !d.CreatedAt.Equal(d.UpdatedAt) {
		t.Fatalf("PutDocument(new) = %+v, %v; want version 1 with times set", d, err)
	}
	d2, err := s.PutDocument(ctx, store.Document{Kind: store.KindTemplate, Name: "small", Body: []byte("name: small\ncpu: 2\n")})
	if err != nil || d2.Version != 2 || !d2.CreatedAt.Equal(d.CreatedAt) || string(d2.Body) != "name: small\ncpu: 2\n" {
		t.Fatalf("PutDocument(replace) = %+v, %v; want version 2, same creation time, new body", d2, err)
	}
	// Same name, other kind: a different document.
	if _, err := s.PutDocument(ctx, store.Document{Kind: store.KindMapping, Name: "small", Body: []byte("mapping: []\n")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetDocument(ctx, store.KindTemplate, "small")
	if err != nil || got.Version != 2 || string(got.Body) != string(d2.Body) {
		t.Errorf("GetDocument = %+v, %v; want version 2", got, err)
	}
	s.PutDocument(ctx, store.Document{Kind: store.KindTemplate, Name: "alpha", Body: []byte("name: alpha\n")})
	list, err := s.ListDocuments(ctx, store.KindTemplate, store.Page{})
	if err != nil || len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "small" {
		t.Errorf("ListDocuments = %v, %v; want alpha, small", list, err)
	}
	if err := s.DeleteDocument(ctx, store.KindTemplate, "small"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDocument(ctx, store.KindTemplate, "small"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetDocument after delete = %v, want not found", err)
	}
	if err := s.DeleteDocument(ctx, store.KindTemplate, "small"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteDocument twice = %v, want not found", err)
	}
	if _, err := s.GetDocument(ctx, store.KindMapping, "small"); err != nil {
		t.Errorf("the mapping of the same name went with the template: %v", err)
	}
	if _, err := s.PutDocument(ctx, store.Document{Kind: store.KindTemplate}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("PutDocument without a name = %v, want invalid", err)
	}
}
