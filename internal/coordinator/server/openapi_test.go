package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi/datamodel"
)

// TestOpenAPIMatchesRoutes keeps the served OpenAPI document true to the
// handlers: every route is documented and every documented operation exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := servedDoc(t)
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !isMethod(method) {
				continue
			}
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range (&Server{}).routeTable() {
		served[rt.Method+" "+docPath(rt.Path)] = true
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

// TestOpenAPIDocumentIsValid validates the served document with an
// OpenAPI 3.1 implementation other than ours (pb33f/libopenapi): against the
// specification's own JSON Schema, and by building its model, which resolves
// every $ref.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	b, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if errs := validateOpenAPI(b); len(errs) > 0 {
		t.Fatalf("openapi.yaml is not valid OpenAPI 3.1:\n%s", strings.Join(errs, "\n"))
	}
}

// TestOpenAPIValidatorCatchesBrokenDocuments proves the validity check can
// fail: each document here has a defect the real one once had, or one that
// is easy to make.
func TestOpenAPIValidatorCatchesBrokenDocuments(t *testing.T) {
	head := `{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, `
	for _, tc := range []struct{ name, doc string }{
		// An unquoted comma in flow-style YAML split a description into a
		// stray key: components/parameters/Node stopped being a parameter.
		{"stray key in a parameter", head + `"paths": {}, "components": {"parameters": {"Node": {"name": "node", "in": "path", "required": true, "description": "Node ID", "name or unique ID prefix": null, "schema": {"type": "string"}}}}}`},
		{"dangling $ref", head + `"paths": {"/x": {"get": {"responses": {"200": {"$ref": "#/components/responses/Nope"}}}}}}`},
		{"parameter with no in", head + `"paths": {"/x": {"get": {"parameters": [{"name": "q"}], "responses": {"200": {"description": "ok"}}}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if errs := validateOpenAPI([]byte(tc.doc)); len(errs) == 0 {
				t.Errorf("validateOpenAPI(%s) found nothing wrong", tc.doc)
			}
		})
	}
}

// validateOpenAPI returns what libopenapi finds wrong with a document.
func validateOpenAPI(b []byte) []string {
	// Its logger would print the defects the errors below already name.
	cfg := datamodel.NewDocumentConfiguration()
	cfg.Logger = slog.New(slog.DiscardHandler)
	doc, err := libopenapi.NewDocumentWithConfiguration(b, cfg)
	if err != nil {
		return []string{fmt.Sprintf("parse: %v", err)}
	}
	var errs []string
	if _, err := doc.BuildV3Model(); err != nil {
		errs = append(errs, fmt.Sprintf("build model: %v", err))
	}
	v, verrs := validator.NewValidator(doc)
	for _, err := range verrs {
		errs = append(errs, fmt.Sprintf("validator: %v", err))
	}
	if v == nil {
		return errs
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			errs = append(errs, e.Error())
			for _, f := range e.SchemaValidationErrors {
				errs = append(errs, fmt.Sprintf("  at %s: %s", f.FieldPath, f.Reason))
			}
		}
		if len(verrs) == 0 {
			errs = append(errs, "invalid, with no reason given")
		}
	}
	return errs
}

var camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// TestOpenAPIOperations checks what a client generator and a reader rely
// on: unique camelCase operation IDs, the 401 of every authenticated route
// and the 403 of every admin-only one, the 503 of every route (the store
// may not answer in time), the 413 of every body, a success
// answer, and error answers that are error bodies.
func TestOpenAPIOperations(t *testing.T) {
	doc := servedDoc(t)
	auth := map[string]authKind{}
	for _, rt := range (&Server{}).routeTable() {
		auth[rt.Method+" "+docPath(rt.Path)] = rt.Auth
	}
	seen := map[string]string{}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			if !isMethod(method) {
				continue
			}
			name := strings.ToUpper(method) + " " + path
			var op struct {
				OperationID string                     `json:"operationId"`
				RequestBody json.RawMessage            `json:"requestBody"`
				Responses   map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if !camelCase.MatchString(op.OperationID) {
				t.Errorf("%s: operationId %q is not camelCase", name, op.OperationID)
			}
			if other, dup := seen[op.OperationID]; dup {
				t.Errorf("%s: operationId %q is also %s's", name, op.OperationID, other)
			}
			seen[op.OperationID] = name
			checkResponses(t, name, auth[name], op.Responses)
			if _, ok := op.Responses["413"]; op.RequestBody != nil && !ok {
				t.Errorf("%s: takes a body but does not list 413 (every body is read within a limit)", name)
			}
		}
	}
}

func checkResponses(t *testing.T, name string, kind authKind, responses map[string]json.RawMessage) {
	t.Helper()
	if _, ok := responses["401"]; ok != (kind != authNone) {
		t.Errorf("%s: lists 401 = %v, but its route takes a credential = %v", name, ok, kind != authNone)
	}
	if _, ok := responses["403"]; kind == authAdmin && !ok {
		t.Errorf("%s: is for admins only but does not list 403", name)
	}
	if _, ok := responses["503"]; !ok {
		t.Errorf("%s: does not list 503 (every route meets the store, which may not answer in time)", name)
	}
	success := false
	for code, raw := range responses {
		switch {
		case code < "400":
			success = true
		case !strings.Contains(string(raw), `"#/components/responses/`) && !strings.Contains(string(raw), "text/plain"):
			t.Errorf("%s: response %s is not one of components/responses (an error body)", name, code)
		}
	}
	if !success {
		t.Errorf("%s: lists no success response", name)
	}
}

// openapiDoc is the part of the served document the tests read.
type openapiDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

func servedDoc(t *testing.T) openapiDoc {
	t.Helper()
	b, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc openapiDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func isMethod(key string) bool {
	return slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}, key)
}

// docPath is a route's pattern as OpenAPI writes it: a trailing wildcard
// {path...} is the parameter {path}.
func docPath(p string) string { return strings.ReplaceAll(p, "...}", "}") }

// TestOpenAPIConventions holds the API to its two conventions (issue 31
// item 12): every state, status or phase is spelled in lower case (kebab
// case for two words), and every JSON answer that lists things is an
// object whose array is named after them, never a bare array. The
// end-to-end schema check holds the answers to this document.
func TestOpenAPIConventions(t *testing.T) {
	doc := servedDoc(t)
	spelling := regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if props, ok := x["properties"].(map[string]any); ok {
				for name, p := range props {
					pm, _ := p.(map[string]any)
					enum, _ := pm["enum"].([]any)
					if !strings.Contains(name, "state") && !strings.Contains(name, "status") {
						continue
					}
					for _, e := range enum {
						if s, _ := e.(string); !spelling.MatchString(s) {
							t.Errorf("%s.%s: %q is not lower (kebab) case", at, name, e)
						}
					}
				}
			}
			for k, c := range x {
				walk(at+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s[%d]", at, i), c)
			}
		}
	}
	for name, s := range doc.Components.Schemas {
		walk("components/schemas/"+name, s)
	}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				Parameters []struct {
					Name   string         `json:"name"`
					Schema map[string]any `json:"schema"`
				} `json:"parameters"`
				Responses map[string]struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"responses"`
			}
			if json.Unmarshal(raw, &op) != nil {
				continue // the path's own parameters
			}
			for _, p := range op.Parameters {
				if p.Name == "state" || p.Name == "status" {
					walk(method+" "+path+"?"+p.Name, map[string]any{"properties": map[string]any{p.Name: p.Schema}})
				}
			}
			for code, r := range op.Responses {
				if s := r.Content["application/json"].Schema; strings.HasPrefix(code, "2") && s["type"] == "array" {
					t.Errorf("%s %s answers %s with a bare array; answer {\"<what it lists>\": [...]}", strings.ToUpper(method), path, code)
				}
			}
		}
	}
}
