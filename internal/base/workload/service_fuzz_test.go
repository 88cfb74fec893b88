package workload

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/fuzzcheck"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
)

// FuzzParseCoordinate: a coordinate is refused with a field error, or
// prints back as given and names a runtime dir exactly four plain
// elements below <prefix>/runtime.
func FuzzParseCoordinate(f *testing.F) {
	for _, s := range []string{"i1.web.alice.c1", "0.a-b.c_d.e", "a.b.c", "a.b.c.d.e", "..a.b", "a.b.c.", "A.b.c.d",
		"a/b.c.d.e", "a.b.c.d\n", strings.Repeat("a", 64) + ".b.c.d", "-a.b.c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCoordinate(s)
		if err != nil {
			fuzzcheck.FieldError(t, "ParseCoordinate("+s+")", err)
			return
		}
		if c.String() != s {
			t.Fatalf("ParseCoordinate(%q).String() = %q", s, c.String())
		}
		const runtime = "/prefix/runtime"
		rel, err := filepath.Rel(runtime, c.RuntimeDir("/prefix"))
		if err != nil || !filepath.IsLocal(rel) || strings.Count(rel, "/") != 3 {
			t.Fatalf("ParseCoordinate(%q).RuntimeDir = %s: not four names below %s", s, c.RuntimeDir("/prefix"), runtime)
		}
	})
}

// FuzzCheckService reads service specs as the API (JSON, strictly) and the
// CLI (YAML, known fields only) do. Validate must refuse with a field
// error, or pass a spec whose paths stay inside the artifact's tree and
// the runtime dir, and which survives a JSON round trip unchanged.
func FuzzCheckService(f *testing.F) {
	for _, s := range []string{
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["bin/server","--x"],"options":{"threads":"4"},"env":{"A":"1"},"port":0,"expected_memory_mb":64,"files":[{"path":"conf/app.yaml","from":"etc/app.yaml","mode":"0640"},{"path":"data.bin","url":"https://example.com/d"}],"restart":{"policy":"on-failure","min_period":"10s","max_restarts":3,"delay":"1s"},"drain":{"signal":"usr1","timeout":"30s"},"stop_grace":"5s","logs":{"max_size_mb":10,"keep":3}}`,
		"coordinate: i1.web.alice.c1\nartifact: com.example:web:1.0\ncommand: [/usr/bin/env, x]\ndrain:\n  command: [bin/drain]\n",
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["../bin/x"]}`,
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["x"],"files":[{"path":"../x","from":"a"}]}`,
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["x"],"files":[{"path":"a","from":"a"},{"path":"./a","from":"b"}]}`,
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["x"],"options":{"-x":"1"}}`,
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["x"],"port":70000}`,
		`{"coordinate":"i1.web.alice.c1","artifact":"com.example:web:1.0","command":["x"],"restart":{"delay":"-1s"}}`,
		`{"coordinate":"x","artifact":"y"}`, `{}`, "", "coordinate: [1]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fromJSON api.ServiceSpec
		if httpapi.DecodeStrict(data, &fromJSON) == nil {
			checkSpec(t, fromJSON)
		}
		var fromYAML api.ServiceSpec
		if fuzzcheck.DecodeYAML(data, &fromYAML) == nil {
			checkSpec(t, fromYAML)
		}
	})
}

func checkSpec(t *testing.T, spec api.ServiceSpec) {
	t.Helper()
	if !fuzzcheck.Check(t, "CheckService", spec, CheckService) {
		return
	}
	inside := func(p string) bool { return filepath.IsAbs(p) || filepath.IsLocal(p) }
	if !inside(spec.Command[0]) {
		t.Fatalf("Validate passed command %q, which leaves the artifact's tree", spec.Command)
	}
	for _, fl := range spec.Files {
		if !filepath.IsLocal(fl.Path) || (fl.From != "" && !filepath.IsLocal(fl.From)) {
			t.Fatalf("Validate passed file %+v, which leaves the runtime dir or the tree", fl)
		}
	}
}
