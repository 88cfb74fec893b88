package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
)

// FuzzValidateSuite reads suite specs as the API (JSON, strictly) and the
// CLI (YAML, known fields only) do, and the body of a task submission.
// validateSuite must refuse with a field error, or fill the defaults and
// pass a spec that passes again unchanged, also after a JSON round trip,
// whose hook resources stay inside the suite's work dir.
func FuzzValidateSuite(f *testing.F) {
	for _, s := range []string{
		`{"name":"build","description":"nightly","group":"ci","tags":["gpu","x86"],"labels":{"team":"a"},"priority":5,"worker_schedule":{"worker_count":4,"cpu_binding":{"cores":[0,1,2,3],"strategy":"Exclusive"},"task_prefetch_count":0,"worker_command":["./worker"]},"hooks":{"prepare":{"command":["make","deps"],"env":{"CC":"gcc"},"resources":[{"url":"https://example.com/x.tgz","path":"dl/x.tgz"}],"timeout":"5m"},"cleanup":{"command":["rm","-rf","tmp"]}}}`,
		"name: build\nworker_schedule:\n  worker_count: 2\n  cpu_binding: {cores: [3, 1]}\n",
		`{"tasks":[{"argv":["sh","-c","echo hi"],"env":{"A":"1"},"workdir":"w","timeout":"1h","priority":-3},{"argv":["true"]}]}`,
		`{"name":"b","worker_schedule":{"worker_count":257}}`, `{"name":"b","worker_schedule":{"worker_count":1,"cpu_binding":{"cores":[0,0]}}}`,
		`{"name":"b","worker_schedule":{"worker_count":1},"hooks":{"prepare":{"command":["x"],"resources":[{"url":"file:///etc/passwd","path":"../p"}]}}}`,
		`{"name":"b","worker_schedule":{"worker_count":1},"hooks":{"prepare":{"command":["x"],"resources":[{"url":"https://h/x","path":"a/../../p"}]}}}`,
		`{"name":"b","worker_schedule":{"worker_count":1,"task_prefetch_count":-1}}`, `{"tasks":[{"argv":[""]}]}`,
		`{"tasks":[{"argv":["x"],"env":{"A=B":"1"}}]}`, `{"tasks":[{"argv":["x"],"timeout":"169h"}]}`, `{}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fromJSON api.SuiteSpec
		if httpapi.DecodeStrict(data, &fromJSON) == nil {
			checkSuite(t, fromJSON)
		}
		var fromYAML api.SuiteSpec
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if dec.Decode(&fromYAML) == nil {
			checkSuite(t, fromYAML)
		}
		var submit api.SubmitTasks
		if httpapi.DecodeStrict(data, &submit) == nil {
			for i, task := range submit.Tasks {
				if err := dispatch.ValidateTask(fmt.Sprintf("tasks[%d]", i), task); err != nil {
					checkFieldError(t, "validateTask", err)
				}
			}
		}
	})
}

func checkSuite(t *testing.T, spec api.SuiteSpec) {
	t.Helper()
	if err := dispatch.ValidateSuite(&spec); err != nil {
		checkFieldError(t, "validateSuite", err)
		return
	}
	filled := spec
	if err := dispatch.ValidateSuite(&filled); err != nil {
		t.Fatalf("validateSuite passed %+v once but not twice: %v", spec, err)
	}
	if diff := cmp.Diff(spec, filled, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("validateSuite changed a valid spec (-first +second):\n%s", diff)
	}
	for _, h := range []*api.Hook{spec.Hooks.Prepare, spec.Hooks.Cleanup} {
		if h == nil {
			continue
		}
		for _, r := range h.Resources {
			if p := path.Clean(r.Path); path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
				t.Fatalf("validateSuite passed resource path %q, outside the work dir", r.Path)
			}
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("json.Marshal(%+v) = %v", spec, err)
	}
	var again api.SuiteSpec
	if err := httpapi.DecodeStrict(b, &again); err != nil {
		t.Fatalf("DecodeStrict(%s) = %v", b, err)
	}
	if err := dispatch.ValidateSuite(&again); err != nil {
		t.Fatalf("dispatch.ValidateSuite(%s) = %v after a JSON round trip", b, err)
	}
	if diff := cmp.Diff(spec, again, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("spec changed on a JSON round trip (-first +again):\n%s", diff)
	}
}

func checkFieldError(t *testing.T, what string, err error) {
	t.Helper()
	var fe *errdefs.FieldError
	if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
		t.Fatalf("%s = %v, want a field error naming the field", what, err)
	}
}
