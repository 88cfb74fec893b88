// Package archive moves a file or a tree as a tar stream with one
// top-level entry: the body of nodemgr's file copy endpoints, written by
// the client and the server and unpacked by both. Extraction refuses
// absolute names, "..", a second top-level entry, hard links out of the
// tree and writes through links (every write goes through os.Root).
// The executors use it too: the docker executor to write the stream it
// sends a container and to unpack the one it gets back, the local one to
// copy without a stream (Copy), under the same rules.
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
	"time"
)

// The archive below is the body of PUT /v1/deployments/{deployment}/files
// and the answer of its GET. It lives here, with the wire types, because
// both ends must write it and check it the same way.

// ErrBad marks an archive that Extract refuses.
var ErrBad = errors.New("bad archive")

// ErrEmpty is the ErrBad of an archive with no entry at all.
var ErrEmpty = fmt.Errorf("the archive is empty: %w", ErrBad)

// Write writes the file or tree at src as a tar stream whose one
// top-level entry is named name. Modes (with setuid, setgid and sticky),
// modification times and symbolic links (as links) are kept; ownership is
// not recorded, and sockets, devices and fifos are left out.
func Write(ctx context.Context, w io.Writer, src, name string) error {
	return WriteWith(ctx, w, src, name, WriteOptions{})
}

// WriteOptions shape a stream for a reader other than Extract.
type WriteOptions struct {
	// Parents are directories, outermost first, that the entry sits
	// under in the stream; each gets an entry of its own (mode 0755,
	// modified now).
	Parents []string
	// UID and GID own every entry (Write records 0).
	UID, GID int
}

// WriteWith is Write with options.
func WriteWith(ctx context.Context, w io.Writer, src, name string, opts WriteOptions) error {
	if err := topName(name); err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	prefix := ""
	now := time.Now()
	for _, p := range opts.Parents {
		prefix += p + "/"
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix, Mode: 0o755, ModTime: now, Uid: opts.UID, Gid: opts.GID}); err != nil {
			return err
		}
	}
	top := prefix + name
	err := walk(ctx, src, func(p, rel string, fi fs.FileInfo) error {
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = top
		if rel != "." {
			hdr.Name += "/" + filepath.ToSlash(rel)
		}
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = opts.UID, opts.GID, "", ""
		// The tar writer would round sub-second times to the nearest
		// second, making a copy up to half a second newer than its source;
		// whole seconds, never later, is what the copy keeps.
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
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

// walk calls fn for src and everything beneath it that can be copied:
// directories, regular files and symbolic links (sockets, devices and
// fifos are left out), with each one's path relative to src.
func walk(ctx context.Context, src string, fn func(p, rel string, fi fs.FileInfo) error) error {
	return filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
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
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		return fn(p, rel, fi)
	})
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
	return extract(ctx, r, func(top string) string {
		if base := filepath.Base(dst); strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) || base == "." || base == ".." {
			return filepath.Join(dst, top)
		}
		return filepath.Clean(dst)
	})
}

// ExtractAt is Extract with the top-level entry written at target
// itself, whatever its name.
func ExtractAt(ctx context.Context, r io.Reader, target string) error {
	_, err := extract(ctx, r, func(string) string { return filepath.Clean(target) })
	return err
}

// Target is where a copy named name lands for dst under the executors'
// rule: dst names the copy itself, and a dst ending in a separator means
// "into", dst/name.
func Target(dst, name string) string {
	if strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) {
		return filepath.Join(dst, name)
	}
	return filepath.Clean(dst)
}

func extract(ctx context.Context, r io.Reader, targetFor func(top string) string) (string, error) {
	tr := tar.NewReader(r)
	first, err := tr.Next()
	if err == io.EOF {
		return "", ErrEmpty
	}
	if err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	top := strings.TrimSuffix(strings.TrimPrefix(first.Name, "./"), "/")
	if err := topName(top); err != nil {
		return "", fmt.Errorf("archive entry %q is not one top-level entry: %w", first.Name, ErrBad)
	}
	target := targetFor(top)
	tree := first.Typeflag == tar.TypeDir
	root, name, err := openTarget(target, tree)
	if err != nil {
		return "", err
	}
	defer root.Close()

	if !tree {
		if err := writeNode(root, name, headerNode(first, ""), tr, nil); err != nil {
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

	var dirs []dirMeta
	for hdr := first; ; {
		local, err := archiveName(hdr.Name, top)
		if err != nil {
			return "", err
		}
		old := ""
		if hdr.Typeflag == tar.TypeLink {
			if old, err = archiveName(hdr.Linkname, top); err != nil {
				return "", err
			}
		}
		if err := writeNode(root, local, headerNode(hdr, old), tr, &dirs); err != nil {
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
	if err := finishDirs(root, dirs); err != nil {
		return "", err
	}
	return target, nil
}

// Copy copies the file or tree at src to target itself, as Write and
// ExtractAt would in turn but without the stream between them: the same
// entries are kept and left out, and a tree merges the same way. Writes
// go through an os.Root on target (or on its directory, for a file).
func Copy(ctx context.Context, src, target string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	root, name, err := openTarget(target, fi.IsDir())
	if err != nil {
		return err
	}
	defer root.Close()
	if !fi.IsDir() {
		return copyNode(root, name, src, fi, nil)
	}
	var dirs []dirMeta
	if err := walk(ctx, src, func(p, rel string, fi fs.FileInfo) error {
		return copyNode(root, rel, p, fi, &dirs)
	}); err != nil {
		return err
	}
	return finishDirs(root, dirs)
}

// copyNode copies the local file, link or directory at p to name under
// root.
func copyNode(root *os.Root, name, p string, fi fs.FileInfo, dirs *[]dirMeta) error {
	n := node{mode: permBits(fi.Mode()), mtime: fi.ModTime()}
	var body io.Reader
	switch {
	case fi.IsDir():
		n.typ = tar.TypeDir
	case fi.Mode()&fs.ModeSymlink != 0:
		n.typ = tar.TypeSymlink
		link, err := os.Readlink(p)
		if err != nil {
			return err
		}
		n.link = link
	case fi.Mode().IsRegular():
		n.typ = tar.TypeReg
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		body = f
	default:
		return nil
	}
	return writeNode(root, name, n, body, dirs)
}

// openTarget makes target's parents and opens the root that a copy is
// written through: target's directory for a file (returned with the
// name in it), target itself, made if need be, for a tree (returned with
// ".").
func openTarget(target string, tree bool) (*os.Root, string, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return nil, "", err
	}
	if !tree {
		root, err := os.OpenRoot(filepath.Dir(target))
		return root, filepath.Base(target), err
	}
	if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
		return nil, "", fmt.Errorf("%s exists and is not a directory: %w", target, fs.ErrExist)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(target)
	return root, ".", err
}

// node is one entry to write, from an archive or from the file system.
type node struct {
	typ   byte        // tar.TypeDir, TypeReg, TypeSymlink or TypeLink; others are skipped
	mode  fs.FileMode // permission bits, with setuid, setgid and sticky
	mtime time.Time
	link  string // a symbolic link's target; a hard link's name under root
	name  string // as the archive names it, for errors
}

func headerNode(hdr *tar.Header, old string) node {
	n := node{typ: hdr.Typeflag, mode: permBits(hdr.FileInfo().Mode()), mtime: hdr.ModTime, link: hdr.Linkname, name: hdr.Name}
	if hdr.Typeflag == tar.TypeLink {
		n.link = old
	}
	return n
}

// dirMeta is a directory written, for its final mode and time.
type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// writeNode writes one entry at local under root, a regular file's
// contents read from r. Directories are made writable and added to dirs
// for their final mode; dirs is nil when the copy is a single file.
func writeNode(root *os.Root, local string, n node, r io.Reader, dirs *[]dirMeta) error {
	switch n.typ {
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
		*dirs = append(*dirs, dirMeta{local, n.mode, n.mtime})
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
		if err := root.Chmod(local, n.mode); err != nil {
			return err
		}
		root.Chtimes(local, n.mtime, n.mtime)
	case tar.TypeSymlink:
		if err := replaceable(root, local); err != nil {
			return err
		}
		return root.Symlink(n.link, local)
	case tar.TypeLink:
		if dirs == nil {
			return fmt.Errorf("archive entry %q: a hard link cannot be copied alone: %w", n.name, ErrBad)
		}
		if err := replaceable(root, local); err != nil {
			return err
		}
		return root.Link(n.link, local)
	default:
		// Devices and fifos are not files to copy.
	}
	return nil
}

// finishDirs gives directories their modes and times, deepest first:
// they stay writable until all is in.
func finishDirs(root *os.Root, dirs []dirMeta) error {
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		root.Chtimes(d.name, d.mtime, d.mtime)
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

// permBits is a mode's permission bits, with setuid, setgid and sticky.
func permBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
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
