package registry

import (
	"slices"
	"testing"
)

type rec struct {
	name, group string
	order       int
}

func TestRegistry(t *testing.T) {
	g := New(func(r rec) (string, int) { return r.name, r.order })
	sameGroup := func(r rec) func(rec) bool { return func(o rec) bool { return o.group == r.group } }
	for _, tc := range []struct {
		r    rec
		want bool
	}{
		{rec{"b", "x", 2}, true},
		{rec{"a", "y", 2}, true},
		{rec{"c", "z", 1}, true},
		{rec{"b", "w", 9}, false}, // its name is taken
		{rec{"d", "x", 0}, false}, // it clashes with b
	} {
		if got := g.Add(tc.r, sameGroup(tc.r)); got != tc.want {
			t.Errorf("Add(%+v) = %v, want %v", tc.r, got, tc.want)
		}
	}
	if got, want := g.Names(), []string{"c", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v (by order, then name)", got, want)
	}
	if r, ok := g.Get("a"); !ok || r.group != "y" {
		t.Errorf(`Get("a") = %+v, %v, want group y`, r, ok)
	}
	if r, ok := g.Find(func(r rec) bool { return r.group == "z" }); !ok || r.name != "c" {
		t.Errorf("Find(group z) = %+v, %v, want c", r, ok)
	}
	if _, ok := g.Get("d"); ok {
		t.Error(`Get("d") found the record Add refused`)
	}
}
