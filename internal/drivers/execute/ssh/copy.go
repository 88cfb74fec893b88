package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// RemoteTarget is where a copy of something named name lands on a
// machine for dst under the executors' rule: dst itself, or dst/name when
// dst ends in "/". It refuses a dst that would replace the machine's
// root or login directory.
func RemoteTarget(dst, name string) (string, error) {
	if dst == "" {
		return "", errdefs.Field("dst", "is empty; name the path on the machine")
	}
	t := path.Clean(dst)
	if strings.HasSuffix(dst, "/") {
		t = path.Join(t, name)
	}
	if t == "/" || t == "." || t == ".." || strings.HasPrefix(t, "../") {
		return "", errdefs.Field("dst", "%q cannot be replaced by a copy; name a path under it", dst)
	}
	return t, nil
}

// Exit codes of the copy scripts, besides tar's own.
const (
	exitMissing  = 2 // the source is not there
	exitConflict = 3 // something else is in the way
	exitParent   = 4 // the parent could not be made or entered
	exitNoTar    = 5
)

// copyToScript unpacks a tar stream on stdin at $1, after checking what
// is there: $2 is d for a tree, f for anything else; $3 is $1's parent.
// Missing parents are made 0755; with umask 0, tar gives every entry its
// mode from the stream, and -o leaves it to the login user.
const copyToScript = `t=$1 p=$3
if [ "$2" = d ]; then
	if [ -L "$t" ] || { [ -e "$t" ] && [ ! -d "$t" ]; }; then echo "$t exists and is not a directory" >&2; exit 3; fi
elif [ -d "$t" ]; then
	echo "a directory is in the way at $t (end dst with / to copy into it)" >&2; exit 3
fi
command -v tar >/dev/null 2>&1 || exit 5
umask 022
mkdir -p -- "$p" && cd -- "$p" || exit 4
umask 0
exec tar -x -o -f -`

// copyFromScript writes $1 as a tar stream on stdout, its one top-level
// entry ./$3, from $1's parent $2.
const copyFromScript = `[ -e "$1" ] || [ -L "$1" ] || { echo "$1 does not exist" >&2; exit 2; }
command -v tar >/dev/null 2>&1 || exit 5
cd -- "$2" || exit 4
exec tar -c -f - "./$3"`

// CopyTo copies the local file or tree src to dst on d (see the package
// doc for the path rule).
func (e *SSH) CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error {
	if err := execute.Check(e, d); err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, dst, errdefs.FromOS(err))
	}
	target, err := RemoteTarget(dst, filepath.Base(src))
	if err != nil {
		return err
	}
	t, err := e.Target(d)
	if err != nil {
		return err
	}
	kind := "f"
	if fi.IsDir() {
		kind = "d"
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := archive.Write(ctx, pw, src, path.Base(target))
		pw.CloseWithError(err)
		written <- err
	}()
	var stderr tailBuffer
	code, err := e.script(ctx, t, copyToScript, []string{target, kind, path.Dir(target)}, pr, nil, &stderr)
	pr.CloseWithError(errCopyEnded)
	if werr := <-written; werr != nil && !errors.Is(werr, errCopyEnded) && !errors.Is(werr, io.ErrClosedPipe) {
		// Reading src failed: that, not the machine's view of a cut
		// stream, is the cause.
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, errdefs.FromOS(werr))
	}
	if err == nil && code != 0 {
		err = scriptErr(code, stderr.String(), d)
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, err)
	}
	return nil
}

var errCopyEnded = errors.New("copy ended")

// CopyFrom copies the file or tree src on d to the local path dst (see
// the package doc for the path rule).
func (e *SSH) CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error {
	if err := execute.Check(e, d); err != nil {
		return err
	}
	srcPath, err := RemoteSource(src)
	if err != nil {
		return err
	}
	t, err := e.Target(d)
	if err != nil {
		return err
	}
	target := archive.Target(dst, path.Base(srcPath))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	var stderr tailBuffer
	go func() {
		code, err := e.script(ctx, t, copyFromScript, []string{srcPath, path.Dir(srcPath), path.Base(srcPath)}, nil, pw, &stderr)
		pw.Close()
		done <- result{code, err}
	}()
	xerr := archive.ExtractAt(ctx, pr, target)
	if xerr == nil {
		// tar pads its stream past the end of the archive.
		io.Copy(io.Discard, pr)
	} else {
		// Stop the sender: what it still has goes nowhere.
		cancel()
		pr.CloseWithError(xerr)
	}
	r := <-done
	switch {
	case r.err == nil && r.code != 0:
		xerr = scriptErr(r.code, stderr.String(), d)
	case xerr != nil:
		xerr = extractErr(xerr)
	case r.err != nil:
		xerr = r.err
	}
	if xerr != nil {
		return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, xerr)
	}
	return nil
}

// RemoteSource checks and cleans the path of what is copied from a
// machine.
func RemoteSource(src string) (string, error) {
	if src == "" {
		return "", errdefs.Field("src", "is empty; name the path on the machine")
	}
	p := path.Clean(src)
	if p == "/" || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", errdefs.Field("src", "%q cannot be copied whole; name a path under it", src)
	}
	return p, nil
}

// script runs a shell script with args on t, with the streams given.
func (e *SSH) script(ctx context.Context, t Target, script string, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	line, err := commandLine(argv, nil, "")
	if err != nil {
		return -1, err
	}
	return e.run(ctx, t, line, execute.Command{Argv: argv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// scriptErr classes a copy script's failure.
func scriptErr(code int, stderr string, d provision.Deployment) error {
	msg := strings.TrimSpace(stderr)
	switch code {
	case exitMissing:
		return errdefs.Class(errors.New(msg), errdefs.ErrNotFound)
	case exitConflict:
		return errdefs.Class(errors.New(msg), errdefs.ErrConflict)
	case exitNoTar:
		return fmt.Errorf("the ssh executor copies with tar, which %s does not have; install it, or copy with the sftp or rsync executor: %w", d.Name, errdefs.ErrInvalid)
	}
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", code)
	}
	err := errors.New(msg)
	switch {
	case strings.Contains(msg, "Not a directory"), strings.Contains(msg, "File exists"), strings.Contains(msg, "Is a directory"):
		return errdefs.Class(err, errdefs.ErrConflict)
	case strings.Contains(msg, "Permission denied"), strings.Contains(msg, "Operation not permitted"):
		return errdefs.Class(err, errdefs.ErrPermission)
	case strings.Contains(msg, "No space left"), strings.Contains(msg, "Disk quota exceeded"):
		return errdefs.Class(err, errdefs.ErrStorageFull)
	case strings.Contains(msg, "No such file"):
		return errdefs.Class(err, errdefs.ErrNotFound)
	}
	return err
}

// extractErr classes a failure to unpack what a machine sent.
func extractErr(err error) error {
	switch {
	case errors.Is(err, archive.ErrEmpty):
		return errdefs.Class(err, errdefs.ErrNotFound)
	case errors.Is(err, archive.ErrBad):
		return errdefs.Class(err, errdefs.ErrInvalid)
	}
	return errdefs.FromOS(err)
}
