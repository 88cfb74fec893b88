package dispatch

import (
	"fmt"
	"path"
	"regexp"
	"slices"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/validate"
)

// Bounds on a task's files and dependencies.
const (
	maxTaskInputs  = 10000
	maxTaskOutputs = 100
	maxTaskAfter   = 1000
)

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// validateTaskFiles checks a task's inputs, outputs and dependencies.
func validateTaskFiles(field string, t api.TaskSpec) error {
	if len(t.Inputs) > maxTaskInputs {
		return errdefs.Field(field+".inputs", "at most %d files, got %d; pack many small files into an archive", maxTaskInputs, len(t.Inputs))
	}
	seen := map[string]bool{}
	for i, in := range t.Inputs {
		f := fmt.Sprintf("%s.inputs[%d]", field, i)
		if err := validate.SandboxPath(f+".path", in.Path); err != nil {
			return err
		}
		if seen[in.Path] {
			return errdefs.Field(f+".path", "%s is given twice", in.Path)
		}
		seen[in.Path] = true
		if !digestRE.MatchString(in.Digest) {
			return errdefs.Field(f+".digest", "must be sha256:<64 lowercase hex digits>, got %q; upload the file first (PUT /v1/blobs/{digest})", in.Digest)
		}
		if in.Size < 0 {
			return errdefs.Field(f+".size", "must not be negative")
		}
		if in.Mode > 0o777 {
			return errdefs.Field(f+".mode", "only permission bits (at most 0777), got %#o", in.Mode)
		}
		if in.Error != "" {
			return errdefs.Field(f+".error", "is set by the server, not by a submitter")
		}
	}
	if len(t.Outputs) > maxTaskOutputs {
		return errdefs.Field(field+".outputs", "at most %d globs, got %d", maxTaskOutputs, len(t.Outputs))
	}
	for i, g := range t.Outputs {
		f := fmt.Sprintf("%s.outputs[%d]", field, i)
		if err := validate.SandboxPath(f, g); err != nil {
			return err
		}
		if _, err := path.Match(g, ""); err != nil {
			return errdefs.Field(f, "bad glob %q: %v", g, err)
		}
	}
	if (len(t.Inputs) > 0 || len(t.Outputs) > 0 || len(t.InputFrom) > 0) && t.Workdir != "" {
		if err := validate.SandboxPath(field+".workdir", t.Workdir); err != nil {
			return errdefs.Field(field+".workdir", "a task with files runs in a sandbox of its own: workdir must be relative to it (%v)", err)
		}
	}
	if len(t.After) > maxTaskAfter {
		return errdefs.Field(field+".after", "at most %d tasks, got %d", maxTaskAfter, len(t.After))
	}
	for i, a := range t.After {
		if a == "" {
			return errdefs.Field(fmt.Sprintf("%s.after[%d]", field, i), "name a task by ID or name")
		}
		if a == t.Name {
			return errdefs.Field(fmt.Sprintf("%s.after[%d]", field, i), "a task cannot run after itself")
		}
	}
	for i, in := range t.InputFrom {
		f := fmt.Sprintf("%s.input_from[%d]", field, i)
		if !slices.Contains(t.After, in.Task) {
			return errdefs.Field(f+".task", "%q must also be in after: a task takes outputs only of tasks it runs after", in.Task)
		}
		if in.Path != "" {
			if err := validate.SandboxPath(f+".path", in.Path); err != nil {
				return err
			}
		}
		if in.As != "" {
			if in.Path == "" {
				return errdefs.Field(f+".as", "renames one file: give path too")
			}
			if err := validate.SandboxPath(f+".as", in.As); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkResultLog checks the full log a report names, if any.
func checkResultLog(field string, l *api.TaskLog) error {
	switch {
	case l == nil:
		return nil
	case !digestRE.MatchString(l.Digest):
		return errdefs.Field(field+".digest", "must be sha256:<64 lowercase hex digits>, got %q", l.Digest)
	case l.Bytes < 0:
		return errdefs.Field(field+".bytes", "must not be negative")
	}
	return nil
}

// CheckResultFiles checks the output files an agent reports for an
// attempt as a submitter's inputs are checked: at most
// api.MaxTaskOutputFiles, each a clean path inside the sandbox, named once,
// with a digest. A result that fails is not stored as it came.
func CheckResultFiles(field string, res api.TaskResult) error {
	if len(res.Outputs) > api.MaxTaskOutputFiles {
		return errdefs.Field(field+".outputs", "at most %d files, got %d", api.MaxTaskOutputFiles, len(res.Outputs))
	}
	seen := make(map[string]bool, len(res.Outputs))
	for i, f := range res.Outputs {
		at := fmt.Sprintf("%s.outputs[%d]", field, i)
		if err := validate.SandboxPath(at+".path", f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return errdefs.Field(at+".path", "%s is given twice", f.Path)
		}
		seen[f.Path] = true
		switch {
		case !digestRE.MatchString(f.Digest):
			return errdefs.Field(at+".digest", "must be sha256:<64 lowercase hex digits>, got %q", f.Digest)
		case f.Size < 0:
			return errdefs.Field(at+".size", "must not be negative")
		case f.Mode > 0o777:
			return errdefs.Field(at+".mode", "only permission bits (at most 0777), got %#o", f.Mode)
		case f.Error != "":
			return errdefs.Field(at+".error", "is for inputs, not outputs")
		}
	}
	if len(res.Missing) > maxTaskOutputs {
		return errdefs.Field(field+".missing", "at most %d globs (a task has no more), got %d", maxTaskOutputs, len(res.Missing))
	}
	return nil
}
