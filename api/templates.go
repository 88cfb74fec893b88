package api

import (
	"encoding/json"
	"time"
)

// Document is a stored template or mapping set: the YAML as the user wrote
// it, and its parsed form.
type Document struct {
	Name      string          `json:"name"`
	Version   int             `json:"version"`
	Parsed    json.RawMessage `json:"parsed"` // the template, or the list of mapping rules
	YAML      string          `json:"yaml"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	Templates []Document `json:"templates"`
	Next      string     `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// MappingList is the body of GET /v1/mappings.
type MappingList struct {
	Mappings []Document `json:"mappings"`
	Next     string     `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
}

// DocumentList is a page of templates or of mapping sets as a client reads
// either list; DocumentPage is its wire form.
type DocumentList struct {
	Items []Document
	Next  string
}

// UnmarshalJSON reads a TemplateList or a MappingList (or the {"items"} of
// servers before one shape of lists).
func (l *DocumentList) UnmarshalJSON(b []byte) error {
	var w struct {
		Templates, Mappings, Items []Document
		Next                       string
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	l.Items, l.Next = append(append(w.Templates, w.Mappings...), w.Items...), w.Next
	return nil
}

// DocumentPage is the wire form of a page of plural's documents
// ("templates" or "mappings").
func DocumentPage(plural string, docs []Document, next string) any {
	if docs == nil {
		docs = []Document{}
	}
	if plural == "mappings" {
		return MappingList{Mappings: docs, Next: next}
	}
	return TemplateList{Templates: docs, Next: next}
}

// RenderStep is one change rendering made to Extra, and which layer made it.
type RenderStep struct {
	Layer   string `json:"layer"`
	Matched string `json:"matched,omitempty"`
	Pass    int    `json:"pass,omitempty"`
	Key     string `json:"key"`
	Value   any    `json:"value,omitempty"`
	Old     any    `json:"old,omitempty"`
	Removed bool   `json:"removed,omitempty"`
	Text    string `json:"text"` // the step in words
}

// Rendered is the body of GET /v1/templates/{name}/render: the flat Extra
// map a provider gets, and how it came about.
type Rendered struct {
	Template string         `json:"template"`
	Provider string         `json:"provider"`
	Mappings []string       `json:"mappings"` // the mapping sets applied, in order
	Extra    map[string]any `json:"extra"`
	Steps    []RenderStep   `json:"steps"`
}
