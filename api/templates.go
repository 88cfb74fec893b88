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

// DocumentList is the body of GET /v1/templates and GET /v1/mappings.
type DocumentList struct {
	Items []Document `json:"items"`
	Next  string     `json:"next,omitempty"` // pass as ?after= for the next page; absent on the last
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
