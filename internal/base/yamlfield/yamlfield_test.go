package yamlfield

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

func TestValue(t *testing.T) {
	const doc = `
a: text
b: 2
c: 2.5
d: true
e: ~
f: 2024-01-02
g: [1, "x", {k: v}]
h: &h {x: 1}
i: *h
j: 0x10
k: "2"
`
	d, err := Load([]byte(doc), "v.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	err = d.Mapping(d.Root, "", func(key, field string, _, v *yaml.Node) error {
		x, err := d.Value(v, field)
		got[key] = x
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": "text", "b": 2, "c": 2.5, "d": true, "e": nil, "f": "2024-01-02",
		"g": []any{1, "x", map[string]any{"k": "v"}},
		"h": map[string]any{"x": 1}, "i": map[string]any{"x": 1},
		"j": 16, "k": "2",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Value mismatch (-want +got):\n%s", diff)
	}
}

func TestLocate(t *testing.T) {
	d, err := Load([]byte("outer:\n  inner:\n    leaf: 1\nlist:\n  - a\n  - b\n"), "l.yaml")
	if err != nil {
		t.Fatal(err)
	}
	err = d.Mapping(d.Root, "", func(key, field string, _, v *yaml.Node) error {
		if key == "list" {
			return d.Sequence(v, field, func(int, string, *yaml.Node) error { return nil })
		}
		return d.Mapping(v, field, func(_, f string, _, v2 *yaml.Node) error {
			return d.Mapping(v2, f, func(string, string, *yaml.Node, *yaml.Node) error { return nil })
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		field     string
		line, col int
	}{
		{"outer.inner.leaf", 3, 11},   // a scalar value: at the value
		{"outer.inner", 2, 3},         // a mapping value: at the key
		{"outer.inner.missing", 2, 3}, // not read: the nearest enclosing field
		{"list[1]", 6, 5},
		{"nothing", 1, 1}, // the document
	}
	for _, tc := range tests {
		err := d.Locate(errdefs.Field(tc.field, "bad"))
		var e *Error
		if !errors.As(err, &e) || e.Line != tc.line || e.Column != tc.col || e.Field != tc.field {
			t.Errorf("Locate(%q) = %v, want %d:%d", tc.field, err, tc.line, tc.col)
		}
	}
	plain := errors.New("boom")
	if got := d.Locate(plain); got != plain {
		t.Errorf("Locate(plain error) = %v, want it unchanged", got)
	}
	positioned := &Error{Source: "x", Line: 9, Field: "outer", Reason: "r"}
	if got := d.Locate(positioned); got != error(positioned) {
		t.Errorf("Locate(*Error) = %v, want it unchanged", got)
	}
}

func TestErrorAsFieldError(t *testing.T) {
	var err error = &Error{Source: "s", Line: 1, Column: 2, Field: "f", Reason: "r"}
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "f" || fe.Reason != "r" {
		t.Errorf("errors.As(*Error, *FieldError) = %v", fe)
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("*Error is not ErrInvalid")
	}
	if errors.As(&Error{Reason: "no field"}, &fe) {
		t.Errorf("an *Error without a field became a FieldError")
	}
}
