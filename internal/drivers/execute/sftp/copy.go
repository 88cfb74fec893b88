package sftp

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/pkg/sftp"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// CopyTo copies the local file or tree src to dst on d (see the package
// doc for the path rule).
func (f *SFTP) CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error {
	sc, end, err := f.session(ctx, d)
	if err != nil {
		return err
	}
	defer end()
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, dst, errdefs.FromOS(err))
	}
	target, err := ssh.RemoteTarget(dst, filepath.Base(src))
	if err != nil {
		return err
	}
	if err := put(ctx, sc, src, fi, target); err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, cutOff(ctx, err))
	}
	return nil
}

// dirMeta is a directory written, for its final mode and time.
type dirMeta struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

// put copies the local src, described by fi, to target on the machine.
func put(ctx context.Context, sc *sftp.Client, src string, fi fs.FileInfo, target string) error {
	// What is in the way is found before anything is written.
	rfi, err := sc.Lstat(target)
	switch {
	case err == nil && fi.IsDir() && !rfi.IsDir():
		return errdefs.Conflict("%s exists on the machine and is not a directory", target)
	case err == nil && !fi.IsDir():
		if st, err := sc.Stat(target); err == nil && st.IsDir() {
			return errdefs.Conflict("a directory is in the way at %s (end dst with / to copy into it)", target)
		}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return classify(err)
	}
	if err := mkdirAll(sc, path.Dir(target)); err != nil {
		return err
	}
	if !fi.IsDir() {
		return putNode(sc, src, fi, target)
	}
	var dirs []dirMeta
	err = filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return errdefs.FromOS(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := de.Info()
		if err != nil {
			return errdefs.FromOS(err)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		rp := target
		if rel != "." {
			rp = path.Join(target, filepath.ToSlash(rel))
		}
		switch {
		case info.IsDir():
			if err := ensureDir(sc, rp); err != nil {
				return err
			}
			dirs = append(dirs, dirMeta{rp, info.Mode(), info.ModTime()})
		case info.Mode().IsRegular(), info.Mode()&fs.ModeSymlink != 0:
			return putNode(sc, p, info, rp)
		}
		// Sockets, devices and fifos are not files to copy.
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first: they stay writable until all is in.
	for _, d := range slices.Backward(dirs) {
		if err := sc.Chmod(d.path, permBits(d.mode)); err != nil {
			return fmt.Errorf("chmod %s: %w", d.path, classify(err))
		}
		if err := sc.Chtimes(d.path, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("set the times of %s: %w", d.path, classify(err))
		}
	}
	return nil
}

// mkdirAll makes dir and its missing parents (the server gives them its
// default mode, 0755 under the usual umask).
func mkdirAll(sc *sftp.Client, dir string) error {
	fi, err := sc.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return errdefs.Conflict("%s is not a directory on the machine", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("stat %s: %w", dir, classify(err))
	}
	if parent := path.Dir(dir); parent != dir {
		if err := mkdirAll(sc, parent); err != nil {
			return err
		}
	}
	if err := sc.Mkdir(dir); err != nil {
		if fi, serr := sc.Stat(dir); serr == nil && fi.IsDir() {
			return nil // made meanwhile
		}
		return fmt.Errorf("mkdir %s: %w", dir, classify(err))
	}
	return nil
}

// ensureDir makes p a directory the copy can write in: one that is there
// is kept; a file or link in its way is replaced, so that nothing is
// written through a link.
func ensureDir(sc *sftp.Client, p string) error {
	fi, err := sc.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
	case err == nil:
		if err := sc.Remove(p); err != nil {
			return fmt.Errorf("replace %s with a directory: %w", p, classify(err))
		}
		fallthrough
	case errors.Is(err, fs.ErrNotExist):
		if err := sc.Mkdir(p); err != nil {
			return fmt.Errorf("mkdir %s: %w", p, classify(err))
		}
	default:
		return fmt.Errorf("lstat %s: %w", p, classify(err))
	}
	if err := sc.Chmod(p, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", p, classify(err))
	}
	return nil
}

// putNode writes the local file or link p at remote: under a temporary
// name beside it, then renamed over what is there (never a directory).
func putNode(sc *sftp.Client, p string, fi fs.FileInfo, remote string) error {
	tmp := path.Join(path.Dir(remote), ".nodemgr-"+randomHex())
	if err := writeNode(sc, p, fi, tmp); err != nil {
		sc.Remove(tmp)
		return err
	}
	if err := replace(sc, tmp, remote); err != nil {
		sc.Remove(tmp)
		return err
	}
	return nil
}

func writeNode(sc *sftp.Client, p string, fi fs.FileInfo, tmp string) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		link, err := os.Readlink(p)
		if err != nil {
			return errdefs.FromOS(err)
		}
		if err := sc.Symlink(link, tmp); err != nil {
			return fmt.Errorf("symlink %s: %w", tmp, classify(err))
		}
		return nil
	}
	lf, err := os.Open(p)
	if err != nil {
		return errdefs.FromOS(err)
	}
	defer lf.Close()
	rf, err := sc.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, classify(err))
	}
	_, err = rf.ReadFrom(lf)
	if cerr := rf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, classify(err))
	}
	if err := sc.Chmod(tmp, permBits(fi.Mode())); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, classify(err))
	}
	if err := sc.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		return fmt.Errorf("set the times of %s: %w", tmp, classify(err))
	}
	return nil
}

// replace renames tmp over remote, which must not be a directory.
func replace(sc *sftp.Client, tmp, remote string) error {
	if fi, err := sc.Lstat(remote); err == nil && fi.IsDir() {
		return errdefs.Conflict("%s is a directory (end dst with / to copy into it)", remote)
	}
	if _, ok := sc.HasExtension("posix-rename@openssh.com"); ok {
		if err := sc.PosixRename(tmp, remote); err != nil {
			return fmt.Errorf("rename into %s: %w", remote, classify(err))
		}
		return nil
	}
	// Plain SFTP rename refuses to replace.
	if err := sc.Remove(remote); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replace %s: %w", remote, classify(err))
	}
	if err := sc.Rename(tmp, remote); err != nil {
		return fmt.Errorf("rename into %s: %w", remote, classify(err))
	}
	return nil
}

// CopyFrom copies the file or tree src on d to the local path dst (see
// the package doc for the path rule).
func (f *SFTP) CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error {
	sc, end, err := f.session(ctx, d)
	if err != nil {
		return err
	}
	defer end()
	srcPath, err := ssh.RemoteSource(src)
	if err != nil {
		return err
	}
	target := archive.Target(dst, path.Base(srcPath))
	if err := get(ctx, sc, srcPath, target); err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, cutOff(ctx, err))
	}
	return nil
}

// get copies src on the machine to the local target: a tar stream of it,
// made here from SFTP reads, unpacked by archive.ExtractAt.
func get(ctx context.Context, sc *sftp.Client, src, target string) error {
	fi, err := sc.Lstat(src)
	if err != nil {
		return classify(err)
	}
	// What is in the way is found before anything is written.
	if lfi, err := os.Lstat(target); err == nil {
		switch {
		case fi.IsDir() && !lfi.IsDir():
			return errdefs.Conflict("%s exists and is not a directory", target)
		case !fi.IsDir() && lfi.IsDir():
			return errdefs.Conflict("a directory is in the way at %s (end dst with / to copy into it)", target)
		}
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := writeTar(ctx, sc, src, fi, pw)
		pw.CloseWithError(err)
		written <- err
	}()
	xerr := archive.ExtractAt(ctx, pr, target)
	pr.CloseWithError(errCopyEnded)
	werr := <-written
	switch {
	case werr != nil && !errors.Is(werr, errCopyEnded) && !errors.Is(werr, io.ErrClosedPipe):
		// Reading the machine's tree failed: that is the cause.
		return werr
	case errors.Is(xerr, archive.ErrBad):
		return errdefs.Class(xerr, errdefs.ErrInvalid)
	}
	return errdefs.FromOS(xerr)
}

var errCopyEnded = errors.New("copy ended")

// writeTar writes src, described by fi, as a tar stream with one
// top-level entry named after it. An entry the server names with
// anything but one plain path element is refused.
func writeTar(ctx context.Context, sc *sftp.Client, src string, fi fs.FileInfo, w io.Writer) error {
	tw := tar.NewWriter(w)
	var walk func(p, name string, fi fs.FileInfo) error
	walk = func(p, name string, fi fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := fi.Mode()
		if !m.IsDir() && !m.IsRegular() && m&fs.ModeSymlink == 0 {
			return nil // sockets, devices and fifos are not files to copy
		}
		link := ""
		if m&fs.ModeSymlink != 0 {
			var err error
			if link, err = sc.ReadLink(p); err != nil {
				return fmt.Errorf("readlink %s: %w", p, classify(err))
			}
		}
		// A directory's entries are checked before it is written, so
		// that a refused one leaves nothing of the directory behind.
		var entries []fs.FileInfo
		if m.IsDir() {
			var err error
			if entries, err = sc.ReadDir(p); err != nil {
				return fmt.Errorf("read directory %s: %w", p, classify(err))
			}
			entries = slices.DeleteFunc(entries, func(e fs.FileInfo) bool { return e.Name() == "." || e.Name() == ".." })
			for _, e := range entries {
				if n := e.Name(); n == "" || strings.ContainsAny(n, "/\x00") {
					return fmt.Errorf("the machine lists an entry named %q in %s, which would land outside the copy: %w", n, p, errdefs.ErrInvalid)
				}
			}
			slices.SortFunc(entries, func(a, b fs.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = name, 0, 0, "", ""
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
		if m.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if m.IsRegular() {
			rf, err := sc.Open(p)
			if err != nil {
				return fmt.Errorf("open %s: %w", p, classify(err))
			}
			n, err := io.Copy(tw, rf)
			rf.Close()
			if err == nil && n != hdr.Size {
				err = fmt.Errorf("%s changed while it was copied", p)
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", p, classify(err))
			}
		}
		for _, e := range entries {
			if err := walk(path.Join(p, e.Name()), name+"/"+e.Name(), e); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(src, path.Base(src), fi); err != nil {
		return err
	}
	return tw.Close()
}

// classify gives an SFTP error its class: the client reports a missing
// file as fs.ErrNotExist and a refusal as fs.ErrPermission.
func classify(err error) error {
	var se *sftp.StatusError
	if errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxOpUnsupported {
		return errdefs.Class(err, errdefs.ErrInvalid)
	}
	return errdefs.FromOS(err)
}

// cutOff reports ctx's end rather than the closed session it caused.
func cutOff(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// permBits is a mode's permission bits, with setuid, setgid and sticky.
func permBits(m fs.FileMode) fs.FileMode {
	return m & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

func randomHex() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
