// Package apidoc writes docs/api.md, the REST API reference, from the
// server's OpenAPI document.
package apidoc

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:generate go run gen.go

// Document is where the OpenAPI document is, from the module's root.
const Document = "internal/coordinator/server/openapi.yaml"

// Reference writes docs/api.md from the OpenAPI document openapi: every
// operation by tag, in the document's order, with its method, path,
// summary, the credential it takes and the schemas of its request and
// answers. TestReferenceFresh keeps the file equal to it.
func Reference(w io.Writer, openapi []byte) error {
	var doc apiDoc
	if err := yaml.Unmarshal(openapi, &doc); err != nil {
		return fmt.Errorf("parse openapi.yaml: %w", err)
	}
	byTag := map[string][]apiRow{}
	for i := 0; i+1 < len(doc.Paths.Content); i += 2 {
		path, ops := doc.Paths.Content[i].Value, doc.Paths.Content[i+1]
		for j := 0; j+1 < len(ops.Content); j += 2 {
			method := ops.Content[j].Value
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch", "head", "options"}, method) {
				continue // path-level parameters
			}
			var op apiOperation
			if err := ops.Content[j+1].Decode(&op); err != nil {
				return fmt.Errorf("openapi.yaml: %s %s: %w", method, path, err)
			}
			tag := "other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			byTag[tag] = append(byTag[tag], apiRow{method: strings.ToUpper(method), path: path, op: op})
		}
	}

	var b bytes.Buffer
	b.WriteString("# nodemgr REST API reference\n\n")
	b.WriteString("Generated from `internal/coordinator/server/openapi.yaml` by `go generate\n")
	b.WriteString("./internal/apidoc`; do not edit. The server serves the document\n")
	b.WriteString("itself at `GET /v1/openapi.json`, with every schema in full;\n")
	b.WriteString("[api-guide.md](api-guide.md) tells how the API pages, fails and bounds its\n")
	b.WriteString("input.\n\n")
	b.WriteString(strings.TrimSpace(doc.Info.Description) + "\n")

	b.WriteString("\n## Credentials\n\n| auth | what |\n|---|---|\n| none | no credential |\n")
	for _, name := range sortedKeys(doc.Components.SecuritySchemes) {
		fmt.Fprintf(&b, "| %s | %s |\n", name, cell(doc.Components.SecuritySchemes[name].Description))
	}
	fmt.Fprintf(&b, "\nAn operation that names none takes %s.\n", strings.Join(schemeNames(doc.Security), " or "))

	b.WriteString("\n## Contents\n\n")
	tags := doc.Tags
	for tag := range byTag {
		if !slices.ContainsFunc(tags, func(t apiTag) bool { return t.Name == tag }) {
			tags = append(tags, apiTag{Name: tag})
		}
	}
	for _, t := range tags {
		if len(byTag[t.Name]) > 0 {
			fmt.Fprintf(&b, "- [%s](#%s)", t.Name, t.Name)
			if t.Description != "" {
				b.WriteString(": " + cell(t.Description))
			}
			b.WriteString("\n")
		}
	}
	for _, t := range tags {
		rows := byTag[t.Name]
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", t.Name)
		if t.Description != "" {
			b.WriteString(strings.TrimSpace(t.Description) + ".\n\n")
		}
		b.WriteString("| method | path | summary | auth | request | answers |\n|---|---|---|---|---|---|\n")
		for _, r := range rows {
			auth := "bearer"
			if r.op.Security != nil {
				auth = strings.Join(schemeNames(*r.op.Security), " or ")
				if auth == "" {
					auth = "none"
				}
			}
			req := "–"
			if r.op.RequestBody != nil {
				req = contentSchema(r.op.RequestBody.Content)
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s |\n", r.method, r.path, cell(r.op.Summary), auth, req, answers(r.op.Responses))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// apiDoc is the part of openapi.yaml the reference shows. Paths stays a
// node so that the reference keeps the document's order.
type apiDoc struct {
	Info struct {
		Description string `yaml:"description"`
	} `yaml:"info"`
	Security   []map[string][]string `yaml:"security"`
	Tags       []apiTag              `yaml:"tags"`
	Paths      yaml.Node             `yaml:"paths"`
	Components struct {
		SecuritySchemes map[string]struct {
			Description string `yaml:"description"`
		} `yaml:"securitySchemes"`
	} `yaml:"components"`
}

type apiTag struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

type apiOperation struct {
	Summary     string                 `yaml:"summary"`
	Tags        []string               `yaml:"tags"`
	Security    *[]map[string][]string `yaml:"security"` // nil: the document's; empty: none
	RequestBody *struct {
		Content map[string]apiMedia `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]struct {
		Ref     string              `yaml:"$ref"`
		Content map[string]apiMedia `yaml:"content"`
	} `yaml:"responses"`
}

type apiMedia struct {
	Schema map[string]any `yaml:"schema"`
}

type apiRow struct {
	method, path string
	op           apiOperation
}

// answers lists an operation's statuses in order, each success with the
// schema it carries: "200 Node; 401 404 503".
func answers(responses map[string]struct {
	Ref     string              `yaml:"$ref"`
	Content map[string]apiMedia `yaml:"content"`
}) string {
	var ok, errs []string
	for _, code := range sortedKeys(responses) {
		r := responses[code]
		switch {
		case code >= "400":
			errs = append(errs, code)
		case len(r.Content) > 0:
			ok = append(ok, code+" "+contentSchema(r.Content))
		default:
			ok = append(ok, code)
		}
	}
	return strings.Join(ok, ", ") + "; " + strings.Join(errs, " ")
}

// contentSchema names what a body holds: its schema's name, an array of
// one, or a type, with the media type when it is not JSON.
func contentSchema(content map[string]apiMedia) string {
	var out []string
	for _, mt := range sortedKeys(content) {
		name := schemaName(content[mt].Schema)
		if mt != "application/json" {
			name += " (" + mt + ")"
		}
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

func schemaName(s map[string]any) string {
	if ref, ok := s["$ref"].(string); ok {
		return "`" + ref[strings.LastIndex(ref, "/")+1:] + "`"
	}
	if items, ok := s["items"].(map[string]any); ok {
		return "array of " + schemaName(items)
	}
	if t, ok := s["type"].(string); ok {
		return t
	}
	return "object"
}

func schemeNames(sec []map[string][]string) []string {
	var names []string
	for _, req := range sec {
		names = append(names, sortedKeys(req)...)
	}
	return names
}

// cell makes text fit in one table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
