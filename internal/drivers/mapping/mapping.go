package mapping

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Match types.
const (
	Exact = "exact"
	Glob  = "glob"
)

// MaxRules is the most rules one mapping may hold; loop probing at parse
// time grows with the square of the count.
const MaxRules = 1000

// matchTypeKey is the key under match that sets the match type.
const matchTypeKey = "match_type"

// Rule rewrites Extra when every field in Match matches.
type Rule struct {
	// Match maps an Extra key to the value (or glob pattern) it must have.
	Match map[string]string `json:"match" yaml:"match"`
	// MatchType is Exact or Glob; empty means Exact.
	MatchType string `json:"match_type,omitempty" yaml:"match_type,omitempty"`
	// Overrides are laid over Extra when the rule matches: All first, then
	// the provider's.
	Overrides map[string]map[string]any `json:"overrides" yaml:"overrides"`
}

// Error is a bad mapping file, with its position and field.
type Error = yamlfield.Error

// Parse reads a mapping file (a top-level "mapping:" list of rules)
// strictly: unknown keys, wrong types, bad match types, glob patterns that
// do not compile, unknown providers and rules that loop are errors, as
// *Error with source, line, column and the field, e.g.
// "mapping[1].match.image". A rule without match_type is Exact.
func Parse(data []byte, source string) ([]Rule, error) {
	d, err := yamlfield.Load(data, source)
	if err != nil {
		return nil, err
	}
	if d.Root == nil {
		return nil, &Error{Source: source, Line: 1, Column: 1, Reason: "empty file; want a top-level mapping: list of rules"}
	}
	rules := []Rule{}
	found := false
	err = d.Mapping(d.Root, "", func(key, field string, k, v *yaml.Node) error {
		if key != "mapping" {
			return d.Errorf(k, field, "unknown key; a mapping file has one top-level key, mapping")
		}
		found = true
		return d.Sequence(v, "mapping", func(i int, field string, item *yaml.Node) error {
			if i >= MaxRules {
				return d.Errorf(item, field, "more than %d rules", MaxRules)
			}
			r, err := parseRule(d, item, field)
			rules = append(rules, r)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, d.Errorf(d.Root, "mapping", "missing; want a top-level mapping: list of rules")
	}
	if err := Validate(rules); err != nil {
		return nil, d.Locate(err)
	}
	if err := probeLoops(rules); err != nil {
		return nil, d.Locate(err)
	}
	return rules, nil
}

func parseRule(d *yamlfield.Doc, item *yaml.Node, field string) (Rule, error) {
	r := Rule{Match: map[string]string{}}
	var typeAt string // where match_type was given, to refuse a second one
	matchType := func(v *yaml.Node, f string) error {
		if typeAt != "" {
			return d.Errorf(v, f, "match_type is already given as %s", typeAt)
		}
		typeAt = f
		s, err := d.Scalar(v, f)
		if err != nil {
			return err
		}
		if s != Exact && s != Glob {
			return d.Errorf(v, f, "must be exact or glob, got %q", s)
		}
		r.MatchType = s
		return nil
	}
	var hasMatch, hasOverrides bool
	err := d.Mapping(item, field, func(key, f string, k, v *yaml.Node) error {
		switch key {
		case "match":
			hasMatch = true
			return d.Mapping(v, f, func(mk, mf string, _, mv *yaml.Node) error {
				if mk == matchTypeKey {
					return matchType(mv, mf)
				}
				s, err := d.Scalar(mv, mf)
				r.Match[mk] = s
				return err
			})
		case matchTypeKey:
			return matchType(v, f)
		case "overrides":
			hasOverrides = true
			o, err := d.ValueMaps(v, f)
			r.Overrides = o
			return err
		}
		return d.Errorf(k, f, "unknown key; a rule has match (with match_type inside or beside it) and overrides")
	})
	if err != nil {
		return r, err
	}
	if item.Kind != yaml.MappingNode {
		return r, d.Errorf(item, field, "a rule must be a mapping with match and overrides, got null")
	}
	if !hasMatch {
		return r, d.Errorf(item, field+".match", "missing; a rule needs fields to match")
	}
	if !hasOverrides {
		return r, d.Errorf(item, field+".overrides", "missing; a rule needs overrides")
	}
	if r.MatchType == "" {
		r.MatchType = Exact
	}
	return r, nil
}

// Validate checks rules built in code (or decoded from JSON) as Parse does,
// except for the loop probe. Errors name the field, e.g. "mapping[0].match.image".
func Validate(rules []Rule) error {
	if len(rules) > MaxRules {
		return errdefs.Field("mapping", "more than %d rules", MaxRules)
	}
	for i, r := range rules {
		f := fmt.Sprintf("mapping[%d]", i)
		if len(r.Match) == 0 {
			return errdefs.Field(f+".match", "a rule needs at least one field to match")
		}
		switch r.MatchType {
		case "", Exact, Glob:
		default:
			return errdefs.Field(f+".match_type", "must be exact or glob, got %q", r.MatchType)
		}
		for _, k := range sortedKeys(r.Match) {
			switch k {
			case "":
				return errdefs.Field(f+".match", "field names must not be empty")
			case matchTypeKey:
				return errdefs.Field(f+".match."+k, "match_type is the match type, not a field to match; set MatchType")
			}
			if r.MatchType == Glob {
				if _, err := path.Match(r.Match[k], ""); err != nil {
					return errdefs.Field(f+".match."+k, "glob %q does not compile: %v", r.Match[k], err)
				}
			}
		}
		if len(r.Overrides) == 0 {
			return errdefs.Field(f+".overrides", "a rule needs overrides")
		}
		if err := ValidateOverrides(f+".overrides", r.Overrides); err != nil {
			return err
		}
	}
	return nil
}

// matches reports whether every field of r matches extra.
func (r Rule) matches(extra map[string]any) bool {
	for k, want := range r.Match {
		v, ok := extra[k]
		if !ok || v == nil {
			return false
		}
		got, isText := v.(string)
		if !isText {
			got = fmt.Sprint(v)
		}
		if r.MatchType == Glob {
			if ok, _ := path.Match(want, got); !ok {
				return false
			}
		} else if got != want {
			return false
		}
	}
	return true
}

// probeLoops runs Apply, for every provider, on an Extra map made from
// each rule's own match (a sample string for a glob), so that the common
// loops (alias A → B → A) are refused when the mapping is loaded rather
// than when a template happens to hit them.
func probeLoops(rules []Rule) error {
	for _, r := range rules {
		extra := map[string]any{}
		for k, p := range r.Match {
			s, ok := p, true
			if r.MatchType == Glob {
				s, ok = globSample(p)
			}
			if !ok {
				extra = nil
				break
			}
			extra[k] = s
		}
		if extra == nil {
			continue
		}
		for _, p := range provision.Names() {
			_, _, err := apply(extra, p, rules)
			var loop *LoopError
			if errors.As(err, &loop) {
				return err
			}
		}
	}
	return nil
}

// globSample returns a string that pattern matches, if it finds one easily:
// * matches nothing, ? an "x", a class its first fitting character.
func globSample(pattern string) (string, bool) {
	const candidates = "xa0Z-_.:"
	var b strings.Builder
	for p := pattern; p != ""; {
		switch c := p[0]; c {
		case '*':
			p = p[1:]
		case '?':
			b.WriteByte('x')
			p = p[1:]
		case '\\':
			if len(p) < 2 {
				return "", false
			}
			b.WriteByte(p[1])
			p = p[2:]
		case '[':
			i := 1
			for i < len(p) && p[i] != ']' {
				if p[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(p) {
				return "", false
			}
			class := p[:i+1]
			found := false
			for _, r := range candidates + class {
				if ok, _ := path.Match(class, string(r)); ok {
					b.WriteRune(r)
					found = true
					break
				}
			}
			if !found {
				return "", false
			}
			p = p[i+1:]
		default:
			b.WriteByte(c)
			p = p[1:]
		}
	}
	s := b.String()
	ok, _ := path.Match(pattern, s)
	return s, ok
}
