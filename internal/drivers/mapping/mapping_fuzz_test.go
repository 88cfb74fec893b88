package mapping

import (
	"errors"
	"os"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/fuzzcheck"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// FuzzParse reads arbitrary mapping files. Parse must refuse with an
// *Error that is an errdefs.ErrInvalid, or return rules that validate,
// apply to any provider without failing (a loop is reported, never a
// panic or another error), and come back equal when written out as YAML
// and parsed again.
func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile("testdata/seed.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, s := range []string{
		"mapping:\n  - match: {image: a}\n    overrides: {all: {image: b}}\n  - match: {image: b}\n    overrides: {all: {image: a}}\n",
		"mapping:\n  - match: {image: \"ubuntu:*\"}\n    match_type: glob\n    overrides: {docker: {image: x}}\n",
		"mapping:\n  - match: {image: \"[\"}\n    match_type: glob\n    overrides: {all: {x: 1}}\n",
		"mapping:\n  - match: {image: a, match_type: exact}\n    match_type: exact\n    overrides: {all: {x: 1}}\n",
		"mapping:\n  - match: {cpu: 2}\n    overrides: {aws: {instance_type: t3.small}, all: {cpu: 4}}\n",
		"mapping:\n  - match: {}\n    overrides: {all: {}}\n", "mapping: []\n", "mapping:\n  - null\n", "mapping: {}\n",
		"other: 1\n", "", "mapping:\n  - match: {a: b}\n    overrides: {gce: {x: 1}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, err := Parse(data, "fuzz.yaml")
		if err != nil {
			fuzzcheck.Refusal(t, data, err, func(e *Error) string { return e.Reason })
			return
		}
		if err := Validate(rules); err != nil {
			t.Fatalf("Parse(%q) returned rules that do not validate: %v", data, err)
		}
		for _, extra := range []map[string]any{{}, matchedBy(rules)} {
			for _, p := range provision.Names() {
				_, _, err := Apply(extra, p, rules)
				var loop *LoopError
				if err != nil && !errors.As(err, &loop) {
					t.Fatalf("Apply(%v, %s, Parse(%q)) = %v, want nil or a *LoopError", extra, p, data, err)
				}
			}
		}
		fuzzcheck.YAMLRoundTrip(t, data, rules, map[string][]Rule{"mapping": rules}, Parse)
	})
}

// matchedBy is an Extra that the first rule's exact matches hold.
func matchedBy(rules []Rule) map[string]any {
	extra := map[string]any{}
	if len(rules) > 0 {
		for k, v := range rules[0].Match {
			extra[k] = v
		}
	}
	return extra
}
