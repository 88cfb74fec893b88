package artifact

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

const maxLinkTarget = 4 << 10

type kind uint8

const (
	kindDir kind = iota + 1
	kindFile
	kindSymlink
)

type extractStats struct {
	size  int64 // bytes of regular files
	files int   // entries
}

// extractor unpacks one archive into a fresh directory. Every write goes
// through an os.Root, so nothing can land outside it even by a route the
// checks below missed; the checks are what keep the tree from holding
// links that lead out, and what give a clear error naming the entry.
type extractor struct {
	root     *os.Root
	maxBytes int64
	maxFiles int
	st       extractStats
	// kinds records every path created, by clean slash name: entries may
	// not pass through a symlink or a file, nor be given twice.
	kinds map[string]kind
}

// extract unpacks a into dir (which must exist and be empty) and makes
// everything below dir read-only; dir's own mode is left to the caller.
func extract(a archive, dir string, maxBytes int64, maxFiles int) (extractStats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return extractStats{}, err
	}
	defer root.Close()
	x := &extractor{root: root, maxBytes: maxBytes, maxFiles: maxFiles, kinds: map[string]kind{}}
	switch a.format {
	case ".zip":
		err = x.zip(a.path)
	case ".tar.gz":
		err = x.tarGz(a.path)
	default:
		err = fmt.Errorf("unknown archive format %q", a.format)
	}
	if err != nil {
		return extractStats{}, fmt.Errorf("unpack %s: %w", path.Base(a.url), err)
	}
	for name, k := range x.kinds {
		if k == kindDir {
			if err := root.Chmod(filepath.FromSlash(name), 0o555); err != nil {
				return extractStats{}, err
			}
		}
	}
	return x.st, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalid)
}

func (x *extractor) zip(file string) error {
	zr, err := zip.OpenReader(file)
	if err != nil {
		return invalid("not a valid zip archive: %v", err)
	}
	defer zr.Close()
	if len(zr.File) > x.maxFiles {
		return invalid("over the limit of %d entries (has %d)", x.maxFiles, len(zr.File))
	}
	// Refuse early on the declared sizes; the copy below counts the real
	// bytes too, since a header may lie.
	var declared uint64
	for _, f := range zr.File {
		if declared += f.UncompressedSize64; declared > uint64(x.maxBytes) || declared < f.UncompressedSize64 {
			return invalid("unpacks to over the %d-byte limit", x.maxBytes)
		}
	}
	for _, f := range zr.File {
		mode := f.Mode()
		switch {
		case mode.IsDir():
			err = x.dir(f.Name)
		case mode&fs.ModeSymlink != 0:
			err = x.zipSymlink(f)
		case mode.IsRegular():
			err = x.zipFile(f)
		default:
			err = invalid("entry %q: unsupported file type %v", f.Name, mode.Type())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) zipFile(f *zip.File) error {
	rc, err := f.Open()
	if err != nil {
		return invalid("entry %q: %v", f.Name, err)
	}
	defer rc.Close()
	return x.file(f.Name, f.Mode(), rc)
}

func (x *extractor) zipSymlink(f *zip.File) error {
	rc, err := f.Open()
	if err != nil {
		return invalid("entry %q: %v", f.Name, err)
	}
	defer rc.Close()
	target, err := io.ReadAll(io.LimitReader(rc, maxLinkTarget+1))
	if err != nil {
		return invalid("entry %q: %v", f.Name, err)
	}
	if len(target) > maxLinkTarget {
		return invalid("symlink %q: target longer than %d bytes", f.Name, maxLinkTarget)
	}
	return x.symlink(f.Name, string(target))
}

func (x *extractor) tarGz(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return invalid("not a valid tar.gz archive: %v", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalid("not a valid tar.gz archive: %v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = x.dir(hdr.Name)
		case tar.TypeReg:
			if hdr.Size > x.maxBytes-x.st.size {
				return invalid("entry %q: unpacks to over the %d-byte limit", hdr.Name, x.maxBytes)
			}
			err = x.file(hdr.Name, hdr.FileInfo().Mode(), tr)
		case tar.TypeSymlink:
			err = x.symlink(hdr.Name, hdr.Linkname)
		case tar.TypeLink:
			err = x.hardlink(hdr.Name, hdr.Linkname)
		case tar.TypeXGlobalHeader:
			// PAX global header (git archive writes one): metadata only.
		default:
			err = invalid("entry %q: unsupported tar entry type %q", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

// cleanName checks an entry name and returns it clean and slash separated;
// "" is the archive's root.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", invalid("entry with an empty name")
	case strings.ContainsAny(name, "\x00\\"):
		return "", invalid("entry %q: backslash or NUL in name", name)
	case strings.HasPrefix(name, "/"):
		return "", invalid("entry %q: absolute path", name)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", invalid("entry %q: \"..\" leads out of the install dir", name)
		}
		parts = append(parts, p)
	}
	clean := strings.Join(parts, "/")
	if clean != "" && !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", invalid("entry %q: not a local path", name)
	}
	if clean == manifestName {
		return "", invalid("entry %q: name is reserved for the install manifest", name)
	}
	return clean, nil
}

// begin checks a new entry: its name, the entry cap, that it is not given
// twice and that its parents are directories (never symlinks, which could
// redirect it); then it creates those parents.
func (x *extractor) begin(name string) (string, error) {
	clean, err := cleanName(name)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", invalid("entry %q: names the archive root", name)
	}
	if x.st.files++; x.st.files > x.maxFiles {
		return "", invalid("over the limit of %d entries", x.maxFiles)
	}
	if _, dup := x.kinds[clean]; dup {
		return "", invalid("entry %q: given twice", name)
	}
	dir := path.Dir(clean)
	for p := dir; p != "."; p = path.Dir(p) {
		switch x.kinds[p] {
		case kindSymlink:
			return "", invalid("entry %q: parent %q is a symlink", name, p)
		case kindFile:
			return "", invalid("entry %q: parent %q is a file", name, p)
		}
	}
	if dir != "." {
		if err := x.root.MkdirAll(filepath.FromSlash(dir), 0o755); err != nil {
			return "", err
		}
		for p := dir; p != "."; p = path.Dir(p) {
			x.kinds[p] = kindDir
		}
	}
	return clean, nil
}

func (x *extractor) dir(name string) error {
	clean, err := cleanName(name)
	if err != nil || clean == "" || x.kinds[clean] == kindDir {
		return err // the root, or a directory made already as a parent
	}
	if clean, err = x.begin(name); err != nil {
		return err
	}
	if err := x.root.Mkdir(filepath.FromSlash(clean), 0o755); err != nil {
		return err
	}
	x.kinds[clean] = kindDir
	return nil
}

func (x *extractor) file(name string, mode fs.FileMode, r io.Reader) error {
	clean, err := x.begin(name)
	if err != nil {
		return err
	}
	f, err := x.root.OpenFile(filepath.FromSlash(clean), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	x.kinds[clean] = kindFile
	err = x.copy(f, name, r)
	if err == nil {
		perm := fs.FileMode(0o444)
		if mode&0o111 != 0 {
			perm = 0o555
		}
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copy writes r to f within what is left of the byte cap. Read errors are
// the archive's fault (truncated, bad CRC, size not as declared); write
// errors are the disk's.
func (x *extractor) copy(f *os.File, name string, r io.Reader) error {
	left := x.maxBytes - x.st.size
	n, err := io.Copy(f, archiveReader{io.LimitReader(r, left+1)})
	x.st.size += n
	var ae archiveError
	switch {
	case errors.As(err, &ae) && errors.Is(ae.err, zip.ErrFormat):
		return invalid("entry %q: data is corrupt or inflates past its declared size", name)
	case errors.As(err, &ae):
		return invalid("entry %q: %v", name, ae.err)
	case err != nil:
		return err
	case n > left:
		return invalid("entry %q: unpacks to over the %d-byte limit", name, x.maxBytes)
	}
	return nil
}

type archiveError struct{ err error }

func (e archiveError) Error() string { return e.err.Error() }

type archiveReader struct{ r io.Reader }

func (a archiveReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err != nil && err != io.EOF {
		err = archiveError{err}
	}
	return n, err
}

// symlink creates a link whose target stays inside the tree. The target
// must be relative, and any ".." must come first: those climb from the
// link's directory, whose parents are all real directories, so counting
// them is exact. A ".." after a name could follow another symlink and climb
// from somewhere else, so it is refused.
func (x *extractor) symlink(name, target string) error {
	if target == "" || strings.ContainsAny(target, "\x00\\") {
		return invalid("symlink %q: bad target %q", name, target)
	}
	if strings.HasPrefix(target, "/") {
		return invalid("symlink %q -> %q: absolute target leads out of the install dir", name, target)
	}
	up, named := 0, false
	for _, p := range strings.Split(target, "/") {
		switch {
		case p == "" || p == ".":
		case p == "..":
			if named {
				return invalid("symlink %q -> %q: \"..\" after a name in a target is not allowed", name, target)
			}
			up++
		default:
			named = true
		}
	}
	clean, err := x.begin(name)
	if err != nil {
		return err
	}
	depth := strings.Count(clean, "/") // directories between the root and the link
	if up > depth {
		return invalid("symlink %q -> %q leads out of the install dir", name, target)
	}
	if err := x.root.Symlink(target, filepath.FromSlash(clean)); err != nil {
		return err
	}
	x.kinds[clean] = kindSymlink
	return nil
}

// hardlink links name to a regular file unpacked earlier from the archive.
func (x *extractor) hardlink(name, target string) error {
	to, err := cleanName(target)
	if err != nil || to == "" {
		return invalid("hard link %q -> %q leads out of the install dir", name, target)
	}
	if x.kinds[to] != kindFile {
		return invalid("hard link %q -> %q: target is not a file unpacked before it", name, target)
	}
	clean, err := x.begin(name)
	if err != nil {
		return err
	}
	if err := x.root.Link(filepath.FromSlash(to), filepath.FromSlash(clean)); err != nil {
		return err
	}
	x.kinds[clean] = kindFile
	return nil
}
