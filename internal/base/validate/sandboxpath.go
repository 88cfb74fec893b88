package validate

import (
	"path"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// SandboxPath checks that p names a place inside a task's sandbox: a
// relative slash path, clean (a trailing slash aside), that does not climb
// out. The CLI checks a tasks file with it before it uploads, the server
// every path it is given, the agent every path it stages, so all three
// agree on what a sandbox path is.
func SandboxPath(field, p string) error {
	switch {
	case p == "":
		return errdefs.Field(field, "must not be empty")
	case strings.HasPrefix(p, "/"):
		return errdefs.Field(field, "%q must be relative to the task's sandbox", p)
	case strings.ContainsRune(p, 0) || strings.Contains(p, "\\"):
		return errdefs.Field(field, "%q holds a NUL or a backslash", p)
	case path.Clean(p) != p && path.Clean(p)+"/" != p:
		return errdefs.Field(field, "%q is not clean; write %q", p, path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return errdefs.Field(field, "%q leaves the task's sandbox", p)
	}
	return nil
}
