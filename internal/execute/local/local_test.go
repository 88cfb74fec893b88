package local_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/execute"
	"github.com/nodemgr/nodemgr/internal/execute/local"
	"github.com/nodemgr/nodemgr/internal/provision"
	plocal "github.com/nodemgr/nodemgr/internal/provision/local"
)

// host returns the executor and the host as the local provider hands it out.
func host(t *testing.T) (*local.Local, provision.Deployment) {
	t.Helper()
	p, _ := plocal.New(nil)
	d, err := p.Provision(context.Background(), provision.Spec{Name: "host"})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return local.New(), d
}

func TestExec(t *testing.T) {
	e, d := host(t)
	t.Setenv("NODEMGR_TEST_OUTER", "outer")
	dir := t.TempDir()
	tests := []struct {
		name   string
		cmd    execute.Command
		code   int
		stdout string
		stderr string
	}{
		{name: "echo", cmd: execute.Command{Argv: []string{"echo", "hello", "world"}}, stdout: "hello world\n"},
		{name: "exit 3", cmd: execute.Command{Argv: []string{"sh", "-c", "exit 3"}}, code: 3},
		{name: "killed by SIGTERM", cmd: execute.Command{Argv: []string{"sh", "-c", "kill -TERM $$"}}, code: 128 + 15},
		{name: "killed by SIGKILL", cmd: execute.Command{Argv: []string{"sh", "-c", "kill -KILL $$"}}, code: 128 + 9},
		{name: "stdout and stderr apart", cmd: execute.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}}, stdout: "out\nout2\n", stderr: "err\n"},
		{name: "stdin", cmd: execute.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("piped\nin\n")}, stdout: "piped\nin\n"},
		{name: "env added and overriding", cmd: execute.Command{Argv: []string{"sh", "-c", `echo "$FOO|$NODEMGR_TEST_OUTER"`}, Env: []string{"FOO=bar", "NODEMGR_TEST_OUTER=inner"}}, stdout: "bar|inner\n"},
		{name: "environment inherited", cmd: execute.Command{Argv: []string{"sh", "-c", `echo "$NODEMGR_TEST_OUTER"`}}, stdout: "outer\n"},
		{name: "dir", cmd: execute.Command{Argv: []string{"pwd"}, Dir: dir}, stdout: dir + "\n"},
		// Waited for briefly, not until the background sleep ends.
		{name: "background process keeps output open", cmd: execute.Command{Argv: []string{"sh", "-c", "echo started; sleep 4 & echo done"}}, stdout: "started\ndone\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			tc.cmd.Stdout, tc.cmd.Stderr = &stdout, &stderr
			code, err := e.Exec(context.Background(), d, tc.cmd)
			if err != nil {
				t.Fatalf("Exec(%q) = %v", tc.cmd.Argv, err)
			}
			if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("Exec(%q) = %d, stdout %q, stderr %q; want %d, %q, %q", tc.cmd.Argv, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestExecErrors(t *testing.T) {
	e, d := host(t)
	docker := provision.Deployment{Name: "c", Provider: "docker", ResourceID: "abc", Executors: []string{"exec:docker", "copy:docker"}}
	tests := []struct {
		name  string
		dep   provision.Deployment
		cmd   execute.Command
		class error
	}{
		{"no argv", d, execute.Command{}, errdefs.ErrInvalid},
		{"program not found", d, execute.Command{Argv: []string{"nodemgr-no-such-program"}}, errdefs.ErrNotFound},
		{"no such dir", d, execute.Command{Argv: []string{"true"}, Dir: "/no/such/dir"}, errdefs.ErrNotFound},
		{"not a local deployment", docker, execute.Command{Argv: []string{"true"}}, errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, err := e.Exec(context.Background(), tc.dep, tc.cmd)
			if !errors.Is(err, tc.class) || code != -1 {
				t.Errorf("Exec(%q) = %d, %v; want -1 and class %v", tc.cmd.Argv, code, err, tc.class)
			}
		})
	}
	if err := e.CopyTo(context.Background(), docker, t.TempDir(), t.TempDir()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CopyTo(docker deployment) = %v, want invalid", err)
	}
	if err := e.CopyFrom(context.Background(), docker, t.TempDir(), t.TempDir()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CopyFrom(docker deployment) = %v, want invalid", err)
	}
}

// gone reports whether pid has exited (a zombie counts).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func TestExecCutOff(t *testing.T) {
	e, d := host(t)
	tests := []struct {
		name   string
		cancel bool
		want   error
	}{
		{"timeout", false, context.DeadlineExceeded},
		{"cancelled", true, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			cmd := execute.Command{Argv: []string{"sh", "-c", "sleep 301 & echo $! > " + pidfile + "; sleep 302"}}
			ctx := context.Background()
			if tc.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				time.AfterFunc(300*time.Millisecond, cancel)
			} else {
				cmd.Timeout = 300 * time.Millisecond
			}
			start := time.Now()
			code, err := e.Exec(ctx, d, cmd)
			if !errors.Is(err, tc.want) || code != -1 {
				t.Fatalf("Exec = %d, %v; want -1, %v", code, err, tc.want)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("Exec returned after %v", el)
			}
			b, err := os.ReadFile(pidfile)
			if err != nil {
				t.Fatalf("read pid: %v", err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			deadline := time.Now().Add(5 * time.Second)
			for !gone(pid) {
				if time.Now().After(deadline) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("background process %d of the group outlived the cut-off", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// tree makes a small tree with assorted modes and links under dir/name.
func tree(t *testing.T, dir, name string) string {
	t.Helper()
	root := filepath.Join(dir, name)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, f := range []struct {
		name string
		mode fs.FileMode
		body string
	}{
		{"run.sh", 0o755, "#!/bin/sh\necho run\n"},
		{"secret", 0o600, "s3cret"},
		{"sub/data.txt", 0o640, "data\n"},
		{"sub/deeper/empty", 0o644, ""},
	} {
		p := filepath.Join(root, f.name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
		os.Chtimes(p, mtime, mtime)
	}
	os.MkdirAll(filepath.Join(root, "emptydir"), 0o700)
	os.Chmod(filepath.Join(root, "emptydir"), 0o700)
	os.Chmod(filepath.Join(root, "sub"), 0o750)
	os.Symlink("sub/data.txt", filepath.Join(root, "rel-link"))
	os.Symlink("/etc/hostname", filepath.Join(root, "abs-link"))
	os.Symlink("missing", filepath.Join(root, "dangling"))
	return root
}

// listing describes a tree: path → mode, mtime of files, and content or
// link target.
func listing(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + fi.ModTime().UTC().Format(time.RFC3339) + " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

func TestCopy(t *testing.T) {
	e, d := host(t)
	ctx := context.Background()
	src := tree(t, t.TempDir(), "tree")
	want := listing(t, src)

	for _, tc := range []struct {
		name string
		copy func(src, dst string) error
	}{{"CopyTo", func(s, dst string) error { return e.CopyTo(ctx, d, s, dst) }}, {"CopyFrom", func(s, dst string) error { return e.CopyFrom(ctx, d, s, dst) }}} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			// A tree, to an exact path with missing parents.
			if err := tc.copy(src, filepath.Join(out, "a", "b", "copy")); err != nil {
				t.Fatalf("copy tree: %v", err)
			}
			if diff := cmp.Diff(want, listing(t, filepath.Join(out, "a", "b", "copy"))); diff != "" {
				t.Errorf("copied tree (-want +got):\n%s", diff)
			}
			// Again, onto itself: merged, same result.
			if err := tc.copy(src, filepath.Join(out, "a", "b", "copy")); err != nil {
				t.Fatalf("copy tree again: %v", err)
			}
			if diff := cmp.Diff(want, listing(t, filepath.Join(out, "a", "b", "copy"))); diff != "" {
				t.Errorf("tree copied twice (-want +got):\n%s", diff)
			}
			// A file, into a directory.
			if err := tc.copy(filepath.Join(src, "sub", "data.txt"), out+"/"); err != nil {
				t.Fatalf("copy file: %v", err)
			}
			if got := listing(t, filepath.Join(out, "data.txt"))["."]; got != want["sub/data.txt"] {
				t.Errorf("copied file = %q, want %q", got, want["sub/data.txt"])
			}
			// A link stays a link.
			if err := tc.copy(filepath.Join(src, "abs-link"), filepath.Join(out, "l")); err != nil {
				t.Fatalf("copy link: %v", err)
			}
			if l, err := os.Readlink(filepath.Join(out, "l")); err != nil || l != "/etc/hostname" {
				t.Errorf("copied link -> %q, %v", l, err)
			}
		})
	}

	errs := []struct {
		name     string
		src, dst string
		class    error
	}{
		{"missing src", filepath.Join(src, "nope"), t.TempDir() + "/x", errdefs.ErrNotFound},
		{"file onto a dir", filepath.Join(src, "secret"), src + "/sub", errdefs.ErrConflict},
		{"tree onto a file", src, filepath.Join(src, "secret"), errdefs.ErrInvalid},
		{"tree onto another file", filepath.Join(src, "sub"), filepath.Join(src, "..", "tree", "run.sh"), errdefs.ErrConflict},
		{"tree into itself", src, filepath.Join(src, "sub", "inner"), errdefs.ErrInvalid},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.CopyTo(ctx, d, tc.src, tc.dst); !errors.Is(err, tc.class) {
				t.Errorf("CopyTo(%s, %s) = %v, want class %v", tc.src, tc.dst, err, tc.class)
			}
		})
	}
	if diff := cmp.Diff(want, listing(t, src)); diff != "" {
		t.Errorf("failed copies changed the source (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	e := local.New()
	if e.Name() != "local" || e.Capability() != "exec:local" {
		t.Errorf("Name, Capability = %q, %q; want local, exec:local", e.Name(), e.Capability())
	}
}
