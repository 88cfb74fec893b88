package mapping

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// All is the overrides key that applies to every provider.
const All = "all"

// IsProvider reports whether name is a registered provider (not All).
func IsProvider(name string) bool {
	_, err := provision.Lookup("provider", name)
	return err == nil
}

// CheckProvider returns an ErrInvalid naming field when provider is not
// one a template can be rendered for.
func CheckProvider(field, provider string) error {
	if !IsProvider(provider) {
		return errdefs.Field(field, "unknown provider %q; want one of %s", provider, strings.Join(provision.Names(), ", "))
	}
	return nil
}

// The template fields, as Extra keys. Overrides may set them too (the seed's
// libvirt block sets memoryMB), so their values are checked wherever they
// appear; every provider block may set them.
var (
	textKeys = []string{"name", "image", "user"}
	sizeKeys = []string{"cpu", "memoryMB", "diskMB"}
)

// checkKey refuses a key a provider block names that the provider does
// not read (its record's ExtraKeys, and the template fields). The all
// block may hold any key: some provider may read it; so may the block of
// a provider whose record does not say (ExtraKeys nil).
func checkKey(field, provider, key string) error {
	if provider == All {
		return nil
	}
	d, err := provision.Lookup(field, provider)
	if err != nil {
		return err
	}
	if d.ExtraKeys == nil {
		return nil
	}
	known := slices.Concat(d.ExtraKeys, textKeys, sizeKeys)
	slices.Sort(known)
	if slices.Contains(known, key) {
		return nil
	}
	hint := "it reads " + strings.Join(known, ", ")
	if s := yamlfield.Suggest(key, known); s != "" {
		hint = fmt.Sprintf("did you mean %s?", s)
	}
	return errdefs.Field(field, "the %s provider reads no key %q (%s); put keys meant for every provider under all", provider, key, hint)
}

// ValidateOverrides checks an overrides block, {all|<provider>: {key:
// value}}, as found in templates and mapping rules: provider names must be
// known, keys non-empty, and the template fields keep their types (text for
// name, image, user; a non-negative whole number for cpu, memoryMB,
// diskMB). A null value is allowed anywhere: it removes the key.
func ValidateOverrides(field string, o map[string]map[string]any) error {
	for _, p := range sortedKeys(o) {
		pf := field + "." + p
		if p != All && !IsProvider(p) {
			return errdefs.Field(pf, "unknown provider %q; want all, %s", p, strings.Join(provision.Names(), ", "))
		}
		for _, k := range sortedKeys(o[p]) {
			if k == "" {
				return errdefs.Field(pf, "keys must not be empty")
			}
			if err := checkKey(pf+"."+k, p, k); err != nil {
				return err
			}
			if err := checkValue(pf+"."+k, k, o[p][k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkValue checks v as the Extra value of key, reported as field.
func checkValue(field, key string, v any) error {
	if v == nil {
		return nil
	}
	switch {
	case slices.Contains(textKeys, key):
		if _, ok := v.(string); !ok {
			return errdefs.Field(field, "must be text, got %s", describeValue(v))
		}
	case slices.Contains(sizeKeys, key):
		n, ok := asInt(v)
		if !ok {
			return errdefs.Field(field, "must be a whole number, got %s", describeValue(v))
		}
		if n < 0 {
			return errdefs.Field(field, "must not be negative, got %d", n)
		}
	}
	return nil
}

// asInt returns v as an int if it is a whole number of any Go numeric type
// (JSON gives float64, YAML int).
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), n >= math.MinInt && n <= math.MaxInt
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint:
		return int(n), n <= math.MaxInt
	case uint64:
		return int(n), n <= math.MaxInt
	case float32:
		return asInt(float64(n))
	case float64:
		if n != math.Trunc(n) || n < math.MinInt || n >= math.MaxInt { // float64(MaxInt) rounds up to 2^63
			return 0, false
		}
		return int(n), true
	}
	return 0, false
}

func describeValue(v any) string {
	switch v.(type) {
	case string:
		return fmt.Sprintf("the text %q", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	}
	return fmt.Sprintf("%v", v)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
