package yamlfield

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Unmarshal reads data (YAML, or JSON, which is YAML) strictly into the
// struct, map or slice v points to, with the rules of Doc: an unknown key
// is an error that names the field and suggests the nearest known one, a
// wrong type or a bad duration names the field and what was expected, and
// every error is an *Error at source:line:column.
//
// Keys are a field's yaml tag, else its json tag, else its lowercased Go
// name (yaml.v3's rule); a field tagged "-" is not a key. An empty file
// leaves v as it is.
func Unmarshal(data []byte, source string, v any) error {
	return UnmarshalLimit(data, source, MaxSize, v)
}

// UnmarshalLimit is Unmarshal for files that may be larger than MaxSize,
// such as a list of thousands of tasks.
func UnmarshalLimit(data []byte, source string, limit int, v any) error {
	d, err := load(data, source, limit)
	if err != nil {
		return err
	}
	if d.Root == nil {
		return nil
	}
	d.maxNodes = maxValueNodes + len(data)
	return d.Decode(d.Root, "", v)
}

// Decode reads n into what v points to (see Unmarshal); field is n's dotted
// path, for errors.
func (d *Doc) Decode(n *yaml.Node, field string, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("yamlfield: Decode needs a non-nil pointer, got %T", v)
	}
	return d.decode(n, field, rv.Elem())
}

var (
	durationType      = reflect.TypeFor[time.Duration]()
	textUnmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (d *Doc) decode(n *yaml.Node, field string, rv reflect.Value) error {
	n = deref(n)
	limit := d.maxNodes
	if limit == 0 {
		limit = maxValueNodes
	}
	if d.nodes++; d.nodes > limit {
		return d.Errorf(n, field, "too many values (more than %d, counting aliases)", limit)
	}
	if rv.Kind() == reflect.Pointer {
		if isNull(n) {
			return nil
		}
		if rv.IsNil() {
			rv.Set(reflect.New(rv.Type().Elem()))
		}
		return d.decode(n, field, rv.Elem())
	}
	switch {
	case rv.Type() == durationType:
		return d.duration(n, field, rv)
	case rv.CanAddr() && rv.Addr().Type().Implements(textUnmarshalType):
		return d.text(n, field, rv)
	}
	switch rv.Kind() {
	case reflect.Struct:
		return d.structure(n, field, rv)
	case reflect.Map:
		return d.mapping(n, field, rv)
	case reflect.Slice:
		return d.list(n, field, rv)
	case reflect.Interface:
		x, err := d.Value(n, field)
		if err == nil && x != nil {
			rv.Set(reflect.ValueOf(x))
		}
		return err
	}
	return d.scalar(n, field, rv)
}

// duration reads a Go duration ("30s", "1m30s"); 0 is the one number
// allowed, since a number without a unit is a mistake waiting to happen.
func (d *Doc) duration(n *yaml.Node, field string, rv reflect.Value) error {
	if isNull(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" && n.Value == "0" {
		rv.SetInt(0)
		return nil
	}
	s, err := d.Scalar(n, field)
	if err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil || n.ShortTag() != "!!str" {
		return d.Errorf(n, field, "must be a duration with a unit, such as 30s, 5m or 1h30m; got %s", describe(n))
	}
	rv.SetInt(int64(v))
	return nil
}

// text reads a scalar through the type's UnmarshalText.
func (d *Doc) text(n *yaml.Node, field string, rv reflect.Value) error {
	if isNull(n) {
		return nil
	}
	s, err := d.Scalar(n, field)
	if err != nil {
		return err
	}
	if err := rv.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
		if rv.Type().ConvertibleTo(durationType) {
			return d.Errorf(n, field, "must be a duration with a unit, such as 30s, 5m or 1h30m; got %s", describe(n))
		}
		return d.Errorf(n, field, "%v", err)
	}
	return nil
}

// structure reads a mapping into a struct, refusing unknown keys.
func (d *Doc) structure(n *yaml.Node, field string, rv reflect.Value) error {
	fields := keysOf(rv.Type())
	return d.Mapping(n, field, func(key, f string, k, v *yaml.Node) error {
		idx, ok := fields.index[key]
		if !ok {
			return d.Errorf(k, f, "unknown field%s", hint(key, fields.names))
		}
		return d.decode(v, f, rv.FieldByIndex(idx))
	})
}

// hint suggests the nearest known key, or lists them all.
func hint(key string, known []string) string {
	if s := Suggest(key, known); s != "" {
		return fmt.Sprintf("; did you mean %s?", s)
	}
	if len(known) == 0 {
		return ""
	}
	return "; want one of " + strings.Join(known, ", ")
}

// Suggest returns the name in known closest to key when it is close enough
// to be a typo (a few edits, or the same letters ignoring case, '_' and
// '-'), else "".
func Suggest(key string, known []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestDist := "", math.MaxInt
	for _, k := range known {
		dist := editDistance(norm(key), norm(k))
		if dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best == "" || bestDist > max(1, min(3, len(key)/3)) {
		return ""
	}
	return best
}

// editDistance is the edit distance between a and b (bytes), counting a
// swap of two neighbours as one edit ("netwrok"), the commonest typo.
func editDistance(a, b string) int {
	dist := make([][]int, len(a)+1)
	for i := range dist {
		dist[i] = make([]int, len(b)+1)
		dist[i][0] = i
	}
	for j := range dist[0] {
		dist[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			dist[i][j] = min(dist[i-1][j]+1, dist[i][j-1]+1, dist[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				dist[i][j] = min(dist[i][j], dist[i-2][j-2]+1)
			}
		}
	}
	return dist[len(a)][len(b)]
}

type structKeys struct {
	index map[string][]int
	names []string // in declaration order, for hints
}

// keysOf lists the keys of struct type t; anonymous struct fields without
// a name of their own are inlined, as encoding/json does.
func keysOf(t reflect.Type) structKeys {
	k := structKeys{index: map[string][]int{}}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 && !inlined(t, f.Index) {
			continue
		}
		name, inline := keyOf(f)
		if name == "-" || inline || (f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct) {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if _, dup := k.index[name]; dup {
			continue
		}
		k.index[name] = f.Index
		k.names = append(k.names, name)
	}
	return k
}

// inlined reports whether every struct on the path to a promoted field is
// inlined (anonymous without a name, or tagged ",inline").
func inlined(t reflect.Type, index []int) bool {
	for _, i := range index[:len(index)-1] {
		f := t.Field(i)
		name, inline := keyOf(f)
		if !inline && !(f.Anonymous && name == "") {
			return false
		}
		t = f.Type
		if t.Kind() == reflect.Pointer {
			return false // a nil embedded pointer cannot take a value
		}
	}
	return true
}

// keyOf is a field's key from its yaml tag, else its json tag.
func keyOf(f reflect.StructField) (name string, inline bool) {
	tag, ok := f.Tag.Lookup("yaml")
	if !ok {
		tag = f.Tag.Get("json")
	}
	name, opts, _ := strings.Cut(tag, ",")
	return name, slices.Contains(strings.Split(opts, ","), "inline")
}

// mapping reads a mapping into a map with string keys.
func (d *Doc) mapping(n *yaml.Node, field string, rv reflect.Value) error {
	if rv.Type().Key().Kind() != reflect.String {
		return d.Errorf(n, field, "unsupported map key type %s", rv.Type().Key())
	}
	if isNull(n) {
		return nil
	}
	if rv.IsNil() {
		rv.Set(reflect.MakeMap(rv.Type()))
	}
	return d.Mapping(n, field, func(key, f string, _, v *yaml.Node) error {
		elem := reflect.New(rv.Type().Elem()).Elem()
		if err := d.decode(v, f, elem); err != nil {
			return err
		}
		rv.SetMapIndex(reflect.ValueOf(key).Convert(rv.Type().Key()), elem)
		return nil
	})
}

// list reads a sequence into a slice.
func (d *Doc) list(n *yaml.Node, field string, rv reflect.Value) error {
	if isNull(n) {
		return nil
	}
	out := reflect.MakeSlice(rv.Type(), 0, len(n.Content))
	err := d.Sequence(n, field, func(_ int, f string, v *yaml.Node) error {
		elem := reflect.New(rv.Type().Elem()).Elem()
		err := d.decode(v, f, elem)
		out = reflect.Append(out, elem)
		return err
	})
	if err == nil {
		rv.Set(out)
	}
	return err
}

// scalar reads a string, bool or number, with the field's type and range.
func (d *Doc) scalar(n *yaml.Node, field string, rv reflect.Value) error {
	if isNull(n) {
		return nil
	}
	switch rv.Kind() {
	case reflect.String:
		s, err := d.Scalar(n, field)
		rv.SetString(s)
		return err
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return d.Errorf(n, field, "must be true or false, got %s", describe(n))
		}
		var b bool
		err := n.Decode(&b)
		rv.SetBool(b)
		return err
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return d.Errorf(n, field, "must be a whole number, got %s", describe(n))
		}
		if err := n.Decode(&i); err != nil || rv.OverflowInt(i) {
			return d.Errorf(n, field, "%s is out of range", n.Value)
		}
		rv.SetInt(i)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var u uint64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
			return d.Errorf(n, field, "must be a whole number ≥ 0, got %s", describe(n))
		}
		if err := n.Decode(&u); err != nil || rv.OverflowUint(u) {
			return d.Errorf(n, field, "%s is out of range (0 or more)", n.Value)
		}
		rv.SetUint(u)
		return nil
	case reflect.Float32, reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
			return d.Errorf(n, field, "must be a number, got %s", describe(n))
		}
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) || rv.OverflowFloat(f) {
			return d.Errorf(n, field, "must be a finite number, got %s", n.Value)
		}
		rv.SetFloat(f)
		return nil
	}
	return d.Errorf(n, field, "unsupported field type %s", rv.Type())
}
