package catalog

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Copies go through a temporary directory on the server: an upload is
// unpacked there and the executor copies it to the machine; a download is
// copied there by the executor and sent from it.

// CopyTo unpacks the tar stream in (one top-level entry; see
// archive.Write) and has the deployment's executor (the one via names, or
// its default for copies) copy it to dst on the machine. An error reading
// in is wrapped, so that its cause can be told.
func (c *Catalog) CopyTo(ctx context.Context, deployment, via string, in io.Reader, dst string) error {
	d, e, err := c.ExecTarget(ctx, deployment, via, true)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "nodemgr-copy-")
	if err != nil {
		return fmt.Errorf("copy to %s: %w", d.Name, err)
	}
	defer removeTree(tmp)
	src, err := archive.Extract(ctx, in, tmp+string(filepath.Separator))
	if err != nil {
		return fmt.Errorf("read the uploaded archive: %w: %w", err, errdefs.ErrInvalid)
	}
	if err := e.CopyTo(ctx, d, src, dst); err != nil {
		return hideTemp(err, tmp)
	}
	return nil
}

// Fetched is a file or tree copied from a machine, held on the server
// until it is written out and closed.
type Fetched struct {
	tmp, local, name string
}

// Write writes the copy as a tar stream with one top-level entry, named
// after the path it was copied from.
func (f *Fetched) Write(ctx context.Context, w io.Writer) error {
	return archive.Write(ctx, w, f.local, f.name)
}

// Close removes the copy.
func (f *Fetched) Close() { removeTree(f.tmp) }

// CopyFrom has the deployment's executor copy the file or tree at src on
// the machine into a temporary directory.
func (c *Catalog) CopyFrom(ctx context.Context, deployment, via, src string) (*Fetched, error) {
	d, e, err := c.ExecTarget(ctx, deployment, via, true)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nodemgr-copy-")
	if err != nil {
		return nil, fmt.Errorf("copy from %s: %w", d.Name, err)
	}
	f := &Fetched{tmp: tmp, name: path.Base(src)}
	f.local = filepath.Join(tmp, f.name)
	if err := e.CopyFrom(ctx, d, src, f.local); err != nil {
		f.Close()
		return nil, hideTemp(err, tmp)
	}
	return f, nil
}

// hideTemp drops the server's temporary directory from the paths in an
// executor's error: the client knows the copy by its name alone.
func hideTemp(err error, tmp string) error {
	return &reworded{msg: strings.ReplaceAll(err.Error(), tmp+string(filepath.Separator), ""), err: err}
}

// reworded is an error with another message; its class is still found.
type reworded struct {
	msg string
	err error
}

func (e *reworded) Error() string { return e.msg }
func (e *reworded) Unwrap() error { return e.err }

// removeTree removes a temporary tree, even one whose directories the copy
// made read-only.
func removeTree(dir string) {
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
