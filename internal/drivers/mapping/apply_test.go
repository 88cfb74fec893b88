package mapping

import (
	"errors"
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

type ov = map[string]map[string]any

func rule(match map[string]string, o ov) Rule { return Rule{Match: match, Overrides: o} }

func glob(match map[string]string, o ov) Rule {
	return Rule{Match: match, MatchType: Glob, Overrides: o}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name     string
		extra    map[string]any
		provider string
		rules    []Rule
		want     map[string]any
		steps    []string // Step.String(), in order; nil: not checked
	}{
		{
			name:  "exact matches the whole value",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{rule(map[string]string{"image": "ubuntu"}, ov{"all": {"user": "ubuntu"}})},
			want:  map[string]any{"image": "ubuntu", "user": "ubuntu"},
			steps: []string{`mapping[0].overrides.all: user = "ubuntu" (matched image="ubuntu"; pass 1)`},
		},
		{
			name:  "exact does not glob",
			extra: map[string]any{"image": "ubuntu:24.04"}, provider: "docker",
			rules: []Rule{rule(map[string]string{"image": "ubuntu*"}, ov{"all": {"user": "ubuntu"}})},
			want:  map[string]any{"image": "ubuntu:24.04"},
			steps: []string{},
		},
		{
			name:  "exact is not a prefix match",
			extra: map[string]any{"image": "ubuntu:24.04"}, provider: "docker",
			rules: []Rule{rule(map[string]string{"image": "ubuntu"}, ov{"all": {"user": "ubuntu"}})},
			want:  map[string]any{"image": "ubuntu:24.04"},
		},
		{
			name:  "glob matches",
			extra: map[string]any{"image": "ubuntu:24.04"}, provider: "docker",
			rules: []Rule{glob(map[string]string{"image": "ubuntu*"}, ov{"all": {"user": "ubuntu"}})},
			want:  map[string]any{"image": "ubuntu:24.04", "user": "ubuntu"},
		},
		{
			name:  "glob class and ?",
			extra: map[string]any{"image": "ubuntu:22.04"}, provider: "docker",
			rules: []Rule{glob(map[string]string{"image": "ubuntu:2[0-4].?4"}, ov{"all": {"lts": true}})},
			want:  map[string]any{"image": "ubuntu:22.04", "lts": true},
		},
		{
			name:  "glob star does not cross a slash",
			extra: map[string]any{"image": "library/ubuntu"}, provider: "docker",
			rules: []Rule{glob(map[string]string{"image": "*"}, ov{"all": {"user": "root"}})},
			want:  map[string]any{"image": "library/ubuntu"},
		},
		{
			name:  "every key must match: one differs",
			extra: map[string]any{"image": "ubuntu", "cpu": 4}, provider: "aws",
			rules: []Rule{rule(map[string]string{"image": "ubuntu", "cpu": "2"}, ov{"aws": {"instance_type": "t3.small"}})},
			want:  map[string]any{"image": "ubuntu", "cpu": 4},
		},
		{
			name:  "every key must match: all do",
			extra: map[string]any{"image": "ubuntu", "cpu": 2}, provider: "aws",
			rules: []Rule{rule(map[string]string{"image": "ubuntu", "cpu": "2"}, ov{"aws": {"instance_type": "t3.small"}})},
			want:  map[string]any{"image": "ubuntu", "cpu": 2, "instance_type": "t3.small"},
			steps: []string{`mapping[0].overrides.aws: instance_type = "t3.small" (matched cpu=2 image="ubuntu"; pass 1)`},
		},
		{
			name:  "a missing key never matches, not even *",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{glob(map[string]string{"arch": "*"}, ov{"all": {"user": "root"}})},
			want:  map[string]any{"image": "ubuntu"},
		},
		{
			name:  "values compare as text",
			extra: map[string]any{"cpu": 2, "spot": true, "price": 0.5}, provider: "aws",
			rules: []Rule{rule(map[string]string{"cpu": "2", "spot": "true", "price": "0.5"}, ov{"aws": {"market": "spot"}})},
			want:  map[string]any{"cpu": 2, "spot": true, "price": 0.5, "market": "spot"},
		},
		{
			name:  "all, then the provider's",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{rule(map[string]string{"image": "ubuntu"}, ov{
				"all":    {"user": "ubuntu", "shell": "bash"},
				"docker": {"user": "root"},
				"aws":    {"ami": "ami-1"},
			})},
			want: map[string]any{"image": "ubuntu", "user": "root", "shell": "bash"},
			steps: []string{
				`mapping[0].overrides.all: shell = "bash" (matched image="ubuntu"; pass 1)`,
				`mapping[0].overrides.docker: user = "root" (matched image="ubuntu"; pass 1)`,
			},
		},
		{
			name:  "all alone for a provider without a block",
			extra: map[string]any{"image": "ubuntu"}, provider: "aws",
			rules: []Rule{rule(map[string]string{"image": "ubuntu"}, ov{
				"all":    {"user": "ubuntu"},
				"docker": {"user": "root"},
			})},
			want: map[string]any{"image": "ubuntu", "user": "ubuntu"},
		},
		{
			name:  "a later rule wins over an earlier one",
			extra: map[string]any{"image": "ubuntu:24.04"}, provider: "docker",
			rules: []Rule{
				glob(map[string]string{"image": "*"}, ov{"all": {"user": "root", "shell": "sh"}}),
				glob(map[string]string{"image": "ubuntu*"}, ov{"all": {"user": "ubuntu"}}),
			},
			want: map[string]any{"image": "ubuntu:24.04", "user": "ubuntu", "shell": "sh"},
			steps: []string{
				`mapping[0].overrides.all: shell = "sh" (matched image="ubuntu:24.04"; pass 1)`,
				`mapping[0].overrides.all: user = "root" (matched image="ubuntu:24.04"; pass 1)`,
				`mapping[1].overrides.all: user = "ubuntu" (was "root"; matched image="ubuntu:24.04"; pass 1)`,
			},
		},
		{
			name:  "alias chain in order",
			extra: map[string]any{"image": "ubuntu"}, provider: "aws",
			rules: []Rule{
				rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "ubuntu:24.04"}}),
				rule(map[string]string{"image": "ubuntu:24.04"}, ov{"aws": {"ami": "ami-2404"}}),
			},
			want: map[string]any{"image": "ubuntu:24.04", "ami": "ami-2404"},
			steps: []string{
				`mapping[0].overrides.all: image = "ubuntu:24.04" (was "ubuntu"; matched image="ubuntu"; pass 1)`,
				`mapping[1].overrides.aws: ami = "ami-2404" (matched image="ubuntu:24.04"; pass 1)`,
			},
		},
		{
			name:  "alias chain in reverse order takes more passes",
			extra: map[string]any{"image": "ubuntu"}, provider: "aws",
			rules: []Rule{
				rule(map[string]string{"image": "ubuntu:24.04"}, ov{"aws": {"ami": "ami-2404"}}),
				rule(map[string]string{"image": "noble"}, ov{"all": {"image": "ubuntu:24.04"}}),
				rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "noble"}}),
			},
			want: map[string]any{"image": "ubuntu:24.04", "ami": "ami-2404"},
			steps: []string{
				`mapping[2].overrides.all: image = "noble" (was "ubuntu"; matched image="ubuntu"; pass 1)`,
				`mapping[1].overrides.all: image = "ubuntu:24.04" (was "noble"; matched image="noble"; pass 2)`,
				`mapping[0].overrides.aws: ami = "ami-2404" (matched image="ubuntu:24.04"; pass 3)`,
			},
		},
		{
			name:  "a chain through another key",
			extra: map[string]any{"image": "ubuntu"}, provider: "libvirt",
			rules: []Rule{
				rule(map[string]string{"image_type": "iso"}, ov{"libvirt": {"boot": "cdrom"}}),
				rule(map[string]string{"image": "ubuntu"}, ov{"libvirt": {"image_type": "iso"}}),
			},
			want: map[string]any{"image": "ubuntu", "image_type": "iso", "boot": "cdrom"},
		},
		{
			name:  "null removes a key",
			extra: map[string]any{"image": "ubuntu", "user": "ubuntu"}, provider: "local",
			rules: []Rule{rule(map[string]string{"image": "ubuntu"}, ov{"local": {"user": nil, "absent": nil}})},
			want:  map[string]any{"image": "ubuntu"},
			steps: []string{`mapping[0].overrides.local: user removed (was "ubuntu"; matched image="ubuntu"; pass 1)`},
		},
		{
			name:  "a rule matching its own output settles",
			extra: map[string]any{"image": "ubuntu:22.04"}, provider: "docker",
			rules: []Rule{glob(map[string]string{"image": "ubuntu*"}, ov{"all": {"image": "ubuntu:24.04"}})},
			want:  map[string]any{"image": "ubuntu:24.04"},
		},
		{
			// Rule 0 matches its own image in pass 2 and sets user back;
			// rule 1 then wins again. That is precedence, not a loop.
			name:  "normalize, then a later rule overrides",
			extra: map[string]any{"image": "ubuntu:22.04"}, provider: "docker",
			rules: []Rule{
				glob(map[string]string{"image": "ubuntu*"}, ov{"all": {"image": "ubuntu:24.04", "user": "ubuntu"}}),
				rule(map[string]string{"image": "ubuntu:24.04"}, ov{"all": {"user": "admin"}}),
			},
			want: map[string]any{"image": "ubuntu:24.04", "user": "admin"},
		},
		{
			name:  "a rule that changes nothing leaves no step",
			extra: map[string]any{"image": "ubuntu:24.04"}, provider: "docker",
			rules: []Rule{rule(map[string]string{"image": "ubuntu:24.04"}, ov{"docker": {"image": "ubuntu:24.04"}})},
			want:  map[string]any{"image": "ubuntu:24.04"},
			steps: []string{},
		},
		{
			name:  "no rules",
			extra: map[string]any{"image": "x"}, provider: "local",
			want:  map[string]any{"image": "x"},
			steps: []string{},
		},
		{
			name:  "nil extra",
			extra: nil, provider: "local",
			rules: []Rule{rule(map[string]string{"image": "x"}, ov{"all": {"a": 1}})},
			want:  map[string]any{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, steps, err := Apply(tc.extra, tc.provider, tc.rules)
			if err != nil {
				t.Fatalf("Apply(%v, %q) = %v", tc.extra, tc.provider, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Apply(%v, %q) mismatch (-want +got):\n%s", tc.extra, tc.provider, diff)
			}
			if tc.steps != nil {
				strs := []string{}
				for _, s := range steps {
					strs = append(strs, s.String())
				}
				if diff := cmp.Diff(tc.steps, strs); diff != "" {
					t.Errorf("Apply(%v, %q) steps mismatch (-want +got):\n%s", tc.extra, tc.provider, diff)
				}
			}
		})
	}
}

func TestApplyLoops(t *testing.T) {
	tests := []struct {
		name     string
		extra    map[string]any
		provider string
		rules    []Rule
		want     []int
		reason   string
	}{
		{
			name:  "two aliases of each other",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{
				rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "debian"}}),
				rule(map[string]string{"image": "debian"}, ov{"all": {"image": "ubuntu"}}),
			},
			want:   []int{0, 1},
			reason: `rules loop: mapping[0] sets image="debian", which makes mapping[1] set image="ubuntu", which makes mapping[0] match again and set image="debian"`,
		},
		{
			name:  "two aliases, listed the other way",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{
				rule(map[string]string{"image": "debian"}, ov{"all": {"image": "ubuntu"}}),
				rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "debian"}}),
			},
			want: []int{1, 0},
		},
		{
			name:  "three in a ring, across passes",
			extra: map[string]any{"image": "a"}, provider: "aws",
			rules: []Rule{
				rule(map[string]string{"image": "c"}, ov{"all": {"image": "a"}}),
				rule(map[string]string{"image": "b"}, ov{"all": {"image": "c"}}),
				rule(map[string]string{"image": "a"}, ov{"all": {"image": "b"}}),
			},
			want:   []int{2, 1, 0},
			reason: `rules loop: mapping[2] sets image="b", which makes mapping[1] set image="c", which makes mapping[0] set image="a", which makes mapping[2] match again and set image="b"`,
		},
		{
			name:  "across keys",
			extra: map[string]any{"image": "ubuntu"}, provider: "libvirt",
			rules: []Rule{
				glob(map[string]string{"image": "*"}, ov{"all": {"user": "root"}}),
				rule(map[string]string{"user": "root"}, ov{"all": {"image": "alpine"}}),
				rule(map[string]string{"image": "alpine"}, ov{"all": {"user": "alpine"}}),
			},
			// Rule 0 matches again because of rule 1's image; rule 2 is
			// why it has something to change.
			want:   []int{0, 1},
			reason: `rules loop: mapping[0] sets user="root", which makes mapping[1] set image="alpine", which makes mapping[0] match again and set user="root"`,
		},
		{
			name:  "only for the provider whose overrides close the ring",
			extra: map[string]any{"image": "ubuntu"}, provider: "docker",
			rules: []Rule{
				rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "ubuntu:24.04"}}),
				rule(map[string]string{"image": "ubuntu:24.04"}, ov{"aws": {"ami": "ami-1"}, "docker": {"image": "ubuntu"}}),
			},
			want: []int{0, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Apply(tc.extra, tc.provider, tc.rules)
			var loop *LoopError
			if !errors.As(err, &loop) {
				t.Fatalf("Apply(%v, %q) = %v, want a *LoopError", tc.extra, tc.provider, err)
			}
			if diff := cmp.Diff(tc.want, loop.Rules); diff != "" {
				t.Errorf("Apply(%v, %q) loop rules mismatch (-want +got):\n%s", tc.extra, tc.provider, diff)
			}
			if tc.reason != "" && loop.Reason != tc.reason {
				t.Errorf("Apply(%v, %q) reason = %q, want %q", tc.extra, tc.provider, loop.Reason, tc.reason)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("loop error %v is not errdefs.ErrInvalid", err)
			}
			wantField := "mapping[" + string(rune('0'+tc.want[0])) + "]"
			if got := errdefs.ToAPI(err).Field; got != wantField {
				t.Errorf("errdefs.ToAPI(%v).Field = %q, want %q", err, got, wantField)
			}
		})
	}
	// The ring above closes only for docker: aws renders fine.
	rules := tests[len(tests)-1].rules
	got, _, err := Apply(map[string]any{"image": "ubuntu"}, "aws", rules)
	if err != nil {
		t.Fatalf("Apply(aws) = %v", err)
	}
	if want := (map[string]any{"image": "ubuntu:24.04", "ami": "ami-1"}); !maps.Equal(got, want) {
		t.Errorf("Apply(aws) = %v, want %v", got, want)
	}
}

func TestApplyLeavesInputAlone(t *testing.T) {
	extra := map[string]any{"image": "ubuntu"}
	rules := []Rule{rule(map[string]string{"image": "ubuntu"}, ov{"all": {"image": "ubuntu:24.04", "user": "u"}})}
	if _, _, err := Apply(extra, "docker", rules); err != nil {
		t.Fatal(err)
	}
	if want := (map[string]any{"image": "ubuntu"}); !maps.Equal(extra, want) {
		t.Errorf("Apply changed its input to %v", extra)
	}
}

func TestApplyUnknownProvider(t *testing.T) {
	for _, p := range []string{"all", "gce", ""} {
		_, _, err := Apply(map[string]any{}, p, nil)
		if got := errdefs.ToAPI(err).Field; got != "provider" || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Apply(provider %q) = %v, want an invalid provider field error", p, err)
		}
	}
}

// The seed mapping, applied to what the seed template renders to.
func TestApplySeed(t *testing.T) {
	data, err := os.ReadFile("testdata/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Parse(data, "seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]any{"name": "ubuntu-worker-small", "image": "ubuntu:24.04", "user": "ubuntu", "cpu": 2, "memoryMB": 256}
	want := map[string]map[string]any{
		"local":   {},
		"docker":  {},
		"aws":     {"ami": "ami-0a116fa7c861dd5f9", "image_type": "ami"},
		"libvirt": {"iso": "ubuntu-24.04.3-live-server-amd64.iso", "image_type": "iso"},
	}
	for _, p := range provision.Names() {
		got, _, err := Apply(base, p, rules)
		if err != nil {
			t.Fatalf("Apply(seed, %s) = %v", p, err)
		}
		w := maps.Clone(base)
		maps.Copy(w, want[p])
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("Apply(seed, %s) mismatch (-want +got):\n%s", p, diff)
		}
	}
}

func TestStepString(t *testing.T) {
	tests := []struct {
		step Step
		want string
	}{
		{Step{Layer: "template", Key: "cpu", Value: 2}, "template: cpu = 2"},
		{Step{Layer: "overrides.libvirt", Key: "memoryMB", Value: 1024, Old: 256}, "overrides.libvirt: memoryMB = 1024 (was 256)"},
		{Step{Layer: "overrides.docker", Key: "env", Value: []any{"FOO=bar"}}, `overrides.docker: env = ["FOO=bar"]`},
		{Step{Layer: "mapping[0].overrides.aws", Key: "ami", Value: "ami-1", Matched: `image="u"`, Pass: 2}, `mapping[0].overrides.aws: ami = "ami-1" (matched image="u"; pass 2)`},
		{Step{Layer: "overrides.aws", Key: "user", Old: "u", Removed: true}, `overrides.aws: user removed (was "u")`},
	}
	for _, tc := range tests {
		if got := tc.step.String(); got != tc.want {
			t.Errorf("Step.String() = %q, want %q", got, tc.want)
		}
	}
	if !strings.Contains((&LoopError{Rules: []int{3}, Reason: "x"}).Error(), "mapping[3]: x") {
		t.Errorf("LoopError.Error() does not name its first rule")
	}
}
