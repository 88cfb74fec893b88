package provision

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Readers of a rendered template's Extra, shared by the drivers. Values
// arrive as YAML or JSON decoded them (numbers as int, float64 or
// json.Number, lists as []any, maps as map[string]any); a value of the
// wrong type is errdefs.Field("extra.<key>", ...) saying what was wanted.

// ExtraString reads a string; absent is "".
func ExtraString(extra map[string]any, key string) (string, error) {
	switch v := extra[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", errdefs.Field("extra."+key, "want a string, got %s", TypeName(v))
	}
}

// ExtraBool reads true or false; absent is false.
func ExtraBool(extra map[string]any, key string) (bool, error) {
	switch v := extra[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	default:
		return false, errdefs.Field("extra."+key, "want true or false, got %s", TypeName(v))
	}
}

// ExtraNumber reads a number however it arrived: a Go number from YAML, a
// float64 or json.Number from JSON, or a numeric string. ok is false when
// the key is absent.
func ExtraNumber(extra map[string]any, key string) (f float64, ok bool, err error) {
	v, ok := extra[key]
	if !ok || v == nil {
		return 0, false, nil
	}
	switch n := v.(type) {
	case int, int8, int16, int32, int64:
		f = float64(reflect.ValueOf(n).Int())
	case uint, uint8, uint16, uint32, uint64:
		f = float64(reflect.ValueOf(n).Uint())
	case float32:
		f = float64(n)
	case float64:
		f = n
	case json.Number:
		if f, err = n.Float64(); err != nil {
			return 0, false, errdefs.Field("extra."+key, "%q is not a number", n)
		}
	case string:
		if f, err = strconv.ParseFloat(strings.TrimSpace(n), 64); err != nil {
			return 0, false, errdefs.Field("extra."+key, "%q is not a number", n)
		}
	default:
		return 0, false, errdefs.Field("extra."+key, "want a number, got %s", TypeName(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false, errdefs.Field("extra."+key, "%v is not a number", f)
	}
	return f, true, nil
}

// ExtraStrings reads the list of strings v found under key: []string, or
// []any holding strings.
func ExtraStrings(key string, v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return slices.Clone(l), nil
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, errdefs.Field(fmt.Sprintf("extra.%s[%d]", key, i), "want a string, got %s", TypeName(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, errdefs.Field("extra."+key, "want a list of strings, got %s", TypeName(v))
}

// ExtraStringMap reads a map of strings; scalar values are formatted.
func ExtraStringMap(extra map[string]any, key string) (map[string]string, error) {
	switch m := extra[key].(type) {
	case nil:
		return nil, nil
	case map[string]string:
		return maps.Clone(m), nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, v := range m {
			switch s := v.(type) {
			case string:
				out[k] = s
			case bool, int, int64, float64, json.Number:
				out[k] = fmt.Sprint(s)
			default:
				return nil, errdefs.Field("extra."+key+"."+k, "want a string, got %s", TypeName(v))
			}
		}
		return out, nil
	default:
		return nil, errdefs.Field("extra."+key, "want a map of strings, got %s", TypeName(m))
	}
}

// TypeName says what kind of value v is, for error messages.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, json.Number:
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any, map[string]string:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}
