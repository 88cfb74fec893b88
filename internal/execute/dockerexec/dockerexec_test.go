package dockerexec_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/errdefs"
	"github.com/nodemgr/nodemgr/internal/execute"
	"github.com/nodemgr/nodemgr/internal/execute/dockerexec"
	"github.com/nodemgr/nodemgr/internal/provision"
	"github.com/nodemgr/nodemgr/internal/provision/docker"
	"github.com/nodemgr/nodemgr/internal/provision/docker/dockertest"
)

// node provisions a container of the test image, running as user, for
// the test, and returns it with an executor.
func node(t testing.TB, user string) (*dockerexec.Docker, provision.Deployment) {
	t.Helper()
	c := dockertest.Client(t)
	img := dockertest.EnsureImage(t, c)
	p, err := docker.New(nil)
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	extra := map[string]any{"image": img}
	if user != "" {
		extra["user"] = user
	}
	dep, err := p.Provision(context.Background(), provision.Spec{Name: dockertest.Name(t), Labels: dockertest.Labels(t, c), Extra: extra})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), dep) })
	e, err := dockerexec.New(nil)
	if err != nil {
		t.Fatalf("dockerexec.New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dep
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run execs argv and returns its exit code and output.
func run(t testing.TB, e *dockerexec.Docker, d provision.Deployment, cmd execute.Command) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code, err := e.Exec(ctxFor(t), d, cmd)
	if err != nil {
		t.Fatalf("Exec(%q) = %v (stdout %q, stderr %q)", cmd.Argv, err, stdout.String(), stderr.String())
	}
	return code, stdout.String(), stderr.String()
}

func TestExec(t *testing.T) {
	e, d := node(t, "nodemgr")
	tests := []struct {
		name   string
		cmd    execute.Command
		code   int
		stdout string
		stderr string
	}{
		{name: "echo", cmd: execute.Command{Argv: []string{"echo", "hello", "world"}}, stdout: "hello world\n"},
		{name: "true", cmd: execute.Command{Argv: []string{"true"}}},
		{name: "exit 3", cmd: execute.Command{Argv: []string{"sh", "-c", "exit 3"}}, code: 3},
		{name: "exit 255", cmd: execute.Command{Argv: []string{"sh", "-c", "exit 255"}}, code: 255},
		{name: "killed by SIGKILL", cmd: execute.Command{Argv: []string{"sh", "-c", "kill -KILL $$"}}, code: 128 + 9},
		{name: "stdout and stderr apart", cmd: execute.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}}, stdout: "out\nout2\n", stderr: "err\n"},
		{name: "stdin", cmd: execute.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("piped\nin\n")}, stdout: "piped\nin\n"},
		{name: "stdin unread", cmd: execute.Command{Argv: []string{"true"}, Stdin: strings.NewReader("ignored")}},
		{name: "env", cmd: execute.Command{Argv: []string{"sh", "-c", `echo "$FOO|$BAR"`}, Env: []string{"FOO=bar", "BAR=a b"}}, stdout: "bar|a b\n"},
		{name: "dir", cmd: execute.Command{Argv: []string{"pwd"}, Dir: "/tmp"}, stdout: "/tmp\n"},
		{name: "runs as the container's user", cmd: execute.Command{Argv: []string{"id", "-un"}}, stdout: "nodemgr\n"},
		{name: "large output", cmd: execute.Command{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo 0123456789; i=$((i+1)); done"}}, stdout: strings.Repeat("0123456789\n", 20000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, e, d, tc.cmd)
			if code != tc.code {
				t.Errorf("Exec(%q) = %d, want %d", tc.cmd.Argv, code, tc.code)
			}
			if stdout != tc.stdout {
				t.Errorf("Exec(%q) stdout = %.200q, want %.200q", tc.cmd.Argv, stdout, tc.stdout)
			}
			if stderr != tc.stderr {
				t.Errorf("Exec(%q) stderr = %q, want %q", tc.cmd.Argv, stderr, tc.stderr)
			}
		})
	}
}

func TestExecErrors(t *testing.T) {
	e, d := node(t, "")
	tests := []struct {
		name  string
		dep   provision.Deployment
		cmd   execute.Command
		class error
	}{
		{"no argv", d, execute.Command{}, errdefs.ErrInvalid},
		{"program not found", d, execute.Command{Argv: []string{"/no/such/program"}}, errdefs.ErrNotFound},
		{"no such dir", d, execute.Command{Argv: []string{"true"}, Dir: "/no/such/dir"}, nil},
		{"container gone", provision.Deployment{Name: "gone", ResourceID: "0123456789ab0123456789ab", Executors: d.Executors}, execute.Command{Argv: []string{"true"}}, errdefs.ErrNotFound},
		{"no exec:docker", provision.Deployment{Name: "host", Provider: "local", ResourceID: d.ResourceID, Executors: []string{"exec:local"}}, execute.Command{Argv: []string{"true"}}, errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, err := e.Exec(ctxFor(t), tc.dep, tc.cmd)
			if err == nil {
				t.Fatalf("Exec(%q) = %d, nil; want an error", tc.cmd.Argv, code)
			}
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("Exec(%q) = %v, want class %v", tc.cmd.Argv, err, tc.class)
			}
			t.Logf("Exec(%q): %v", tc.cmd.Argv, err)
		})
	}
}

func TestExecTimeout(t *testing.T) {
	e, d := node(t, "nodemgr")
	tests := []struct {
		name   string
		cmd    execute.Command
		cancel time.Duration // cancel ctx after this instead
		want   error
	}{
		{name: "timeout", cmd: execute.Command{Argv: []string{"sleep", "300"}, Timeout: 300 * time.Millisecond}, want: context.DeadlineExceeded},
		{name: "timeout kills the group", cmd: execute.Command{Argv: []string{"sh", "-c", "sleep 301 & sleep 302; wait"}, Timeout: 300 * time.Millisecond}, want: context.DeadlineExceeded},
		{name: "cancelled", cmd: execute.Command{Argv: []string{"sleep", "303"}}, cancel: 300 * time.Millisecond, want: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(tc.cancel, cancel)
			}
			start := time.Now()
			code, err := e.Exec(ctx, d, tc.cmd)
			if !errors.Is(err, tc.want) || code != -1 {
				t.Fatalf("Exec(%q) = %d, %v; want -1, %v", tc.cmd.Argv, code, err, tc.want)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Errorf("Exec(%q) returned after %v", tc.cmd.Argv, el)
			}
			// Nothing it started may be left: poll ps with a deadline.
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, ps, _ := run(t, e, d, execute.Command{Argv: []string{"ps", "-o", "pid,args"}})
				if !strings.Contains(ps, "sleep 30") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still running after the cut-off:\n%s", ps)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// tree makes a small tree under dir/name with assorted modes and a link.
func tree(t *testing.T, dir, name string) string {
	t.Helper()
	root := filepath.Join(dir, name)
	files := []struct {
		name string
		mode fs.FileMode
		body string
	}{
		{"run.sh", 0o755, "#!/bin/sh\necho run\n"},
		{"secret", 0o600, "s3cret"},
		{"sub/data.txt", 0o640, "data\n"},
		{"sub/deeper/empty", 0o644, ""},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{"sub", 0o750}, {"emptydir", 0o700}} {
		p := filepath.Join(root, d.name)
		os.MkdirAll(p, d.mode)
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("sub/data.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	return root
}

// listing describes a local tree: path → mode and content or link target.
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
			desc += " " + string(b)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return out
}

func TestCopyTreeRoundTrip(t *testing.T) {
	e, d := node(t, "nodemgr")
	ctx := ctxFor(t)
	src := tree(t, t.TempDir(), "tree")

	// Missing parents are made; the tree lands at dst itself.
	if err := e.CopyTo(ctx, d, src, "/home/nodemgr/a/b/tree2"); err != nil {
		t.Fatalf("CopyTo: %v", err)
	}
	_, got, _ := run(t, e, d, execute.Command{Argv: []string{"sh", "-c", "cd /home/nodemgr/a/b/tree2 && find . | sort | xargs stat -c '%n %a %U'"}})
	want := strings.Join([]string{
		". 755 nodemgr", "./emptydir 700 nodemgr", "./link 777 nodemgr", "./run.sh 755 nodemgr", "./secret 600 nodemgr",
		"./sub 750 nodemgr", "./sub/data.txt 640 nodemgr", "./sub/deeper 755 nodemgr", "./sub/deeper/empty 644 nodemgr",
	}, "\n") + "\n"
	if got != want {
		t.Errorf("tree in the container:\n%s\nwant:\n%s", got, want)
	}
	if _, out, _ := run(t, e, d, execute.Command{Argv: []string{"/home/nodemgr/a/b/tree2/run.sh"}}); out != "run\n" {
		t.Errorf("copied script says %q, want run", out)
	}
	// The container's user owns what was copied in, and may write there.
	if code, _, errOut := run(t, e, d, execute.Command{Argv: []string{"touch", "/home/nodemgr/a/b/tree2/sub/new"}}); code != 0 {
		t.Errorf("touch in copied dir = %d: %s", code, errOut)
	}
	if _, out, _ := run(t, e, d, execute.Command{Argv: []string{"readlink", "/home/nodemgr/a/b/tree2/link"}}); out != "sub/data.txt\n" {
		t.Errorf("link in the container -> %q, want sub/data.txt", out)
	}
	run(t, e, d, execute.Command{Argv: []string{"rm", "/home/nodemgr/a/b/tree2/sub/new"}})

	// And back, into a directory ("/" suffix).
	back := t.TempDir()
	if err := e.CopyFrom(ctx, d, "/home/nodemgr/a/b/tree2", back+"/"); err != nil {
		t.Fatalf("CopyFrom: %v", err)
	}
	wantList := listing(t, src)
	if diff := cmp.Diff(wantList, listing(t, filepath.Join(back, "tree2"))); diff != "" {
		t.Errorf("tree after the round trip (-want +got):\n%s", diff)
	}
}

func TestCopyFile(t *testing.T) {
	e, d := node(t, "")
	ctx := ctxFor(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "agent")
	if err := os.WriteFile(src, []byte("binary"), 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chmod(src, 0o750)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	os.Chtimes(src, mtime, mtime)

	tests := []struct {
		name, dst, at string // at: where it must land in the container
	}{
		{"exact path", "/opt/nodemgr/bin/agent-1", "/opt/nodemgr/bin/agent-1"},
		{"into a dir", "/opt/nodemgr/", "/opt/nodemgr/agent"},
		{"replace a file", "/opt/nodemgr/bin/agent-1", "/opt/nodemgr/bin/agent-1"},
		{"through a link dir", "/tmp/via-link/x", "/tmp/via-link/x"},
	}
	run(t, e, d, execute.Command{Argv: []string{"sh", "-c", "mkdir -p /tmp/real && ln -s /tmp/real /tmp/via-link"}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.CopyTo(ctx, d, src, tc.dst); err != nil {
				t.Fatalf("CopyTo(%s) = %v", tc.dst, err)
			}
			_, got, _ := run(t, e, d, execute.Command{Argv: []string{"stat", "-L", "-c", "%a %s %Y", tc.at}})
			if want := "750 6 " + "1714979289\n"; got != want {
				t.Errorf("stat %s = %q, want %q", tc.at, got, want)
			}
			local := filepath.Join(t.TempDir(), "deep", "copy")
			if err := e.CopyFrom(ctx, d, tc.at, local); err != nil {
				t.Fatalf("CopyFrom(%s) = %v", tc.at, err)
			}
			fi, err := os.Stat(local)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(local)
			if fi.Mode() != 0o750 || string(b) != "binary" || !fi.ModTime().Equal(mtime) {
				t.Errorf("copied back: %v %q %v, want -rwxr-x--- \"binary\" %v", fi.Mode(), b, fi.ModTime(), mtime)
			}
		})
	}

	errs := []struct {
		name  string
		do    func() error
		class error
	}{
		{"file onto a dir", func() error { return e.CopyTo(ctx, d, src, "/opt") }, errdefs.ErrConflict},
		{"relative dst", func() error { return e.CopyTo(ctx, d, src, "opt/x") }, errdefs.ErrInvalid},
		{"parent is a file", func() error { return e.CopyTo(ctx, d, src, "/etc/passwd/x") }, errdefs.ErrConflict},
		{"missing local src", func() error { return e.CopyTo(ctx, d, filepath.Join(dir, "nope"), "/tmp/x") }, errdefs.ErrNotFound},
		{"missing remote src", func() error { return e.CopyFrom(ctx, d, "/no/such/file", filepath.Join(dir, "x")) }, errdefs.ErrNotFound},
		{"relative src", func() error { return e.CopyFrom(ctx, d, "etc/passwd", filepath.Join(dir, "x")) }, errdefs.ErrInvalid},
		{"tree onto a local file", func() error { return e.CopyFrom(ctx, d, "/etc", src) }, errdefs.ErrConflict},
		{"no exec:docker", func() error {
			return e.CopyTo(ctx, provision.Deployment{Name: "h", ResourceID: d.ResourceID, Executors: []string{"exec:local"}}, src, "/tmp/x")
		}, errdefs.ErrInvalid},
		{"no exec:docker (from)", func() error {
			return e.CopyFrom(ctx, provision.Deployment{Name: "h", ResourceID: d.ResourceID}, "/etc/passwd", filepath.Join(dir, "x"))
		}, errdefs.ErrInvalid},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil {
				t.Fatalf("%s: no error", tc.name)
			}
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("%s = %v, want class %v", tc.name, err, tc.class)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

func TestCapability(t *testing.T) {
	e, err := dockerexec.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Name() != "docker" || e.Capability() != "exec:docker" {
		t.Errorf("Name, Capability = %q, %q; want docker, exec:docker", e.Name(), e.Capability())
	}
	if err := execute.Check(e, provision.Deployment{Executors: []string{docker.CapExec, docker.CapCopy}}); err != nil {
		t.Errorf("Check(docker deployment) = %v", err)
	}
	if err := execute.Check(e, provision.Deployment{Executors: []string{"exec:local"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Check(local deployment) = %v, want invalid", err)
	}
	if _, err := dockerexec.New(map[string]string{"hots": "x"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("New(unknown setting) = %v, want invalid", err)
	}
}
