package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield/yamlfieldtest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// The seed's template file, byte for byte, must load unchanged.
func TestParseSeed(t *testing.T) {
	want := Template{
		Name: "ubuntu-worker-small", CPU: 2, MemoryMB: 256, Image: "ubuntu:24.04", User: "ubuntu",
		Overrides: map[string]map[string]any{
			"docker":  {"env": []any{"FOO=bar"}},
			"libvirt": {"memoryMB": 1024, "diskGB": 3, "network": "default"},
		},
	}
	yamlfieldtest.ParsedFile(t, Parse, "testdata/ubuntu-worker-small.yaml", want)
}

func TestParseForms(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want Template
	}{
		{"name only", "name: a\n", Template{Name: "a"}},
		{"diskMB", "name: a\ndiskMB: 4096\n", Template{Name: "a", DiskMB: 4096}},
		{"JSON is YAML", `{"name": "a", "cpu": 1, "overrides": {"aws": {"spot": true}}}`,
			Template{Name: "a", CPU: 1, Overrides: map[string]map[string]any{"aws": {"spot": true}}}},
		{"numbers as text in text fields", "name: a\nimage: 24.04\n", Template{Name: "a", Image: "24.04"}},
		{"null fields are unset", "name: a\ncpu:\nuser: ~\noverrides:\n  docker:\n", Template{Name: "a", Overrides: map[string]map[string]any{"docker": {}}}},
		{"null override removes", "name: a\noverrides:\n  aws: {user: null}\n", Template{Name: "a", Overrides: map[string]map[string]any{"aws": {"user": nil}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			yamlfieldtest.Parsed(t, Parse, "t.yaml", tc.yaml, tc.want)
		})
	}
}

// Every bad input is an *Error with the field, line and column, and is an
// errdefs.ErrInvalid whose field survives errdefs.ToAPI.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		field      string
		line, col  int
		reasonPart string
	}{
		{"empty file", "", "", 1, 1, "empty file"},
		{"only a comment", "# nothing\n", "", 1, 1, "empty file"},
		{"not a mapping", "- name: a\n", "", 1, 1, "must be a mapping"},
		{"null document", "~\n", "", 1, 1, "must be a mapping"},
		// The line is the YAML parser's; it is exact for scanner errors like these.
		{"syntax error", "name: a\ncpu: 2\nuser: a: b\n", "", 3, 0, "bad YAML: mapping values are not allowed"},
		{"tab indent", "name: a\noverrides:\n\tdocker: {}\n", "", 3, 0, "bad YAML: found character that cannot start any token"},
		{"two documents", "name: a\n---\nname: b\n", "", 2, 1, "more than one YAML document"},
		{"unknown key", "name: a\nmemoryMb: 256\n", "memoryMb", 2, 1, "unknown key; want one of name, cpu, memoryMB, diskMB, image, user, overrides"},
		{"CPUs is not a key", "name: a\nCPUs: 2\n", "CPUs", 2, 1, "unknown key"},
		{"duplicate key", "name: a\ncpu: 1\ncpu: 2\n", "cpu", 3, 1, "given twice (first on line 2)"},
		{"missing name", "\ncpu: 2\n", "name", 2, 1, "name"},
		{"bad name", "name: 'has space'\n", "name", 1, 7, "name"},
		{"name is a list", "name: [a]\n", "name", 1, 7, "must be a single value"},
		{"cpu is text", "name: a\ncpu: two\n", "cpu", 2, 6, `must be a whole number, got the text "two"`},
		{"cpu is quoted", "name: a\ncpu: \"2\"\n", "cpu", 2, 6, "whole number"},
		{"cpu is fractional", "name: a\ncpu: 2.5\n", "cpu", 2, 6, "got the number 2.5"},
		{"cpu overflows", "name: a\ncpu: 99999999999999999999\n", "cpu", 2, 6, "whole number"},
		{"memory is a mapping", "name: a\nmemoryMB:\n  gb: 1\n", "memoryMB", 3, 3, "got a mapping"},
		{"negative cpu", "name: a\ncpu: -2\n", "cpu", 2, 6, "must not be negative, got -2"},
		{"negative memory", "name: a\nmemoryMB: -256\n", "memoryMB", 2, 11, "negative"},
		{"negative disk", "name: a\ndiskMB: -1\n", "diskMB", 2, 9, "negative"},
		{"overrides is a list", "name: a\noverrides: [docker]\n", "overrides", 2, 12, "must be a mapping"},
		{"provider block is text", "name: a\noverrides:\n  docker: yes\n", "overrides.docker", 3, 11, "must be a mapping"},
		{"unknown provider", "name: a\noverrides:\n  docker: {}\n  kubernetes:\n    replicas: 2\n", "overrides.kubernetes", 4, 3, `unknown provider "kubernetes"`},
		{"negative size in overrides", "name: a\noverrides:\n  libvirt:\n    memoryMB: -1024\n", "overrides.libvirt.memoryMB", 4, 15, "negative"},
		{"wrong type in overrides", "name: a\noverrides:\n  all:\n    cpu: [1]\n", "overrides.all.cpu", 4, 5, "whole number"},
		{"image is a number in overrides", "name: a\noverrides:\n  docker:\n    image: 24.04\n", "overrides.docker.image", 4, 12, "must be text"},
		{"duplicate key in overrides", "name: a\noverrides:\n  docker:\n    env: [A]\n    env: [B]\n", "overrides.docker.env", 5, 5, "given twice"},
		{"merge key", "name: a\noverrides:\n  <<: {docker: {}}\n", "overrides", 3, 3, "merge keys"},
		{"list as a key", "name: a\n? [x]\n: 1\n", "", 2, 3, "keys must be plain names"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			yamlfieldtest.Refused(t, err, "t.yaml", tc.yaml, tc.field, tc.line, tc.col, tc.reasonPart)
		})
	}
}

// An alias bomb fails fast instead of expanding.
func TestParseAliasBomb(t *testing.T) {
	const bomb = "name: a\noverrides:\n  all:\n" +
		"    a: &a [x, x, x, x, x, x, x, x, x, x]\n" +
		"    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
		"    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
		"    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
		"    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n" +
		"    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
		"    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
	_, err := Parse([]byte(bomb), "t.yaml")
	var e *Error
	if !errors.As(err, &e) || !strings.HasPrefix(e.Field, "overrides.all.") || !strings.Contains(e.Reason, "too many values") || e.Line == 0 {
		t.Errorf("Parse(alias bomb) = %v, want a too-many-values error in overrides.all with a line", err)
	}
}

func TestParseTooBig(t *testing.T) {
	data := append([]byte("name: a\n#"), bytes.Repeat([]byte("x"), 1<<20)...)
	_, err := Parse(data, "t.yaml")
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Parse(2 MiB) = %v, want a size error", err)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		err  Error
		want string
	}{
		{Error{Source: "t.yaml", Line: 2, Column: 6, Field: "cpu", Reason: "must not be negative"}, "t.yaml:2:6: cpu: must not be negative"},
		{Error{Source: "t.yaml", Line: 3, Reason: "bad YAML: x"}, "t.yaml:3: bad YAML: x"},
		{Error{Field: "name", Reason: "missing"}, "name: missing"},
		{Error{Source: "-", Reason: "empty file"}, "-: empty file"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// Templates built in code or decoded from JSON are checked like parsed ones.
func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		t     Template
		field string
	}{
		{"ok", Template{Name: "a", CPU: 1, Overrides: map[string]map[string]any{"aws": {"cpu": 2.0}}}, ""},
		{"no name", Template{}, "name"},
		{"negative cpu", Template{Name: "a", CPU: -1}, "cpu"},
		{"negative memory", Template{Name: "a", MemoryMB: -1}, "memoryMB"},
		{"negative disk", Template{Name: "a", DiskMB: -1}, "diskMB"},
		{"unknown provider", Template{Name: "a", Overrides: map[string]map[string]any{"gce": nil}}, "overrides.gce"},
		{"fractional override", Template{Name: "a", Overrides: map[string]map[string]any{"aws": {"cpu": 2.5}}}, "overrides.aws.cpu"},
		{"user not text", Template{Name: "a", Overrides: map[string]map[string]any{"all": {"user": 1}}}, "overrides.all.user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.t.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", tc.t, err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate(%+v) = %v, want a field error for %q", tc.t, err, tc.field)
			}
			if _, _, err := Render(tc.t, "docker", nil); errdefs.ToAPI(err).Field != tc.field {
				t.Errorf("Render(%+v) = %v, want a field error for %q", tc.t, err, tc.field)
			}
		})
	}
}

// A template survives YAML and JSON round trips.
func TestRoundTrip(t *testing.T) {
	orig, err := Parse(readFile(t, "testdata/precedence.yaml"), "precedence.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(y, "marshalled")
	if err != nil {
		t.Fatalf("Parse(yaml.Marshal(t)) = %v\n%s", err, y)
	}
	if diff := cmp.Diff(orig, back); diff != "" {
		t.Errorf("YAML round trip mismatch (-want +got):\n%s", diff)
	}
	j, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON Template
	if err := json.Unmarshal(j, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := fromJSON.Validate(); err != nil {
		t.Errorf("Validate(JSON round trip) = %v", err)
	}
	for _, p := range provision.Names() {
		a, _, err1 := Render(orig, p, nil)
		b, _, err2 := Render(fromJSON, p, nil)
		if err1 != nil || err2 != nil {
			t.Fatalf("Render(%s) = %v, %v", p, err1, err2)
		}
		// JSON numbers come back as float64; compare as JSON.
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("Render(%s) after a JSON round trip = %s, want %s", p, jb, ja)
		}
	}
}
