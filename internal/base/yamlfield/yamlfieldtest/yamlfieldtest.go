// Package yamlfieldtest checks, for tests, parsers built on yamlfield:
// what they read, and that a refusal says which field, where, and why.
package yamlfieldtest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield"
)

// Refused fails t unless err, a parser's refusal of doc read from source,
// is a *yamlfield.Error for field (a path such as overrides.docker.image;
// "" for none) at line:col whose reason contains reasonPart, and an
// errdefs.ErrInvalid that the API reports for that field.
func Refused(t *testing.T, err error, source, doc, field string, line, col int, reasonPart string) {
	t.Helper()
	var e *yamlfield.Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse(%q) = %v, want *Error", doc, err)
	}
	if e.Field != field || e.Line != line || e.Column != col || e.Source != source {
		t.Errorf("Parse(%q) = %v (field %q at %d:%d), want field %q at %d:%d", doc, err, e.Field, e.Line, e.Column, field, line, col)
	}
	if !strings.Contains(e.Reason, reasonPart) {
		t.Errorf("Parse(%q) reason = %q, want it to contain %q", doc, e.Reason, reasonPart)
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Parse(%q) = %v, not errdefs.ErrInvalid", doc, err)
	}
	if field != "" {
		if got := errdefs.ToAPI(err).Field; got != field {
			t.Errorf("errdefs.ToAPI(%v).Field = %q, want %q", err, got, field)
		}
	}
}

// Parsed fails t unless parse reads doc (from source) as want.
func Parsed[T any](t *testing.T, parse func(data []byte, source string) (T, error), source, doc string, want T) {
	t.Helper()
	parsedAs(t, parse, []byte(doc), source, strconv.Quote(doc), want)
}

// ParsedFile fails t unless parse reads the file at path, its base name as
// the source, as want: a seed file that must load unchanged.
func ParsedFile[T any](t *testing.T, parse func(data []byte, source string) (T, error), path string, want T) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	source := filepath.Base(path)
	parsedAs(t, parse, data, source, source, want)
}

// parsedAs fails t unless parse reads data (from source) as want; name is
// how the messages show the input.
func parsedAs[T any](t *testing.T, parse func(data []byte, source string) (T, error), data []byte, source, name string, want T) {
	t.Helper()
	got, err := parse(data, source)
	if err != nil {
		t.Fatalf("Parse(%s) = %v", name, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse(%s) mismatch (-want +got):\n%s", name, diff)
	}
}
