package template

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
)

// Template describes a machine independently of the provider that makes it.
// Zero sizes and empty text mean "unset": Render leaves them out of Extra
// and the provider picks its default.
type Template struct {
	Name     string `json:"name" yaml:"name"`
	CPU      int    `json:"cpu,omitempty" yaml:"cpu,omitempty"` // vCPUs
	MemoryMB int    `json:"memoryMB,omitempty" yaml:"memoryMB,omitempty"`
	DiskMB   int    `json:"diskMB,omitempty" yaml:"diskMB,omitempty"`
	Image    string `json:"image,omitempty" yaml:"image,omitempty"`
	User     string `json:"user,omitempty" yaml:"user,omitempty"`
	// Overrides maps "all" or a provider name to Extra keys and values
	// for that provider.
	Overrides map[string]map[string]any `json:"overrides,omitempty" yaml:"overrides,omitempty"`
}

// Error is a bad template file, with its position and field.
type Error = yamlfield.Error

// Step is one change Render made to Extra, and the layer that made it.
type Step = mapping.Step

// keys are the template's YAML keys, in the order files usually list them.
var keys = []string{"name", "cpu", "memoryMB", "diskMB", "image", "user", "overrides"}

// Parse reads a template file strictly: unknown keys, wrong types, negative
// sizes and unknown providers in overrides are errors, as *Error with
// source (a file name, for messages), line, column and field.
func Parse(data []byte, source string) (Template, error) {
	var t Template
	d, err := yamlfield.Load(data, source)
	if err != nil {
		return t, err
	}
	if d.Root == nil {
		return t, &Error{Source: source, Line: 1, Column: 1, Reason: "empty file; want a template (name, cpu, memoryMB, image, ...)"}
	}
	err = d.Mapping(d.Root, "", func(key, field string, k, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			t.Name, err = d.String(v, field)
		case "image":
			t.Image, err = d.String(v, field)
		case "user":
			t.User, err = d.String(v, field)
		case "cpu":
			t.CPU, err = d.Int(v, field)
		case "memoryMB":
			t.MemoryMB, err = d.Int(v, field)
		case "diskMB":
			t.DiskMB, err = d.Int(v, field)
		case "overrides":
			t.Overrides, err = d.ValueMaps(v, field)
		default:
			err = d.Errorf(k, field, "unknown key; want one of %s", strings.Join(keys, ", "))
		}
		return err
	})
	if err != nil {
		return Template{}, err
	}
	if d.Root.Kind != yaml.MappingNode {
		return Template{}, d.Errorf(d.Root, "", "a template must be a mapping of key: value")
	}
	if err := t.Validate(); err != nil {
		return Template{}, d.Locate(err)
	}
	return t, nil
}

// Validate checks a template built in code or decoded from JSON. Errors are
// errdefs.ErrInvalid and name the field.
func (t Template) Validate() error {
	if err := validate.Name("name", t.Name); err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"cpu", t.CPU}, {"memoryMB", t.MemoryMB}, {"diskMB", t.DiskMB}} {
		if f.v < 0 {
			return errdefs.Field(f.key, "must not be negative, got %d", f.v)
		}
	}
	return mapping.ValidateOverrides("overrides", t.Overrides)
}

// Render returns the Extra map that provider gets for t, with rules
// applied, and the steps that built it (see the package documentation for
// the order). t and rules are validated first.
func Render(t Template, provider string, rules []mapping.Rule) (map[string]any, []Step, error) {
	if err := mapping.CheckProvider("provider", provider); err != nil {
		return nil, nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, nil, fmt.Errorf("render template %s: %w", t.Name, err)
	}
	extra := map[string]any{}
	var steps []Step
	set := func(layer, key string, v any) {
		if s, ok := mapping.Set(extra, layer, key, v); ok {
			steps = append(steps, s)
		}
	}
	for _, f := range []struct {
		key string
		v   any
		set bool
	}{
		{"name", t.Name, t.Name != ""},
		{"image", t.Image, t.Image != ""},
		{"user", t.User, t.User != ""},
		{"cpu", t.CPU, t.CPU != 0},
		{"memoryMB", t.MemoryMB, t.MemoryMB != 0},
		{"diskMB", t.DiskMB, t.DiskMB != 0},
	} {
		if f.set {
			set("template", f.key, f.v)
		}
	}
	for _, layer := range []string{mapping.All, provider} {
		o := t.Overrides[layer]
		for _, k := range sortedKeys(o) {
			set("overrides."+layer, k, o[k])
		}
	}
	out, more, err := mapping.Apply(extra, provider, rules)
	if err != nil {
		return nil, nil, fmt.Errorf("render template %s for %s: %w", t.Name, provider, err)
	}
	return out, append(steps, more...), nil
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
