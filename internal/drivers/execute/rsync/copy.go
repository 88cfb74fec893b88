package rsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/archive"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/ssh"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// Stats is what one copy transferred, from rsync --stats.
type Stats struct {
	Files int   // regular files sent: 0 when nothing changed
	Bytes int64 // their total size
}

// Exit codes of the check scripts.
const (
	exitMissing  = 2
	exitConflict = 3
	exitParent   = 4
	exitNoRsync  = 5
)

// pushCheck checks the machine's side of a copy to $1 ($2: d for a tree,
// f for anything else) and makes its parent $3.
const pushCheck = `t=$1 p=$3
if [ "$2" = d ]; then
	if [ -L "$t" ] || { [ -e "$t" ] && [ ! -d "$t" ]; }; then echo "$t exists and is not a directory" >&2; exit 3; fi
elif [ -d "$t" ]; then
	echo "a directory is in the way at $t (end dst with / to copy into it)" >&2; exit 3
fi
command -v rsync >/dev/null 2>&1 || exit 5
umask 022
mkdir -p -- "$p" || exit 4`

// pullCheck checks the source $1 of a copy from the machine and says
// whether it is a tree (d) or not (f).
const pullCheck = `[ -e "$1" ] || [ -L "$1" ] || { echo "$1 does not exist" >&2; exit 2; }
command -v rsync >/dev/null 2>&1 || exit 5
if [ -d "$1" ] && [ ! -L "$1" ]; then echo d; else echo f; fi`

// CopyTo copies the local file or tree src to dst on d (see the package
// doc for the path rule).
func (r *Rsync) CopyTo(ctx context.Context, d provision.Deployment, src, dst string) error {
	_, err := r.CopyToStats(ctx, d, src, dst)
	return err
}

// CopyToStats is CopyTo, saying what was transferred.
func (r *Rsync) CopyToStats(ctx context.Context, d provision.Deployment, src, dst string) (Stats, error) {
	if err := execute.Check(r, d); err != nil {
		return Stats{}, err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return Stats{}, err
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return Stats{}, fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, dst, errdefs.FromOS(err))
	}
	target, err := ssh.RemoteTarget(dst, filepath.Base(abs))
	if err != nil {
		return Stats{}, err
	}
	kind, from, to := "f", abs, hostAlias+":"+target
	if fi.IsDir() {
		// The tree's content goes into target itself.
		kind, from, to = "d", abs+"/", to+"/"
	}
	if _, err := r.check(ctx, d, pushCheck, target, kind, path.Dir(target)); err != nil {
		return Stats{}, fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, err)
	}
	st, err := r.run(ctx, d, from, to)
	if err != nil {
		return Stats{}, fmt.Errorf("copy %s to %s:%s: %w", src, d.Name, target, err)
	}
	return st, nil
}

// CopyFrom copies the file or tree src on d to the local path dst (see
// the package doc for the path rule).
func (r *Rsync) CopyFrom(ctx context.Context, d provision.Deployment, src, dst string) error {
	_, err := r.CopyFromStats(ctx, d, src, dst)
	return err
}

// CopyFromStats is CopyFrom, saying what was transferred.
func (r *Rsync) CopyFromStats(ctx context.Context, d provision.Deployment, src, dst string) (Stats, error) {
	if err := execute.Check(r, d); err != nil {
		return Stats{}, err
	}
	srcPath, err := ssh.RemoteSource(src)
	if err != nil {
		return Stats{}, err
	}
	target, err := filepath.Abs(archive.Target(dst, path.Base(srcPath)))
	if err != nil {
		return Stats{}, err
	}
	wrap := func(err error) error { return fmt.Errorf("copy %s:%s to %s: %w", d.Name, srcPath, target, err) }
	kind, err := r.check(ctx, d, pullCheck, srcPath)
	if err != nil {
		return Stats{}, wrap(err)
	}
	tree := strings.TrimSpace(kind) == "d"
	// What is in the way is found before anything is written.
	if lfi, err := os.Lstat(target); err == nil {
		switch {
		case tree && !lfi.IsDir():
			return Stats{}, wrap(errdefs.Conflict("%s exists and is not a directory", target))
		case !tree && lfi.IsDir():
			return Stats{}, wrap(errdefs.Conflict("a directory is in the way at %s (end dst with / to copy into it)", target))
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return Stats{}, wrap(errdefs.FromOS(err))
	}
	from, to := hostAlias+":"+srcPath, target
	if tree {
		from, to = from+"/", to+"/"
	}
	st, err := r.run(ctx, d, from, to)
	if err != nil {
		return Stats{}, wrap(err)
	}
	return st, nil
}

// check runs a check script on d over the ssh executor's connection and
// returns what it prints.
func (r *Rsync) check(ctx context.Context, d provision.Deployment, script string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	code, err := r.ssh.Run(ctx, d, execute.Command{Argv: argv, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return "", err
	}
	msg := strings.TrimSpace(stderr.String())
	switch code {
	case 0:
		return stdout.String(), nil
	case exitMissing:
		return "", errdefs.Class(errors.New(msg), errdefs.ErrNotFound)
	case exitConflict:
		return "", errdefs.Class(errors.New(msg), errdefs.ErrConflict)
	case exitNoRsync:
		return "", fmt.Errorf("%s has no rsync; install it there, or copy with the sftp or ssh executor: %w", d.Name, errdefs.ErrInvalid)
	case exitParent:
		return "", classify(fmt.Sprintf("make the parent directory: %s", msg))
	}
	return "", fmt.Errorf("check the machine's side: exit code %d: %s", code, msg)
}

// hostAlias is the machine in rsync's HOST:PATH: the relay knows the
// machine from its socket, and rsync never has to spell a user, a port or
// an IPv6 address.
const hostAlias = "nodemgr-target"

// run runs rsync from src to dst, one of them on d (hostAlias), its
// remote shell the relay.
func (r *Rsync) run(ctx context.Context, d provision.Deployment, src, dst string) (Stats, error) {
	x, sock, err := r.listen(d)
	if err != nil {
		return Stats{}, err
	}
	go x.serve(ctx)
	cmd := exec.CommandContext(ctx, r.rsync, "-rlpt", "-s", "--stats", "-e", r.rsh+" "+sock, "--", src, dst)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	ownGroup(cmd)
	err = cmd.Run()
	// What kept the machine's side from running says more than rsync,
	// which saw its connection close.
	relayErr := x.close()
	switch {
	case ctx.Err() != nil:
		return Stats{}, ctx.Err()
	case err != nil && relayErr != nil:
		return Stats{}, relayErr
	case err != nil:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return Stats{}, fmt.Errorf("run rsync: %w", err)
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return Stats{}, classify(fmt.Sprintf("rsync (exit %d): %s", ee.ExitCode(), msg))
	}
	return parseStats(stdout.String()), nil
}

var (
	filesRe = regexp.MustCompile(`(?m)^Number of regular files transferred: ([\d,.]+)`)
	bytesRe = regexp.MustCompile(`(?m)^Total transferred file size: ([\d,.]+)`)
)

// parseStats reads rsync --stats output.
func parseStats(out string) Stats {
	num := func(re *regexp.Regexp) int64 {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.NewReplacer(",", "", ".", "").Replace(m[1]), 10, 64)
		return n
	}
	return Stats{Files: int(num(filesRe)), Bytes: num(bytesRe)}
}

// classify gives an error reported as text its class.
func classify(msg string) error {
	err := errors.New(msg)
	switch {
	case strings.Contains(msg, "No such file or directory"):
		return errdefs.Class(err, errdefs.ErrNotFound)
	case strings.Contains(msg, "Not a directory"), strings.Contains(msg, "File exists"), strings.Contains(msg, "Is a directory"):
		return errdefs.Class(err, errdefs.ErrConflict)
	case strings.Contains(msg, "Permission denied"), strings.Contains(msg, "Operation not permitted"):
		return errdefs.Class(err, errdefs.ErrPermission)
	case strings.Contains(msg, "No space left"), strings.Contains(msg, "Disk quota exceeded"):
		return errdefs.Class(err, errdefs.ErrStorageFull)
	case strings.Contains(msg, "Connection refused"), strings.Contains(msg, "timed out"), strings.Contains(msg, "Connection closed"),
		strings.Contains(msg, "connection unexpectedly closed"), strings.Contains(msg, "Could not resolve"):
		return errdefs.Class(err, errdefs.ErrUnavailable)
	}
	return err
}
