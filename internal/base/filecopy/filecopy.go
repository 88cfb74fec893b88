// Package filecopy copies a file's content into a new file: a reflink
// where the filesystem can share the blocks (btrfs, XFS), else a plain
// copy. The agent stages task inputs from its cache with it, a supervisor
// keeps a service's rotated log, the orchestrator stages the agent binary.
package filecopy

import (
	"io"
	"os"
)

// Copy fills out, a file just opened for writing, with in's content, and
// closes out (on an error too).
func Copy(out, in *os.File) error {
	if err := cloneFile(out, in); err != nil {
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}

// File copies the file at src to dst, made with mode if it is not there
// and truncated if it is.
func File(src, dst string, mode os.FileMode) error {
	return Opened(
		func() (*os.File, error) { return os.Open(src) },
		func() (*os.File, error) { return os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode) })
}

// InRoot is File for two names in root: neither can lead out of it.
func InRoot(root *os.Root, src, dst string, mode os.FileMode) error {
	return Opened(
		func() (*os.File, error) { return root.Open(src) },
		func() (*os.File, error) { return root.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode) })
}

// Opened copies the file open opens into the one create makes, for a
// caller that opens them its own way, and closes both.
func Opened(open, create func() (*os.File, error)) error {
	in, err := open()
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := create()
	if err != nil {
		return err
	}
	return Copy(out, in)
}
