package dockerexec

import (
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

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/dockerengine"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
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
	// Container paths are slash paths whatever the host's separator.
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
		err := archive.WriteWith(ctx, pw, src, path.Base(target), archive.WriteOptions{Parents: missing, UID: uid, GID: gid})
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
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, copyToErr(err))
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
			return "", nil, fmt.Errorf("stat %s in the container: %w", dir, dockerengine.Classify(err))
		}
	}
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
	target := archive.Target(dst, path.Base(srcPath))
	res, err := e.engine.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: srcPath})
	if err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, dockerengine.Classify(err))
	}
	defer res.Content.Close()
	if err := extract(ctx, res.Content, target); err != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, err)
	}
	return nil
}

// extract writes the tar stream r, with one top-level entry, at target
// (archive.ExtractAt) and gives its errors the errdefs classes CopyFrom
// reports.
func extract(ctx context.Context, r io.Reader, target string) error {
	err := archive.ExtractAt(ctx, r, target)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, archive.ErrEmpty):
		// The engine sent nothing for the path.
		return errdefs.Class(err, errdefs.ErrNotFound)
	case errors.Is(err, archive.ErrBad):
		return errdefs.Class(err, errdefs.ErrInvalid)
	}
	return localErr(err)
}

// localErr classes an error from the local file system.
func localErr(err error) error { return errdefs.FromOS(err) }

// copyToErr classes the engine's answer to a copy into a container. A tree
// copied onto a file comes back as a plain error ("cannot overwrite
// non-directory ... with directory ..."); like the local executor, call it
// a conflict.
func copyToErr(err error) error {
	if strings.Contains(err.Error(), "cannot overwrite") {
		return errdefs.Class(err, errdefs.ErrConflict)
	}
	return dockerengine.Classify(err)
}
