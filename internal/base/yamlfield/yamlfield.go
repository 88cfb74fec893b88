// Package yamlfield reads the YAML files users write by hand (templates,
// mappings) strictly, one field at a time: unknown keys, wrong types,
// duplicate keys, merge keys and custom tags are errors, and every error is
// an *Error naming the source, line, column and the dotted field.
//
// It walks yaml.Node trees instead of decoding into structs with
// KnownFields(true) because the decoder reports a line but no column, names
// Go types rather than fields, and accepts duplicate keys when decoding into
// nodes. Callers decide which keys exist; this package decides how a value
// of each kind is read.
package yamlfield

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// MaxSize is the largest file Load accepts. Templates and mappings are a
// few hundred bytes; a megabyte is a mistake or an attack.
const MaxSize = 1 << 20

// maxValueNodes caps the nodes one document may expand to when read as
// values, so an alias bomb ("billion laughs") fails fast instead of eating
// memory.
const maxValueNodes = 100_000

// Error is a bad input file: where (Source:Line:Column, 1-based; zero when
// unknown), which field (dotted, e.g. "overrides.docker.env" or
// "mapping[2].match.image") and why.
//
// It is an errdefs.ErrInvalid, and errors.As turns it into an
// *errdefs.FieldError, so the API edge reports the field like any other.
type Error struct {
	Source       string
	Line, Column int
	Field        string
	Reason       string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source + ":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, "%d:", e.Column)
		}
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, errdefs.ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == errdefs.ErrInvalid }

// As lets errors.As find an *errdefs.FieldError in an *Error.
func (e *Error) As(target any) bool {
	fe, ok := target.(**errdefs.FieldError)
	if !ok || e.Field == "" {
		return false
	}
	*fe = &errdefs.FieldError{Field: e.Field, Reason: e.Reason}
	return true
}

// Doc is one loaded YAML document and the positions of the fields read from
// it so far, so that a later semantic check (which knows only field names)
// can still point at a line and column.
type Doc struct {
	Source string
	// Root is the document's top node, aliases resolved; nil when the
	// document is empty.
	Root *yaml.Node

	at    map[string]*yaml.Node
	nodes int
	// maxNodes caps nodes for Decode; 0 is maxValueNodes.
	maxNodes int
}

var syntaxRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Load parses data as exactly one YAML document.
func Load(data []byte, source string) (*Doc, error) {
	return load(data, source, MaxSize)
}

func load(data []byte, source string, limit int) (*Doc, error) {
	d := &Doc{Source: source, at: map[string]*yaml.Node{}}
	if len(data) > limit {
		return nil, &Error{Source: source, Reason: fmt.Sprintf("file is %d bytes; the limit is %d", len(data), limit)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		return nil, d.syntax(err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{Source: source, Line: next.Line, Column: next.Column, Reason: "more than one YAML document; put one per file"}
	case !errors.Is(err, io.EOF):
		return nil, d.syntax(err)
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		d.Root = deref(doc.Content[0])
		d.Mark("", d.Root)
	}
	return d, nil
}

func (d *Doc) syntax(err error) error {
	if m := syntaxRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{Source: d.Source, Line: line, Reason: "bad YAML: " + m[2]}
	}
	return &Error{Source: d.Source, Reason: "bad YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}

// deref follows aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// Errorf returns an *Error at n (or at no position when n is nil).
func (d *Doc) Errorf(n *yaml.Node, field, format string, args ...any) *Error {
	e := &Error{Source: d.Source, Field: field, Reason: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// Mark records that field was read from n, for Locate.
func (d *Doc) Mark(field string, n *yaml.Node) {
	if n != nil {
		d.at[field] = n
	}
}

// Locate gives an error from a semantic check the position of the field it
// names, or of the nearest enclosing field that was read (for a missing
// key, the mapping that lacks it; the document itself is the field "").
// Errors that already have a position, and errors that name no field, pass
// unchanged.
func (d *Doc) Locate(err error) error {
	if err == nil {
		return nil
	}
	var ye *Error
	if errors.As(err, &ye) {
		return err
	}
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	e := &Error{Source: d.Source, Field: fe.Field, Reason: fe.Reason}
	for f := fe.Field; ; f = parent(f) {
		if n, ok := d.at[f]; ok {
			e.Line, e.Column = n.Line, n.Column
			break
		}
		if f == "" {
			break
		}
	}
	return e
}

// parent drops the last ".key" or "[i]" of a dotted field.
func parent(field string) string {
	i := strings.LastIndexAny(field, ".[")
	if i < 0 {
		return ""
	}
	return field[:i]
}

// Join appends key to a dotted field.
func Join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// Mapping calls fn for each key of the mapping n, in document order. Keys
// must be distinct, non-null scalars; null n is an empty mapping. Each field
// is marked at its value when that is a scalar, else at its key, which is
// where a reader looks for it.
func (d *Doc) Mapping(n *yaml.Node, field string, fn func(key, field string, k, v *yaml.Node) error) error {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.Errorf(n, field, "must be a mapping of key: value, got %s", describe(n))
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return d.Errorf(k, field, "keys must be plain names, got %s", describe(k))
		}
		switch k.ShortTag() {
		case "!!merge":
			return d.Errorf(k, field, "merge keys (<<) are not supported; write the keys out")
		case "!!null":
			return d.Errorf(k, field, "keys must not be null")
		}
		key := k.Value
		f := Join(field, key)
		if first, dup := seen[key]; dup {
			return d.Errorf(k, f, "key given twice (first on line %d)", first.Line)
		}
		seen[key] = k
		if v.Kind == yaml.ScalarNode {
			d.Mark(f, v)
		} else {
			d.Mark(f, k)
		}
		if err := fn(key, f, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Sequence calls fn for each item of the list n; null n is an empty list.
// Item i is the field "field[i]", marked at the item.
func (d *Doc) Sequence(n *yaml.Node, field string, fn func(i int, field string, v *yaml.Node) error) error {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.Errorf(n, field, "must be a list, got %s", describe(n))
	}
	for i, v := range n.Content {
		v = deref(v)
		f := fmt.Sprintf("%s[%d]", field, i)
		d.Mark(f, v)
		if err := fn(i, f, v); err != nil {
			return err
		}
	}
	return nil
}

// String reads a scalar as text. Null is "". Numbers and booleans keep
// their text as written (image: 24.04 is "24.04"), as the YAML decoder does
// for string fields.
func (d *Doc) String(n *yaml.Node, field string) (string, error) {
	n = deref(n)
	if isNull(n) {
		return "", nil
	}
	return d.Scalar(n, field)
}

// Scalar reads a non-null scalar as text.
func (d *Doc) Scalar(n *yaml.Node, field string) (string, error) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return "", d.Errorf(n, field, "must be a single value, got %s", describe(n))
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float", "!!bool", "!!timestamp":
		return n.Value, nil
	}
	return "", d.Errorf(n, field, "unsupported tag %s", n.Tag)
}

// Int reads an integer. Null is 0; "2" (a string) and 2.5 are errors.
func (d *Doc) Int(n *yaml.Node, field string) (int, error) {
	n = deref(n)
	if isNull(n) {
		return 0, nil
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, d.Errorf(n, field, "must be a whole number, got %s", describe(n))
	}
	var i int
	if err := n.Decode(&i); err != nil {
		return 0, d.Errorf(n, field, "%s is out of range", n.Value)
	}
	return i, nil
}

// Value reads any value as plain Go data: nil, bool, int, float64,
// string, []any or map[string]any (what encoding/json produces and
// accepts). Timestamps stay strings as written.
func (d *Doc) Value(n *yaml.Node, field string) (any, error) {
	n = deref(n)
	if d.nodes++; d.nodes > maxValueNodes {
		return nil, d.Errorf(n, field, "too many values (more than %d, counting aliases)", maxValueNodes)
	}
	switch n.Kind {
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		err := d.Sequence(n, field, func(_ int, f string, v *yaml.Node) error {
			x, err := d.Value(v, f)
			list = append(list, x)
			return err
		})
		return list, err
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		err := d.Mapping(n, field, func(key, f string, _, v *yaml.Node) error {
			x, err := d.Value(v, f)
			m[key] = x
			return err
		})
		return m, err
	case yaml.ScalarNode:
	default:
		return nil, d.Errorf(n, field, "unsupported YAML node")
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int":
		var i int
		if err := n.Decode(&i); err != nil {
			return nil, d.Errorf(n, field, "%s is out of range", n.Value)
		}
		return i, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, d.Errorf(n, field, "must be a finite number, got %s", n.Value)
		}
		return f, nil
	}
	return nil, d.Errorf(n, field, "unsupported tag %s", n.Tag)
}

// ValueMaps reads a mapping of mappings of values, the shape of an
// overrides block ({all: {key: value}, docker: {...}}). Null inner
// mappings are empty.
func (d *Doc) ValueMaps(n *yaml.Node, field string) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	err := d.Mapping(n, field, func(key, f string, _, v *yaml.Node) error {
		inner := map[string]any{}
		out[key] = inner
		return d.Mapping(v, f, func(k2, f2 string, _, v2 *yaml.Node) error {
			x, err := d.Value(v2, f2)
			inner[k2] = x
			return err
		})
	})
	return out, err
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe says what a node is, for "got ..." in errors.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind != yaml.ScalarNode:
		return "a YAML node"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return fmt.Sprintf("the text %q", n.Value)
	case "!!int":
		return "the whole number " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	}
	return fmt.Sprintf("%s %q", n.Tag, n.Value)
}
