package dispatch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestCheckResultFiles: the output files an agent reports are held to the
// rules a submitter's inputs meet, so that no stored result names a path
// outside its sandbox.
func TestCheckResultFiles(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	file := func(path string) api.TaskFile { return api.TaskFile{Path: path, Digest: digest, Size: 3} }
	many := make([]api.TaskFile, api.MaxTaskOutputFiles+1)
	for i := range many {
		many[i] = file(fmt.Sprintf("out/%d", i))
	}
	for _, tc := range []struct {
		name  string
		res   api.TaskResult
		field string // "" when valid
	}{
		{"none", api.TaskResult{}, ""},
		{"nested", api.TaskResult{Outputs: []api.TaskFile{file("out/a.o"), file("b.o")}}, ""},
		{"at the cap", api.TaskResult{Outputs: many[:api.MaxTaskOutputFiles]}, ""},
		{"over the cap", api.TaskResult{Outputs: many}, "r.outputs"},
		{"parent", api.TaskResult{Outputs: []api.TaskFile{file("../../etc/passwd")}}, "r.outputs[0].path"},
		{"absolute", api.TaskResult{Outputs: []api.TaskFile{file("/etc/passwd")}}, "r.outputs[0].path"},
		{"unclean", api.TaskResult{Outputs: []api.TaskFile{file("a/../../b")}}, "r.outputs[0].path"},
		{"twice", api.TaskResult{Outputs: []api.TaskFile{file("a"), file("a")}}, "r.outputs[1].path"},
		{"no digest", api.TaskResult{Outputs: []api.TaskFile{{Path: "a"}}}, "r.outputs[0].digest"},
		{"negative size", api.TaskResult{Outputs: []api.TaskFile{{Path: "a", Digest: digest, Size: -1}}}, "r.outputs[0].size"},
		{"mode bits", api.TaskResult{Outputs: []api.TaskFile{{Path: "a", Digest: digest, Mode: 0o4755}}}, "r.outputs[0].mode"},
		{"an input's error", api.TaskResult{Outputs: []api.TaskFile{{Path: "a", Digest: digest, Error: "x"}}}, "r.outputs[0].error"},
		{"missing over the cap", api.TaskResult{Missing: make([]string, maxTaskOutputs+1)}, "r.missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckResultFiles("r", tc.res)
			var fe *errdefs.FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("CheckResultFiles() = %v, want nil", err)
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Errorf("CheckResultFiles() = %v, want an error on field %s", err, tc.field)
			}
		})
	}
}
