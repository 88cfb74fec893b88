package mapping

import (
	"errors"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/yamlfield/yamlfieldtest"
)

// The seed's mapping file, byte for byte, must load unchanged.
func TestParseSeed(t *testing.T) {
	want := []Rule{{
		Match:     map[string]string{"image": "ubuntu:24.04"},
		MatchType: Glob,
		Overrides: map[string]map[string]any{
			"all":     {"user": "ubuntu"},
			"aws":     {"ami": "ami-0a116fa7c861dd5f9", "image_type": "ami"},
			"libvirt": {"iso": "ubuntu-24.04.3-live-server-amd64.iso", "image_type": "iso"},
			"docker":  {"image": "ubuntu:24.04"},
		},
	}}
	yamlfieldtest.ParsedFile(t, Parse, "testdata/seed.yaml", want)
}

func TestParseForms(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []Rule
	}{
		{
			name: "match_type beside match",
			yaml: "mapping:\n  - match: {image: 'ubuntu*'}\n    match_type: glob\n    overrides: {all: {user: ubuntu}}\n",
			want: []Rule{{Match: map[string]string{"image": "ubuntu*"}, MatchType: Glob,
				Overrides: map[string]map[string]any{"all": {"user": "ubuntu"}}}},
		},
		{
			name: "no match_type is exact",
			yaml: "mapping:\n  - match: {image: debian}\n    overrides: {docker: {image: 'debian:12'}}\n",
			want: []Rule{{Match: map[string]string{"image": "debian"}, MatchType: Exact,
				Overrides: map[string]map[string]any{"docker": {"image": "debian:12"}}}},
		},
		{
			name: "numbers match as text, values keep their types, null removes",
			yaml: "mapping:\n  - match: {cpu: 2, image: x}\n    overrides:\n      all: {memoryMB: 512, env: [A=1], gpu: null, spot: true, price: 0.5}\n",
			want: []Rule{{Match: map[string]string{"cpu": "2", "image": "x"}, MatchType: Exact,
				Overrides: map[string]map[string]any{"all": {"memoryMB": 512, "env": []any{"A=1"}, "gpu": nil, "spot": true, "price": 0.5}}}},
		},
		{
			name: "anchors and aliases",
			yaml: "mapping:\n  - match: {image: a}\n    overrides: {all: &u {user: ubuntu}}\n  - match: {image: b}\n    overrides: {all: *u}\n",
			want: []Rule{
				{Match: map[string]string{"image": "a"}, MatchType: Exact, Overrides: map[string]map[string]any{"all": {"user": "ubuntu"}}},
				{Match: map[string]string{"image": "b"}, MatchType: Exact, Overrides: map[string]map[string]any{"all": {"user": "ubuntu"}}},
			},
		},
		{name: "empty list", yaml: "mapping: []\n", want: []Rule{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			yamlfieldtest.Parsed(t, Parse, "m.yaml", tc.yaml, tc.want)
		})
	}
}

// Every bad input is an *Error with the field, line and column, and is an
// errdefs.ErrInvalid whose field survives errdefs.ToAPI.
func TestParseErrors(t *testing.T) {
	const rule = "mapping:\n  - match:\n      image: ubuntu\n    overrides:\n      all: {user: ubuntu}\n"
	tests := []struct {
		name       string
		yaml       string
		field      string
		line, col  int
		reasonPart string
	}{
		{"empty file", "", "", 1, 1, "empty file"},
		{"syntax error", "mapping:\n  - match:\n\t  image: x\n", "", 3, 0, "bad YAML"},
		{"two documents", rule + "---\n" + rule, "", 6, 1, "more than one YAML document"},
		{"unknown top-level key", "mappings: []\n", "mappings", 1, 1, "unknown key"},
		{"missing mapping key", "{}\n", "mapping", 1, 1, "missing"},
		{"mapping not a list", "mapping: {match: x}\n", "mapping", 1, 10, "must be a list"},
		{"rule not a mapping", "mapping:\n  - just text\n", "mapping[0]", 2, 5, "must be a mapping"},
		{"null rule", "mapping:\n  -\n", "mapping[0]", 2, 4, "got null"},
		{"unknown key in rule", "mapping:\n  - match: {image: x}\n    overide: {all: {a: 1}}\n", "mapping[0].overide", 3, 5, "unknown key"},
		{"missing match", "mapping:\n  - overrides: {all: {a: 1}}\n", "mapping[0].match", 2, 5, "missing"},
		{"missing overrides", "mapping:\n  - match: {image: x}\n", "mapping[0].overrides", 2, 5, "missing"},
		{"empty match", "mapping:\n  - match: {}\n    overrides: {all: {a: 1}}\n", "mapping[0].match", 2, 5, "at least one field"},
		{"empty overrides", "mapping:\n  - match: {image: x}\n    overrides: {}\n", "mapping[0].overrides", 3, 5, "needs overrides"},
		{"match not a mapping", "mapping:\n  - match: ubuntu\n    overrides: {all: {a: 1}}\n", "mapping[0].match", 2, 12, "must be a mapping"},
		{"match value a list", "mapping:\n  - match:\n      image: [a, b]\n    overrides: {all: {a: 1}}\n", "mapping[0].match.image", 3, 14, "single value"},
		{"match value null", "mapping:\n  - match:\n      image:\n    overrides: {all: {a: 1}}\n", "mapping[0].match.image", 3, 13, "single value"},
		{"bad match_type", "mapping:\n  - match:\n      image: x\n      match_type: regex\n    overrides: {all: {a: 1}}\n", "mapping[0].match.match_type", 4, 19, "exact or glob"},
		{"match_type twice", "mapping:\n  - match: {image: x, match_type: glob}\n    match_type: exact\n    overrides: {all: {a: 1}}\n", "mapping[0].match_type", 3, 17, "already given"},
		{"glob does not compile", "mapping:\n  - match:\n      image: 'ubuntu[:24'\n      match_type: glob\n    overrides: {all: {a: 1}}\n", "mapping[0].match.image", 3, 14, "does not compile"},
		{"bad glob in second rule", rule + "  - match: {image: 'a\\'}\n    match_type: glob\n    overrides: {all: {a: 1}}\n", "mapping[1].match.image", 6, 20, "does not compile"},
		{"unknown provider", "mapping:\n  - match: {image: x}\n    overrides:\n      kubernetes: {a: 1}\n", "mapping[0].overrides.kubernetes", 4, 7, "unknown provider"},
		{"overrides not a mapping", "mapping:\n  - match: {image: x}\n    overrides: [all]\n", "mapping[0].overrides", 3, 16, "must be a mapping"},
		{"provider block not a mapping", "mapping:\n  - match: {image: x}\n    overrides: {aws: ami-1}\n", "mapping[0].overrides.aws", 3, 22, "must be a mapping"},
		{"negative size", "mapping:\n  - match: {image: x}\n    overrides:\n      libvirt: {memoryMB: -1024}\n", "mapping[0].overrides.libvirt.memoryMB", 4, 27, "negative"},
		{"size of wrong type", "mapping:\n  - match: {image: x}\n    overrides:\n      all: {cpu: two}\n", "mapping[0].overrides.all.cpu", 4, 18, "whole number"},
		{"image of wrong type", "mapping:\n  - match: {image: x}\n    overrides:\n      docker: {image: [a]}\n", "mapping[0].overrides.docker.image", 4, 16, "must be text"},
		{"duplicate key", "mapping:\n  - match: {image: x, image: y}\n    overrides: {all: {a: 1}}\n", "mapping[0].match.image", 2, 23, "given twice"},
		{"merge key in overrides", "mapping:\n  - match: {image: x}\n    overrides:\n      <<: {all: {a: 1}}\n", "mapping[0].overrides", 4, 7, "merge keys"},
		{"infinite number", "mapping:\n  - match: {image: x}\n    overrides: {all: {price: .inf}}\n", "mapping[0].overrides.all.price", 3, 30, "finite"},
		{"custom tag", "mapping:\n  - match: {image: !x y}\n    overrides: {all: {a: 1}}\n", "mapping[0].match.image", 2, 20, "unsupported tag"},
		{
			name:  "rules loop (found when parsed)",
			yaml:  "mapping:\n  - match: {image: ubuntu}\n    overrides: {all: {image: debian}}\n  - match: {image: debian}\n    overrides: {all: {image: ubuntu}}\n",
			field: "mapping[0]", line: 2, col: 5, reasonPart: `rules loop: mapping[0] sets image="debian", which makes mapping[1] set image="ubuntu", which makes mapping[0] match again and set image="debian"`,
		},
		{
			name:  "glob rules loop through a sample",
			yaml:  "mapping:\n  - match: {image: 'ubuntu*', match_type: glob}\n    overrides: {docker: {image: 'debian:12'}}\n  - match: {image: 'debian[:]*', match_type: glob}\n    overrides: {docker: {image: ubuntu}}\n",
			field: "mapping[0]", line: 2, col: 5, reasonPart: "rules loop",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "m.yaml")
			yamlfieldtest.Refused(t, err, "m.yaml", tc.yaml, tc.field, tc.line, tc.col, tc.reasonPart)
		})
	}
}

// Rules built in code are checked like parsed ones.
func TestValidate(t *testing.T) {
	ok := map[string]map[string]any{"all": {"user": "u"}}
	tests := []struct {
		name  string
		rules []Rule
		field string
	}{
		{"no match", []Rule{{Overrides: ok}}, "mapping[0].match"},
		{"bad match type", []Rule{{Match: map[string]string{"image": "x"}, MatchType: "regex", Overrides: ok}}, "mapping[0].match_type"},
		{"match_type as a field", []Rule{{Match: map[string]string{"match_type": "glob"}, Overrides: ok}}, "mapping[0].match.match_type"},
		{"empty field name", []Rule{{Match: map[string]string{"": "x"}, Overrides: ok}}, "mapping[0].match"},
		{"bad glob", []Rule{{Match: map[string]string{"image": "["}, MatchType: Glob, Overrides: ok}}, "mapping[0].match.image"},
		{"no overrides", []Rule{{Match: map[string]string{"image": "x"}}}, "mapping[0].overrides"},
		{"unknown provider", []Rule{{Match: map[string]string{"image": "x"}, Overrides: map[string]map[string]any{"gce": {}}}}, "mapping[0].overrides.gce"},
		{"empty key", []Rule{{Match: map[string]string{"image": "x"}, Overrides: map[string]map[string]any{"aws": {"": 1}}}}, "mapping[0].overrides.aws"},
		{"fractional cpu from JSON", []Rule{{Match: map[string]string{"image": "x"}, Overrides: map[string]map[string]any{"all": {"cpu": 1.5}}}}, "mapping[0].overrides.all.cpu"},
		{"negative disk", []Rule{{Match: map[string]string{"image": "x"}, Overrides: map[string]map[string]any{"all": {"diskMB": int64(-1)}}}}, "mapping[0].overrides.all.diskMB"},
		{"second rule", []Rule{{Match: map[string]string{"image": "x"}, Overrides: ok}, {Match: map[string]string{"image": "x"}, Overrides: map[string]map[string]any{"all": {"user": 7}}}}, "mapping[1].overrides.all.user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.rules)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate(%v) = %v, want a field error for %q", tc.rules, err, tc.field)
			}
			if _, _, err := Apply(map[string]any{"image": "x"}, "docker", tc.rules); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Apply with invalid rules = %v, want errdefs.ErrInvalid", err)
			}
		})
	}
	if err := Validate([]Rule{{Match: map[string]string{"cpu": "2"}, Overrides: map[string]map[string]any{"all": {"cpu": 4.0, "memoryMB": int64(512)}}}}); err != nil {
		t.Errorf("Validate(whole numbers from JSON) = %v, want nil", err)
	}
}

func TestGlobSample(t *testing.T) {
	for _, p := range []string{"ubuntu*", "ubuntu:2?.04", "debian[:]*", "[^a]x", `a\*b`, "img-[0-9][a-c]", "*", "[\\]]"} {
		s, ok := globSample(p)
		if !ok {
			t.Errorf("globSample(%q) found nothing", p)
		}
		if m, _ := matchGlob(p, s); !m {
			t.Errorf("globSample(%q) = %q, which it does not match", p, s)
		}
	}
	if _, ok := globSample("a[b"); ok {
		t.Errorf("globSample of a bad pattern succeeded")
	}
}

func matchGlob(p, s string) (bool, error) {
	r := Rule{Match: map[string]string{"k": p}, MatchType: Glob}
	return r.matches(map[string]any{"k": s}), nil
}
