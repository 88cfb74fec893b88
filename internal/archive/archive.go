// Package archive moves a file or a tree as a tar stream with one
// top-level entry: the body of nodemgr's file copy endpoints, written by
// the client and the server and unpacked by both. Extraction refuses
// absolute names, "..", a second top-level entry, hard links out of the
// tree and writes through links (every write goes through os.Root).
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The archive below is the body of PUT /v1/deployments/{deployment}/files
// and the answer of its GET. It lives here, with the wire types, because
// both ends must write it and check it the same way.

// ErrBad marks an archive that Extract refuses.
var ErrBad = errors.New("bad archive")

// Write writes the file or tree at src as a tar stream whose one
// top-level entry is named name. Modes (with setuid, setgid and sticky),
// modification times and symbolic links (as links) are kept; ownership is
// not recorded, and sockets, devices and fifos are left out.
func Write(ctx context.Context, w io.Writer, src, name string) error {
	if err := topName(name); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
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
		if !fi.IsDir() && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		hdr.Name = name
		if rel != "." {
			hdr.Name += "/" + filepath.ToSlash(rel)
		}
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grew since it was stat'ed would overflow its entry.
		_, err = io.Copy(tw, io.LimitReader(f, hdr.Size))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Extract writes a tar stream with one top-level entry, as
// Write makes, to dst: the entry becomes dst itself, or dst/NAME
// when dst ends in a separator or its last element is "." or "..". It
// returns the path written. A tree merges into an existing directory; a
// file replaces a file or link but not a directory. Entries are written
// through an os.Root, so none lands outside the copy, by name (absolute,
// "..") or through a symbolic link; symbolic links themselves are kept as
// they are. Refused archives are ErrBad.
func Extract(ctx context.Context, r io.Reader, dst string) (string, error) {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if err == io.EOF {
		return "", fmt.Errorf("the archive is empty: %w", ErrBad)
	}
	if err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	top := strings.TrimSuffix(strings.TrimPrefix(first.Name, "./"), "/")
	if err := topName(top); err != nil {
		return "", fmt.Errorf("archive entry %q is not one top-level entry: %w", first.Name, ErrBad)
	}
	target := filepath.Clean(dst)
	if base := filepath.Base(dst); strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) || base == "." || base == ".." {
		target = filepath.Join(target, top)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}

	if first.Typeflag != tar.TypeDir {
		root, err := os.OpenRoot(filepath.Dir(target))
		if err != nil {
			return "", err
		}
		defer root.Close()
		if err := writeArchiveEntry(root, filepath.Base(target), top, first, tr, nil); err != nil {
			return "", err
		}
		if next, err := tr.Next(); err != io.EOF {
			if err == nil {
				err = fmt.Errorf("archive entry %q follows a single file: %w", next.Name, ErrBad)
			}
			return "", err
		}
		return target, nil
	}

	if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("%s exists and is not a directory: %w", target, fs.ErrExist)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return "", err
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return "", err
	}
	defer root.Close()
	var dirs []*tar.Header
	for hdr := first; ; {
		local, err := archiveName(hdr.Name, top)
		if err != nil {
			return "", err
		}
		if err := writeArchiveEntry(root, local, top, hdr, tr, &dirs); err != nil {
			return "", err
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		hdr, err = tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read archive: %w", err)
		}
	}
	// Directories stay writable until all is in; their modes come last.
	for _, d := range slices.Backward(dirs) {
		local, _ := archiveName(d.Name, top)
		if err := root.Chmod(local, archiveMode(d)); err != nil {
			return "", err
		}
		root.Chtimes(local, d.ModTime, d.ModTime)
	}
	return target, nil
}

// writeArchiveEntry writes one entry at local under root. Directories are
// made writable and added to dirs for their final mode; dirs is nil when
// the archive is a single file.
func writeArchiveEntry(root *os.Root, local, top string, hdr *tar.Header, r io.Reader, dirs *[]*tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := root.Lstat(local); err == nil && !fi.IsDir() {
			if err := root.Remove(local); err != nil {
				return err
			}
		}
		if err := root.MkdirAll(local, 0o700); err != nil {
			return err
		}
		if err := root.Chmod(local, 0o700); err != nil {
			return err
		}
		*dirs = append(*dirs, hdr)
	case tar.TypeReg:
		if err := replaceable(root, local); err != nil {
			return err
		}
		f, err := root.OpenFile(local, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := root.Chmod(local, archiveMode(hdr)); err != nil {
			return err
		}
		root.Chtimes(local, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if err := replaceable(root, local); err != nil {
			return err
		}
		return root.Symlink(hdr.Linkname, local)
	case tar.TypeLink:
		if dirs == nil {
			return fmt.Errorf("archive entry %q: a hard link cannot be copied alone: %w", hdr.Name, ErrBad)
		}
		old, err := archiveName(hdr.Linkname, top)
		if err != nil {
			return err
		}
		if err := replaceable(root, local); err != nil {
			return err
		}
		return root.Link(old, local)
	default:
		// Devices and fifos are not files to copy.
	}
	return nil
}

// topName checks the name of an archive's top-level entry: one path
// element.
func topName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("%q cannot name an archive's top-level entry: %w", name, ErrBad)
	}
	return nil
}

// archiveName turns an entry name under top into a path relative to the
// copy's root ("." for top itself), refusing anything that would leave it.
func archiveName(entry, top string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(entry, "./"))
	if path.IsAbs(entry) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("archive entry %q escapes the destination: %w", entry, ErrBad)
	}
	rest, ok := strings.CutPrefix(clean, top)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("archive entry %q is not under %q: %w", entry, top, ErrBad)
	}
	if rest == "" {
		return ".", nil
	}
	return filepath.FromSlash(rest[1:]), nil
}

// archiveMode is an entry's permission bits, with setuid, setgid and
// sticky.
func archiveMode(hdr *tar.Header) fs.FileMode {
	return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// replaceable removes a non-directory at name so that an entry can take
// its place (never writing through a symlink); a directory is refused.
func replaceable(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory (end the destination with / to copy into it): %w", name, fs.ErrExist)
	}
	return root.Remove(name)
}
