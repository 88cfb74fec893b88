package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// TestPatchPool: PATCH /v1/pools/{pool} changes only the fields its body
// has, and a refused value names its field.
func TestPatchPool(t *testing.T) {
	ts := newTestServer(t)
	spec, err := orchestrate.Normalize(api.PoolSpec{Name: "p1", Template: "t1", Provider: "local", Tags: []string{"linux"}, Max: 4})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(spec)
	if _, err := ts.store.PutDocument(t.Context(), store.Document{Kind: store.KindPool, Name: "p1", Body: body}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		body any
		want func(s api.PoolSpec) bool
	}{
		{"scale", map[string]int{"min": 2, "max": 6}, func(s api.PoolSpec) bool { return s.Min == 2 && s.Max == 6 && !s.Paused }},
		{"pause", map[string]bool{"paused": true}, func(s api.PoolSpec) bool { return s.Paused && s.Min == 2 && s.Max == 6 }},
		{"priority", map[string]int{"priority": 5}, func(s api.PoolSpec) bool { return s.Priority == 5 && s.Paused }},
		{"resume", map[string]bool{"paused": false}, func(s api.PoolSpec) bool { return !s.Paused && s.Priority == 5 }},
	}
	for _, st := range steps {
		var p api.Pool
		ts.mustCall(t, http.StatusOK, ts.admin, "PATCH", "/v1/pools/p1", st.body, &p)
		if !st.want(p.Spec) || p.Spec.Template != "t1" || p.Spec.IdleTimeout != spec.IdleTimeout || len(p.Spec.Tags) != 1 {
			t.Errorf("PATCH %s %v: spec = %+v", st.name, st.body, p.Spec)
		}
	}
	for _, tc := range []struct {
		name  string
		body  any
		code  int
		field string
	}{
		{"max below min", map[string]int{"max": 1}, http.StatusBadRequest, "max"},
		{"negative min", map[string]int{"min": -1}, http.StatusBadRequest, "min"},
		{"max too large", map[string]int{"max": 5000}, http.StatusBadRequest, "max"},
		{"min above max", map[string]int{"min": 9}, http.StatusBadRequest, "min"},
		{"nothing", map[string]int{}, http.StatusBadRequest, "nothing to change"},
		{"unknown field", map[string]int{"maximum": 3}, http.StatusBadRequest, "maximum"},
	} {
		code, got := ts.call(t, ts.admin, "PATCH", "/v1/pools/p1", tc.body, nil)
		if code != tc.code || !strings.Contains(got, tc.field) {
			t.Errorf("PATCH %s %v = %d %s, want %d naming %q", tc.name, tc.body, code, got, tc.code, tc.field)
		}
	}
	if code, got := ts.call(t, ts.admin, "PATCH", "/v1/pools/nope", map[string]int{"max": 2}, nil); code != http.StatusNotFound {
		t.Errorf("PATCH of a missing pool = %d %s, want 404", code, got)
	}
	var d api.PoolDetail
	ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/pools/p1", nil, &d)
	if d.Spec.Min != 2 || d.Spec.Max != 6 || d.Spec.Priority != 5 || d.Spec.Paused {
		t.Errorf("stored spec after refused patches = %+v, want min 2, max 6, priority 5, not paused", d.Spec)
	}
}
