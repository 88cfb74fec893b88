package catalog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/template"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
)

// ParseDocument parses and validates a document of a kind, returning its
// parsed form for the wire.
func ParseDocument(kind, name string, body []byte) (json.RawMessage, error) {
	switch kind {
	case store.KindTemplate:
		t, err := template.Parse(body, name)
		if err != nil {
			return nil, err
		}
		if t.Name != name {
			return nil, errdefs.Field("name", "the file names template %q, the request %q; make them agree", t.Name, name)
		}
		return json.Marshal(t)
	case store.KindMapping:
		rules, err := mapping.Parse(body, name)
		if err != nil {
			return nil, err
		}
		return json.Marshal(rules)
	}
	return nil, fmt.Errorf("unknown document kind %q", kind)
}

func APIDocument(d store.Document) api.Document {
	parsed, err := ParseDocument(d.Kind, d.Name, d.Body)
	if err != nil {
		parsed = json.RawMessage("null") // stored by an older version that accepted it
	}
	return api.Document{Name: d.Name, Version: d.Version, Parsed: parsed, YAML: string(d.Body),
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
}

// Render turns a stored template into the Extra map a provider gets,
// applying every stored mapping set in name order.
func (c *Catalog) Render(ctx context.Context, name, provider string) (api.Rendered, error) {
	if err := mapping.CheckProvider("provider", provider); err != nil {
		return api.Rendered{}, err
	}
	d, err := c.store.GetDocument(ctx, store.KindTemplate, name)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return api.Rendered{}, errdefs.NotFound("template %q (see nodemgr template ls)", name)
		}
		return api.Rendered{}, err
	}
	t, err := template.Parse(d.Body, name)
	if err != nil {
		return api.Rendered{}, fmt.Errorf("stored template %s no longer parses: %w", name, err)
	}
	sets, err := c.store.ListDocuments(ctx, store.KindMapping, store.Page{})
	if err != nil {
		return api.Rendered{}, err
	}
	var rules []mapping.Rule
	out := api.Rendered{Template: name, Provider: provider, Mappings: []string{}}
	for _, set := range sets {
		rs, err := mapping.Parse(set.Body, set.Name)
		if err != nil {
			return api.Rendered{}, fmt.Errorf("stored mapping set %s no longer parses: %w", set.Name, err)
		}
		rules = append(rules, rs...)
		out.Mappings = append(out.Mappings, set.Name)
	}
	extra, steps, err := template.Render(t, provider, rules)
	if err != nil {
		return api.Rendered{}, fmt.Errorf("render %s for %s: %w", name, provider, err)
	}
	out.Extra = extra
	for _, st := range steps {
		out.Steps = append(out.Steps, api.RenderStep{Layer: st.Layer, Matched: st.Matched, Pass: st.Pass,
			Key: st.Key, Value: st.Value, Old: st.Old, Removed: st.Removed, Text: st.String()})
	}
	return out, nil
}
