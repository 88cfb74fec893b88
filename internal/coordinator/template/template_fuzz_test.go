package template

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/fuzzcheck"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// FuzzParse reads arbitrary template files. Parse must refuse with an
// *Error that is an errdefs.ErrInvalid, or return a template that
// validates, renders for every provider, and comes back equal when
// written out as YAML and parsed again.
func FuzzParse(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"name: a\ncpu: -1\n", "name: a\nname: b\n", "name: a\nbogus: 1\n", "name: a\noverrides:\n  gce: {x: 1}\n",
		"name: &n a\nimage: *n\n", "<<: {name: a}\n", "name: !!binary YQ==\n", "name: a\ncpu: 1.5\n",
		"name: a\nmemoryMB: 99999999999999999999\n", "name: a\noverrides:\n  all: {v: .nan, w: [1, {x: null}], t: 2001-12-14}\n",
		"- name: a\n", "---\nname: a\n---\nname: b\n", "", "{", "name: a\n\t", "name: \"\\ud800\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tpl, err := Parse(data, "fuzz.yaml")
		if err != nil {
			fuzzcheck.Refusal(t, data, err, func(e *Error) string { return e.Reason })
			return
		}
		if err := tpl.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned a template that does not validate: %v", data, err)
		}
		for _, p := range provision.Names() {
			if _, _, err := Render(tpl, p, nil); err != nil {
				t.Fatalf("Render(Parse(%q), %s) = %v", data, p, err)
			}
		}
		fuzzcheck.YAMLRoundTrip(t, data, tpl, tpl, Parse)
	})
}
