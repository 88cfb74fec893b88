// Package validate checks the names and paths users give things — tags,
// labels, groups, node names, paths in a task's sandbox — and reports a bad
// one as an errdefs.FieldError naming the field.
package validate

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// The forms of tags, label keys, groups and names, their lengths checked
// apart (see Pattern).
var (
	tagRE   = NewPattern(`^[A-Za-z0-9][A-Za-z0-9_.:/+=-]*$`, 64)
	keyRE   = NewPattern(`^[A-Za-z0-9][A-Za-z0-9_./-]*$`, 63)
	groupRE = NewPattern(`^[a-z0-9][a-z0-9_.-]*$`, 64)
	nameRE  = NewPattern(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`, 253)
)

// Pattern is a regular expression over ASCII with a length limit in
// bytes: what a bounded repeat such as [a-z]{0,252} says, without its
// cost. The regexp package compiles a copy of the repeated part per
// repeat, and every nodemgr process, a command line's included, compiles
// the package-level patterns at start: {0,252} alone took 1 ms.
type Pattern struct {
	re  *regexp.Regexp
	max int
}

// NewPattern compiles expr, whose matches are at most max bytes long.
func NewPattern(expr string, max int) Pattern { return Pattern{re: regexp.MustCompile(expr), max: max} }

// MatchString says whether s is at most max bytes long and matches.
func (p Pattern) MatchString(s string) bool { return len(s) <= p.max && p.re.MatchString(s) }

// Tags checks a list of tags such as "gpu" or "cuda:11.8".
func Tags(field string, tags []string) error {
	seen := map[string]bool{}
	for i, t := range tags {
		if !tagRE.MatchString(t) {
			return errdefs.Field(indexed(field, i), "tag %q must be 1-64 characters of letters, digits and _.:/+=- starting with a letter or digit", t)
		}
		if seen[t] {
			return errdefs.Field(indexed(field, i), "tag %q is listed twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Labels checks key=value labels.
func Labels(field string, labels map[string]string) error {
	for k, v := range labels {
		if !keyRE.MatchString(k) {
			return errdefs.Field(field+"."+k, "label key must be 1-63 characters of letters, digits and _./- starting with a letter or digit")
		}
		if len(v) > 256 || !utf8.ValidString(v) {
			return errdefs.Field(field+"."+k, "label value must be valid UTF-8 of at most 256 bytes")
		}
	}
	return nil
}

// LabelKeys checks label keys alone (for removal).
func LabelKeys(field string, keys []string) error {
	for i, k := range keys {
		if !keyRE.MatchString(k) {
			return errdefs.Field(indexed(field, i), "label key %q must be 1-63 characters of letters, digits and _./-", k)
		}
	}
	return nil
}

// Groups checks group names.
func Groups(field string, groups []string) error {
	for i, g := range groups {
		if err := Group(indexed(field, i), g); err != nil {
			return err
		}
	}
	return nil
}

// Group checks one group name.
func Group(field, g string) error {
	if !groupRE.MatchString(g) {
		return errdefs.Field(field, "group %q must be 1-64 characters of lowercase letters, digits and _.- starting with a letter or digit", g)
	}
	return nil
}

// Name checks a node or user name.
func Name(field, name string) error {
	if !nameRE.MatchString(name) {
		return errdefs.Field(field, "name %q must be 1-253 characters of letters, digits and _.- starting with a letter or digit", name)
	}
	return nil
}

func indexed(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// OneOf returns the one of allowed that v names, in any case ("open" is
// Open): filters and enum fields take what a person types. Anything else
// is an error naming field and listing what it may be.
func OneOf(field, v string, allowed ...string) (string, error) {
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a, nil
		}
	}
	return "", errdefs.Field(field, "must be %s, got %q", OrList(allowed), v)
}

// OrList joins names for a message: "a, b or c".
func OrList(names []string) string {
	if n := len(names); n > 1 {
		return strings.Join(names[:n-1], ", ") + " or " + names[n-1]
	}
	return strings.Join(names, "")
}

// KeyValues turns ["k=v", ...] (labels, environment, roles) into a map;
// an item without "=" is an error naming field.
func KeyValues(field string, kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errdefs.Field(field, "label %q must look like key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}
