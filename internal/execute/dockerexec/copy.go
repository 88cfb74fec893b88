package dockerexec

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

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/provision"
)

// CopyTo copies the local file or tree src to dst in the container (see
// the package doc for the path rule). dst must be absolute.
func (e *Docker) CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error {
	id, err := containerID(e, d)
	if err != nil {
		return err
	}
	if !path.IsAbs(dst) {
		return errdefs.Field("dst", "%q is not an absolute path in the container", dst)
	}
	target := path.Clean(dst)
	if strings.HasSuffix(dst, "/") {
		target = path.Join(target, filepath.Base(src))
	}
	if target == "/" {
		return errdefs.Field("dst", "cannot replace the container's root directory")
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, localErr(err))
	}
	if !fi.IsDir() {
		// Say so plainly rather than relay the engine's tar error.
		res, err := e.engine.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: target})
		if err == nil && res.Stat.Mode.IsDir() {
			return fmt.Errorf("copy %s to %s:%s: a directory is in the way (end dst with / to copy into it): %w", src, d.Name, target, errdefs.ErrConflict)
		}
	}

	// The archive endpoint extracts into a directory that exists: find
	// the nearest one and send the missing ones in the tar.
	base, missing, err := e.existingDir(ctx, id, path.Dir(target))
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, err)
	}
	// What is copied in belongs to the container's user, who must be
	// able to use it. The engine's own copyUIDGID option can look user
	// names up on the host instead (Docker 20.10 answers "getent unable
	// to find entry"), so resolve them here.
	uid, gid, err := e.owner(ctx, id)
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, err)
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := writeTar(ctx, pw, src, missing, path.Base(target), uid, gid)
		pw.CloseWithError(err)
		written <- err
	}()
	_, err = e.engine.CopyToContainer(ctx, id, client.CopyToContainerOptions{
		DestinationPath: base,
		Content:         pr,
	})
	pr.CloseWithError(errCopyEnded)
	if werr := <-written; werr != nil && !errors.Is(werr, errCopyEnded) {
		// Reading src failed: that, not the engine's view of a cut
		// stream, is the cause.
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, localErr(werr))
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, classify(err))
	}
	return nil
}

var errCopyEnded = errors.New("copy ended")

// existingDir walks up from dir to the nearest directory that exists in
// the container and returns it with the names of the missing ones below
// it, outermost first.
func (e *Docker) existingDir(ctx context.Context, id, dir string) (string, []string, error) {
	var missing []string
	for {
		res, err := e.engine.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: dir})
		switch {
		case err == nil:
			// A link is followed by the extraction; a link to a
			// file fails there.
			if !res.Stat.Mode.IsDir() && res.Stat.Mode&fs.ModeSymlink == 0 {
				return "", nil, fmt.Errorf("%s is not a directory in the container: %w", dir, errdefs.ErrConflict)
			}
			slices.Reverse(missing)
			return dir, missing, nil
		case cerrdefs.IsNotFound(err) && dir != "/":
			missing = append(missing, path.Base(dir))
			dir = path.Dir(dir)
		default:
			return "", nil, fmt.Errorf("stat %s in the container: %w", dir, classify(err))
		}
	}
}

// writeTar writes src, named name, under the directories parents, as a
// tar stream whose entries belong to uid and gid.
func writeTar(ctx context.Context, w io.Writer, src string, parents []string, name string, uid, gid int) error {
	tw := tar.NewWriter(w)
	prefix := ""
	now := time.Now()
	for _, p := range parents {
		prefix += p + "/"
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix, Mode: 0o755, ModTime: now, Uid: uid, Gid: gid}); err != nil {
			return err
		}
	}
	root := prefix + name
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
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil // sockets cannot be archived
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
		hdr.Name = root
		if rel != "." {
			hdr.Name = root + "/" + filepath.ToSlash(rel)
		}
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = uid, gid, "", ""
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
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// CopyFrom copies the file or tree src in the container to the local
// path dst (see the package doc for the path rule). src must be absolute.
func (e *Docker) CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error {
	id, err := containerID(e, d)
	if err != nil {
		return err
	}
	if !path.IsAbs(src) {
		return errdefs.Field("src", "%q is not an absolute path in the container", src)
	}
	srcPath := path.Clean(src)
	target := filepath.Clean(dst)
	if strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) {
		target = filepath.Join(target, path.Base(srcPath))
	}
	res, err := e.engine.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: srcPath})
	if err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, classify(err))
	}
	defer res.Content.Close()
	if err := extract(ctx, tar.NewReader(res.Content), target); err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, err)
	}
	return nil
}

// extract writes a tar stream whose entries sit under one top-level name
// to target: the top-level entry becomes target, the rest go beneath it.
// A tree is written through an os.Root on target, so no entry can land
// outside it, by name or through a symlink.
func extract(ctx context.Context, tr *tar.Reader, target string) error {
	first, err := tr.Next()
	if err == io.EOF {
		return errdefs.NotFound("the archive is empty")
	}
	if err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(first.Name, "./"), "/")
	if rest, err := mapName(first.Name, top); err != nil || rest != "." {
		return fmt.Errorf("archive entry %q is not the top of the archive: %w", first.Name, errdefs.ErrInvalid)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return localErr(err)
	}

	if first.Typeflag != tar.TypeDir {
		root, err := os.OpenRoot(filepath.Dir(target))
		if err != nil {
			return localErr(err)
		}
		defer root.Close()
		if err := writeEntry(root, filepath.Base(target), first, tr, nil); err != nil {
			return err
		}
		if next, err := tr.Next(); err != io.EOF {
			if err == nil {
				err = fmt.Errorf("archive entry %q follows a single file: %w", next.Name, errdefs.ErrInvalid)
			}
			return err
		}
		return nil
	}

	if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory: %w", target, errdefs.ErrConflict)
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return localErr(err)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return localErr(err)
	}
	defer root.Close()
	var dirs []*tar.Header
	hdr := first
	for {
		local, err := mapName(hdr.Name, top)
		if err != nil {
			return err
		}
		if err := writeEntry(root, local, hdr, tr, &dirs); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err = tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
	}
	// Directories stay writable until all is in; their modes come last.
	for _, d := range slices.Backward(dirs) {
		local, _ := mapName(d.Name, top)
		if err := root.Chmod(local, mode(d)); err != nil {
			return localErr(err)
		}
		root.Chtimes(local, d.ModTime, d.ModTime)
	}
	return nil
}

// writeEntry writes one archive entry at local under root. Directories are
// made writable and added to dirs for their final mode.
func writeEntry(root *os.Root, local string, hdr *tar.Header, r io.Reader, dirs *[]*tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := root.Lstat(local); err == nil && !fi.IsDir() {
			if err := root.Remove(local); err != nil {
				return localErr(err)
			}
		}
		if err := root.MkdirAll(local, 0o700); err != nil {
			return localErr(err)
		}
		if err := root.Chmod(local, 0o700); err != nil {
			return localErr(err)
		}
		*dirs = append(*dirs, hdr)
	case tar.TypeReg:
		if err := replaceable(root, local); err != nil {
			return err
		}
		f, err := root.OpenFile(local, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
		if err != nil {
			return localErr(err)
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return localErr(err)
		}
		if err := root.Chmod(local, mode(hdr)); err != nil {
			return localErr(err)
		}
		root.Chtimes(local, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if err := replaceable(root, local); err != nil {
			return err
		}
		if err := root.Symlink(hdr.Linkname, local); err != nil {
			return localErr(err)
		}
	case tar.TypeLink:
		if dirs == nil {
			return fmt.Errorf("archive entry %q: a hard link cannot be copied alone: %w", hdr.Name, errdefs.ErrInvalid)
		}
		top, _, _ := strings.Cut(strings.TrimPrefix(hdr.Name, "./"), "/")
		old, err := mapName(hdr.Linkname, top)
		if err != nil {
			return err
		}
		if err := replaceable(root, local); err != nil {
			return err
		}
		if err := root.Link(old, local); err != nil {
			return localErr(err)
		}
	default:
		// Devices and fifos are not a node's files to fetch.
	}
	return nil
}

// mode is an entry's permission bits, with setuid, setgid and sticky.
func mode(hdr *tar.Header) fs.FileMode {
	return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// mapName turns an archive entry name under top into a local path
// relative to the copy's root ("." for top itself), refusing anything
// that would leave it.
func mapName(entry, top string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(entry, "./"))
	if path.IsAbs(entry) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("archive entry %q escapes the destination: %w", entry, errdefs.ErrInvalid)
	}
	rest, ok := strings.CutPrefix(clean, top)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("archive entry %q is not under %q: %w", entry, top, errdefs.ErrInvalid)
	}
	if rest == "" {
		return ".", nil
	}
	return filepath.FromSlash(rest[1:]), nil
}

// replaceable removes a non-directory at name so that an entry can take
// its place (never writing through a symlink); a directory is refused.
func replaceable(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return localErr(err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory: %w", name, errdefs.ErrConflict)
	}
	return localErr(root.Remove(name))
}

// localErr classes an error from the local file system.
func localErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return &classed{err: err, class: errdefs.ErrNotFound}
	case errors.Is(err, fs.ErrPermission):
		return &classed{err: err, class: errdefs.ErrPermission}
	case errors.Is(err, fs.ErrExist):
		return &classed{err: err, class: errdefs.ErrConflict}
	}
	return err
}
