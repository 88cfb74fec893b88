// Package fuzzcheck holds the decoding and the checks that the fuzz
// targets of several parsers share. Only tests import it.
package fuzzcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

// SameNumber compares numbers by value whatever their Go type: YAML has one
// number, and writes the float 0.0 as 0, which reads back as an int.
var SameNumber = cmp.FilterValues(func(a, b any) bool {
	_, aok := number(a)
	_, bok := number(b)
	return aok && bok
}, cmp.Comparer(func(a, b any) bool {
	x, _ := number(a)
	y, _ := number(b)
	return x == y || (math.IsNaN(x) && math.IsNaN(y))
}))

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// FieldError fails t unless err is a field error: errdefs.ErrInvalid that
// names the field at fault and why. what names the call, for the failure.
func FieldError(t *testing.T, what string, err error) {
	t.Helper()
	var fe *errdefs.FieldError
	if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
		t.Fatalf("%s = %v, want a field error naming the field", what, err)
	}
}

// Check runs check on v, as a fuzz target does on what it decoded: a
// refusal must be a field error (see FieldError); a v it passes must pass
// again, unchanged, after a JSON round trip through the API's strict
// decoding. It says whether check passed v. name names check in failures.
func Check[T any](t *testing.T, name string, v T, check func(T) error) bool {
	t.Helper()
	if err := check(v); err != nil {
		FieldError(t, fmt.Sprintf("%s(%+v)", name, v), err)
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%+v) = %v", v, err)
	}
	var again T
	if err := httpapi.DecodeStrict(b, &again); err != nil {
		t.Fatalf("DecodeStrict(%s) = %v", b, err)
	}
	if err := check(again); err != nil {
		t.Fatalf("%s(%s) = %v after a JSON round trip", name, b, err)
	}
	if diff := cmp.Diff(v, again, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%T changed on a JSON round trip (-first +again):\n%s", v, diff)
	}
	return true
}

// DecodeYAML decodes data into v as the CLI reads its files: YAML, known
// fields only.
func DecodeYAML(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// Refusal fails t unless err, Parse's refusal of data, is an E (the
// parser's error type) that says why and is an errdefs.ErrInvalid.
func Refusal[E error](t *testing.T, data []byte, err error, why func(E) string) {
	t.Helper()
	var e E
	if !errors.As(err, &e) || !errors.Is(err, errdefs.ErrInvalid) || why(e) == "" {
		t.Fatalf("Parse(%q) = %v, want an %T that is an errdefs.ErrInvalid", data, err, e)
	}
}

// YAMLRoundTrip fails t unless v, which parse made of data, comes back
// equal when doc (v in its file's shape) is written out as YAML and
// parsed again.
func YAMLRoundTrip[T any](t *testing.T, data []byte, v T, doc any, parse func(data []byte, name string) (T, error)) {
	t.Helper()
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatalf("yaml.Marshal(%+v) = %v", doc, err)
	}
	again, err := parse(out, "again.yaml")
	if err != nil {
		t.Fatalf("Parse(yaml.Marshal(Parse(%q))) = %v; YAML:\n%s", data, err, out)
	}
	if diff := cmp.Diff(v, again, cmpopts.EquateEmpty(), SameNumber); diff != "" {
		t.Fatalf("%T changed on a round trip through YAML (-first +again):\n%s\nYAML:\n%s", v, diff, out)
	}
}
