package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodemgr/nodemgr/internal/errdefs"
)

// copyTree copies the file or tree src to dst (see the package doc).
func copyTree(ctx context.Context, src, dst string) error {
	target := filepath.Clean(dst)
	if strings.HasSuffix(dst, string(filepath.Separator)) || strings.HasSuffix(dst, "/") {
		target = filepath.Join(target, filepath.Base(src))
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return classify(err)
	}
	if fi.IsDir() {
		if inside, err := within(src, target); err != nil {
			return classify(err)
		} else if inside {
			return fmt.Errorf("%s is inside %s: %w", target, src, errdefs.ErrInvalid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return classify(err)
	}

	if !fi.IsDir() {
		root, err := os.OpenRoot(filepath.Dir(target))
		if err != nil {
			return classify(err)
		}
		defer root.Close()
		return copyEntry(root, filepath.Base(target), src, fi)
	}

	if tfi, err := os.Lstat(target); err == nil && !tfi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory: %w", target, errdefs.ErrConflict)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return classify(err)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return classify(err)
	}
	defer root.Close()
	type dirMeta struct {
		name string
		fi   fs.FileInfo
	}
	var dirs []dirMeta
	err = filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			dirs = append(dirs, dirMeta{rel, fi})
		}
		return copyEntry(root, rel, p, fi)
	})
	if err != nil {
		return classify(err)
	}
	// Directories stay writable until all is in; their modes come last.
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, perm(d.fi)); err != nil {
			return classify(err)
		}
		root.Chtimes(d.name, d.fi.ModTime(), d.fi.ModTime())
	}
	return nil
}

// copyEntry copies the file, link or directory at p (described by fi) to
// name under root. A directory is only made, writable; its mode is set
// by the caller once its contents are in.
func copyEntry(root *os.Root, name, p string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		if cur, err := root.Lstat(name); err == nil && !cur.IsDir() {
			if err := root.Remove(name); err != nil {
				return err
			}
		}
		if err := root.MkdirAll(name, 0o700); err != nil {
			return err
		}
		return root.Chmod(name, 0o700)
	case fi.Mode()&fs.ModeSymlink != 0:
		link, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if err := replaceable(root, name); err != nil {
			return err
		}
		return root.Symlink(link, name)
	case fi.Mode().IsRegular():
		if err := replaceable(root, name); err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := root.Chmod(name, perm(fi)); err != nil {
			return err
		}
		return root.Chtimes(name, fi.ModTime(), fi.ModTime())
	}
	// Sockets, fifos, devices: not files to copy.
	return nil
}

func perm(fi fs.FileInfo) fs.FileMode {
	return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// replaceable removes a non-directory at name so that a copy can take its
// place (never writing through a symlink); a directory is refused.
func replaceable(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory (end dst with / to copy into it): %w", name, errdefs.ErrConflict)
	}
	return root.Remove(name)
}

// within reports whether target is src or lies beneath it, links
// resolved as far as they exist.
func within(src, target string) (bool, error) {
	s, err := filepath.EvalSymlinks(src)
	if err != nil {
		return false, err
	}
	s, err = filepath.Abs(s)
	if err != nil {
		return false, err
	}
	t, err := filepath.Abs(target)
	if err != nil {
		return false, err
	}
	// Resolve the longest existing prefix of target.
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(t); err == nil {
			t = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(t)
		if parent == t {
			break
		}
		rest = filepath.Join(filepath.Base(t), rest)
		t = parent
	}
	rel, err := filepath.Rel(s, t)
	if err != nil {
		return false, nil
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))), nil
}
