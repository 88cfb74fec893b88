package server

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes keeps the served OpenAPI document true to the
// handlers: every route is documented and every documented operation exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	b, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range (&Server{}).routeTable() {
		served[rt.Method+" "+rt.Path] = true
	}
	for op := range served {
		if !documented[op] {
			t.Errorf("route %s is not in openapi.yaml", op)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("openapi.yaml documents %s, which no route serves", op)
		}
	}
	if t.Failed() {
		var all []string
		for op := range served {
			all = append(all, op)
		}
		sort.Strings(all)
		t.Logf("served routes:\n%s", strings.Join(all, "\n"))
	}
}
