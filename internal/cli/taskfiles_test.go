package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// A tasks file's input path is sent as it is written, so the CLI refuses
// what the server would, before it uploads anything.
func TestTasksFileInputsAreCheckedAsTheServerChecksThem(t *testing.T) {
	tests := []struct{ path, want string }{
		{"src/./a.c", `not clean; write "src/a.c"`},
		{"a/../b", `not clean; write "b"`},
		{"../x", "leaves the task's sandbox"},
		{"/abs", "relative to the task's sandbox"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			u := newUploader(nil, nil) // nothing is uploaded: the check comes first
			err := u.fill(context.Background(), []api.TaskSpec{{Inputs: []api.TaskFile{{Path: tc.path}}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "task 1: inputs[0]") {
				t.Errorf("fill(%q) = %v, want an error on task 1: inputs[0] saying %q", tc.path, err, tc.want)
			}
		})
	}
}
