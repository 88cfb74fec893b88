package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/mapping"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

type ov = map[string]map[string]any

func TestRender(t *testing.T) {
	base := Template{Name: "t", CPU: 2, MemoryMB: 256, Image: "ubuntu:24.04", User: "ubuntu"}
	with := func(o ov) Template { t := base; t.Overrides = o; return t }
	tests := []struct {
		name     string
		t        Template
		provider string
		rules    []mapping.Rule
		want     map[string]any
		layers   map[string]string // key → layer of its last step
	}{
		{
			name: "template fields only", t: base, provider: "local",
			want:   map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "ubuntu"},
			layers: map[string]string{"name": "template", "cpu": "template", "memoryMB": "template", "image": "template", "user": "template"},
		},
		{
			name: "zero fields are left out", t: Template{Name: "t"}, provider: "docker",
			want: map[string]any{"name": "t"},
		},
		{
			name: "overrides.all over the template", t: with(ov{"all": {"user": "root", "shell": "bash"}}), provider: "aws",
			want:   map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "root", "shell": "bash"},
			layers: map[string]string{"user": "overrides.all", "shell": "overrides.all"},
		},
		{
			name: "the provider's over all", t: with(ov{"all": {"user": "root"}, "libvirt": {"user": "admin", "memoryMB": 1024}}), provider: "libvirt",
			want:   map[string]any{"name": "t", "cpu": 2, "memoryMB": 1024, "image": "ubuntu:24.04", "user": "admin"},
			layers: map[string]string{"user": "overrides.libvirt", "memoryMB": "overrides.libvirt"},
		},
		{
			name: "other providers' overrides are ignored", t: with(ov{"libvirt": {"memoryMB": 1024}, "aws": {"ami": "x"}}), provider: "docker",
			want: map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "ubuntu"},
		},
		{
			name: "lists are replaced, not merged", t: with(ov{"all": {"env": []any{"A=1"}}, "docker": {"env": []any{"B=2"}}}), provider: "docker",
			want: map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "ubuntu", "env": []any{"B=2"}},
		},
		{
			name: "null removes", t: with(ov{"aws": {"user": nil}}), provider: "aws",
			want: map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04"},
		},
		{
			name: "mappings come last and win",
			t:    with(ov{"all": {"user": "root"}}), provider: "aws",
			rules: []mapping.Rule{{Match: map[string]string{"image": "ubuntu:*"}, MatchType: mapping.Glob,
				Overrides: ov{"all": {"user": "ubuntu"}, "aws": {"ami": "ami-1"}}}},
			want:   map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "ubuntu", "ami": "ami-1"},
			layers: map[string]string{"user": "mapping[0].overrides.all", "ami": "mapping[0].overrides.aws"},
		},
		{
			name: "mappings match the overridden field, not the template's",
			t:    with(ov{"docker": {"image": "alpine"}}), provider: "docker",
			rules: []mapping.Rule{
				{Match: map[string]string{"image": "ubuntu:24.04"}, Overrides: ov{"all": {"user": "ubuntu"}}},
				{Match: map[string]string{"image": "alpine"}, Overrides: ov{"all": {"user": "root"}}},
			},
			want:   map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "alpine", "user": "root"},
			layers: map[string]string{"image": "overrides.docker", "user": "mapping[1].overrides.all"},
		},
		{
			name: "mappings can match fields that overrides added",
			t:    with(ov{"libvirt": {"arch": "aarch64"}}), provider: "libvirt",
			rules: []mapping.Rule{{Match: map[string]string{"image": "ubuntu:24.04", "arch": "aarch64"},
				Overrides: ov{"libvirt": {"iso": "ubuntu-24.04-arm64.iso"}}}},
			want: map[string]any{"name": "t", "cpu": 2, "memoryMB": 256, "image": "ubuntu:24.04", "user": "ubuntu", "arch": "aarch64", "iso": "ubuntu-24.04-arm64.iso"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, steps, err := Render(tc.t, tc.provider, tc.rules)
			if err != nil {
				t.Fatalf("Render(%q, %q) = %v", tc.t.Name, tc.provider, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Render(%q, %q) mismatch (-want +got):\n%s", tc.t.Name, tc.provider, diff)
			}
			last := map[string]string{}
			for _, s := range steps {
				last[s.Key] = s.Layer
			}
			for k, layer := range tc.layers {
				if last[k] != layer {
					t.Errorf("Render(%q, %q): %s last set by %q, want %q", tc.t.Name, tc.provider, k, last[k], layer)
				}
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	ok := Template{Name: "t", Image: "a"}
	tests := []struct {
		name     string
		t        Template
		provider string
		rules    []mapping.Rule
		field    string
	}{
		{"unknown provider", ok, "gce", nil, "provider"},
		{"all is not a provider", ok, "all", nil, "provider"},
		{"invalid template", Template{Name: "t", CPU: -1}, "docker", nil, "cpu"},
		{"bad glob", ok, "docker", []mapping.Rule{{Match: map[string]string{"image": "["}, MatchType: mapping.Glob, Overrides: ov{"all": {"a": 1}}}}, "mapping[0].match.image"},
		{"rules loop", ok, "docker", []mapping.Rule{
			{Match: map[string]string{"image": "a"}, Overrides: ov{"all": {"image": "b"}}},
			{Match: map[string]string{"image": "b"}, Overrides: ov{"all": {"image": "a"}}},
		}, "mapping[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Render(tc.t, tc.provider, tc.rules)
			if !errors.Is(err, errdefs.ErrInvalid) || errdefs.ToAPI(err).Field != tc.field {
				t.Errorf("Render(%q, %q) = %v, want an invalid field error for %q", tc.t.Name, tc.provider, err, tc.field)
			}
		})
	}
}

// golden is what testdata/NAME.golden holds: per provider, the rendered
// Extra and the steps that built it.
type golden map[string]struct {
	Extra map[string]any `json:"extra"`
	Steps []string       `json:"steps"`
}

// TestRenderGolden renders each testdata/NAME.yaml template with
// testdata/NAME.mapping.yaml (if any) for every provider and compares with
// testdata/NAME.golden. Run with -update to rewrite the golden files.
func TestRenderGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, file := range files {
		if strings.HasSuffix(file, ".mapping.yaml") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			tmpl, err := Parse(readFile(t, file), file)
			if err != nil {
				t.Fatal(err)
			}
			var rules []mapping.Rule
			mfile := filepath.Join("testdata", name+".mapping.yaml")
			if data, err := os.ReadFile(mfile); err == nil {
				if rules, err = mapping.Parse(data, mfile); err != nil {
					t.Fatal(err)
				}
			}
			out := golden{}
			for _, p := range provision.Names() {
				extra, steps, err := Render(tmpl, p, rules)
				if err != nil {
					t.Fatalf("Render(%s, %s) = %v", name, p, err)
				}
				g := out[p]
				g.Extra, g.Steps = extra, []string{}
				for _, s := range steps {
					g.Steps = append(g.Steps, s.String())
				}
				out[p] = g
			}
			got, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			gfile := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(gfile, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := readFile(t, gfile)
			if !bytes.Equal(got, want) {
				t.Errorf("Render(%s) differs from %s (rerun with -update if the change is intended):\n%s", name, gfile, cmp.Diff(string(want), string(got)))
			}
		})
	}
	if n < 4 {
		t.Errorf("found %d golden cases in testdata, want at least 4", n)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
