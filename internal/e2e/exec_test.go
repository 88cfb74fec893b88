package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestExecCp runs commands on, and copies files to and from, a container of
// the docker provider and the host of the local provider, through the CLI
// and one server, then checks what is refused.
func TestExecCp(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng) // removes the containers when the test ends
	var labelKey, labelValue string
	for k, v := range testLabels {
		labelKey, labelValue = k, v
	}
	s := startServer(t)
	dir := t.TempDir()
	suffix := labelValue[len(labelValue)-8:]

	for name, img := range map[string]string{"exec-box": image, "exec-broken": "no-such-image:1"} {
		tmpl := filepath.Join(dir, name+".yaml")
		os.WriteFile(tmpl, []byte(fmt.Sprintf("name: %s\nimage: busybox:stable\noverrides:\n  docker:\n    image: %q\n    labels: {%q: %q}\n",
			name, img, labelKey, labelValue)), 0o600)
		if out, errOut, code := s.run(t, "template", "apply", "-f", tmpl); code != 0 {
			t.Fatalf("template apply %s: %s%s", name, out, errOut)
		}
	}
	dockerNode, localNode, broken := "exec-docker-"+suffix, "exec-local-"+suffix, "exec-broken-"+suffix
	for _, p := range []struct{ template, provider, name string }{
		{"exec-box", "docker", dockerNode}, {"exec-box", "local", localNode},
	} {
		if out, errOut, code := s.run(t, "provision", "--template", p.template, "--provider", p.provider, "--name", p.name); code != 0 {
			t.Fatalf("provision %s: exit %d: %s%s", p.name, code, out, errOut)
		}
	}
	if out, errOut, code := s.run(t, "provision", "--template", "exec-broken", "--provider", "docker", "--name", broken); code == 0 {
		t.Fatalf("provision with a missing image succeeded: %s%s", out, errOut)
	}

	t.Run("docker", func(t *testing.T) { testExecCp(t, s, dockerNode, "/tmp/e2e-"+suffix) })
	t.Run("local", func(t *testing.T) { testExecCp(t, s, localNode, t.TempDir()) })

	// The server unpacks uploads itself: nothing may land outside the
	// copy, by name or through a link.
	t.Run("hostile archives", func(t *testing.T) {
		outside, dst := t.TempDir(), t.TempDir()
		for _, tc := range []struct {
			name    string
			entries []tar.Header
		}{
			{"parent", []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg}}},
			{"absolute", []tar.Header{{Name: outside + "/evil", Typeflag: tar.TypeReg}}},
			{"dot-dot inside", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "top/../../evil", Typeflag: tar.TypeReg}}},
			{"second top", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "other/evil", Typeflag: tar.TypeReg}}},
			{"through a link", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755},
				{Name: "top/out", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "top/out/evil", Typeflag: tar.TypeReg}}},
			{"hard link out", []tar.Header{{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755},
				{Name: "top/evil", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var buf bytes.Buffer
				tw := tar.NewWriter(&buf)
				for _, h := range tc.entries {
					if h.Mode == 0 {
						h.Mode = 0o644
					}
					tw.WriteHeader(&h)
				}
				tw.Close()
				err := s.client().DoRaw(context.Background(), "PUT", "/v1/deployments/"+localNode+"/files?path="+url.QueryEscape(dst+"/"), "application/x-tar", buf.Bytes(), nil)
				var ce *client.Error
				if !errors.As(err, &ce) || ce.Status != 400 {
					t.Errorf("PUT of a hostile archive: %v; want a 400", err)
				}
				for _, dir := range []string{outside, dst, filepath.Dir(dst)} {
					if _, err := os.Lstat(filepath.Join(dir, "evil")); err == nil {
						t.Errorf("%s/evil was written", dir)
					}
				}
			})
		}
	})

	t.Run("refused", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "f")
		os.WriteFile(file, []byte("x"), 0o600)
		for _, tc := range []struct {
			name     string
			args     []string
			wantCode int
			want     []string // in stderr
		}{
			{"exec unknown node", []string{"exec", "no-such-node", "--", "true"}, 255, []string{`"no-such-node"`, "deployment ls"}},
			{"cp to unknown node", []string{"cp", file, "no-such-node:/tmp/f"}, 1, []string{`"no-such-node"`}},
			{"cp from unknown node", []string{"cp", "no-such-node:/tmp/f", file}, 1, []string{`"no-such-node"`}},
			{"exec without the capability", []string{"exec", broken, "--", "true"}, 255, []string{broken, "no executor", "exec:docker"}},
			{"cp without the capability", []string{"cp", file, broken + ":/tmp/f"}, 1, []string{broken, "no executor"}},
			// The command line is wrong: 2, before anything runs.
			{"exec without a command", []string{"exec", dockerNode}, 2, []string{"-- CMD"}},
			{"cp between two nodes", []string{"cp", dockerNode + ":/etc/passwd", localNode + ":/tmp/passwd"}, 2, []string{"both"}},
			{"cp with no node", []string{"cp", file, file + "2"}, 2, []string{"NODE:PATH", "./"}},
			{"cp to a relative path", []string{"cp", file, dockerNode + ":tmp/f"}, 1, []string{"path", "absolute"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, errOut, code := s.run(t, tc.args...)
				if code != tc.wantCode {
					t.Errorf("%v: exit %d, want %d; stdout %q stderr %q", tc.args, code, tc.wantCode, out, errOut)
				}
				for _, w := range tc.want {
					if !strings.Contains(errOut, w) {
						t.Errorf("%v: stderr %q, want it to say %q", tc.args, errOut, w)
					}
				}
			})
		}
	})
}

// testExecCp drives exec and cp against node, using remote, an absolute
// directory on it that need not exist yet.
func testExecCp(t *testing.T, s *server, node, remote string) {
	for _, tc := range []struct {
		name             string
		stdin            string
		args             []string
		wantOut, wantErr string
		wantCode         int
		wantErrContains  string // instead of wantErr
		anyStdout        bool
	}{
		{name: "echo", args: []string{"echo", "hello", "world"}, wantOut: "hello world\n"},
		{name: "streams and exit code", args: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, wantOut: "out\n", wantErr: "err\n", wantCode: 7},
		{name: "stdin", stdin: "line one\nline two\n", args: []string{"cat"}, wantOut: "line one\nline two\n"},
		{name: "env and workdir", args: []string{"--env", "GREETING=hi there", "--workdir", "/", "--", "sh", "-c", `echo "$GREETING"; pwd`}, wantOut: "hi there\n/\n"},
		// The engine also says why on stdout.
		{name: "missing program", args: []string{"no-such-program-e2e"}, wantCode: 255, wantErrContains: "no-such-program-e2e", anyStdout: true},
		{name: "timeout", args: []string{"--timeout", "300ms", "--", "sleep", "10"}, wantCode: 255, wantErrContains: "timed out"},
		// Programs that cannot start are 255 too, as the help promises,
		// never a code a command could have exited with.
		{name: "not executable", args: []string{"/etc/hostname"}, wantCode: 255, wantErrContains: "/etc/hostname", anyStdout: true},
		{name: "a directory", args: []string{"/"}, wantCode: 255, wantErrContains: "exec /", anyStdout: true},
		{name: "missing workdir", args: []string{"--workdir", "/no-such-dir-e2e", "--", "true"}, wantCode: 255, wantErrContains: "no-such-dir-e2e", anyStdout: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"exec", node}, tc.args...)
			if !strings.HasPrefix(tc.args[0], "--") {
				args = append([]string{"exec", node, "--"}, tc.args...)
			}
			start := time.Now()
			out, errOut, code := s.runStdin(t, tc.stdin, args...)
			if code != tc.wantCode || (out != tc.wantOut && !tc.anyStdout) {
				t.Errorf("%v: exit %d, stdout %q; want exit %d, stdout %q (stderr %q)", args, code, out, tc.wantCode, tc.wantOut, errOut)
			}
			if tc.wantErrContains == "" && errOut != tc.wantErr {
				t.Errorf("%v: stderr %q, want %q", args, errOut, tc.wantErr)
			}
			if !strings.Contains(errOut, tc.wantErrContains) {
				t.Errorf("%v: stderr %q, want it to say %q", args, errOut, tc.wantErrContains)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%v took %v", args, d)
			}
		})
	}

	// Output is streamed as written, not gathered until the command ends.
	t.Run("streams as written", func(t *testing.T) {
		var mu sync.Mutex
		var first time.Time
		stdout := writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if first.IsZero() {
				first = time.Now()
			}
			return len(p), nil
		})
		code, err := s.client().Exec(context.Background(), node, api.ExecRequest{Argv: []string{"sh", "-c", "echo first; sleep 1; echo second"}}, stdout, nil)
		end := time.Now()
		if err != nil || code != 0 {
			t.Fatalf("Exec = %d, %v", code, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() || end.Sub(first) < 700*time.Millisecond {
			t.Errorf("first output came %v before the exit, want about 1s: not streamed", end.Sub(first))
		}
	})

	t.Run("cp file and tree", func(t *testing.T) {
		local := t.TempDir()
		tree := filepath.Join(local, "tree")
		for _, f := range []struct {
			name, body string
			mode       fs.FileMode
		}{
			{"a.txt", "alpha\n", 0o640},
			{"bin/run.sh", "#!/bin/sh\necho ran \"$1\"\n", 0o755},
			{"sub/deeper/b.txt", "beta\n", 0o600},
			{"empty", "", 0o644},
		} {
			p := filepath.Join(tree, f.name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, f.mode)
		}
		os.Chmod(filepath.Join(tree, "sub"), 0o750)
		os.Symlink("a.txt", filepath.Join(tree, "link"))
		one := filepath.Join(local, "one.txt")
		os.WriteFile(one, []byte("one\n"), 0o604)
		os.Chmod(one, 0o604)

		run := func(args ...string) string {
			t.Helper()
			out, errOut, code := s.run(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s%s", args, code, out, errOut)
			}
			return out
		}
		run("cp", tree, node+":"+remote+"/tree")
		run("cp", one, node+":"+remote+"/into/")
		// The executable mode made it: the script runs where it landed.
		if out := run("exec", node, "--", remote+"/tree/bin/run.sh", "there"); out != "ran there\n" {
			t.Errorf("copied script said %q, want %q", out, "ran there\n")
		}
		if out := run("exec", node, "--", "cat", remote+"/into/one.txt"); out != "one\n" {
			t.Errorf("copied file holds %q, want %q", out, "one\n")
		}

		back := filepath.Join(local, "back")
		run("cp", node+":"+remote+"/tree", back+"/")
		run("cp", node+":"+remote+"/into/one.txt", back+"/one-again.txt")
		if diff := cmp.Diff(executetest.Listing(t, tree), executetest.Listing(t, filepath.Join(back, "tree"))); diff != "" {
			t.Errorf("tree after a round trip (-sent +received):\n%s", diff)
		}
		if diff := cmp.Diff(executetest.Listing(t, one), executetest.Listing(t, filepath.Join(back, "one-again.txt"))); diff != "" {
			t.Errorf("file after a round trip (-sent +received):\n%s", diff)
		}

		if _, errOut, code := s.run(t, "cp", node+":"+remote+"/no-such-file", back+"/"); code == 0 || !strings.Contains(errOut, "no-such-file") {
			t.Errorf("cp of a missing file: exit %d, %q; want an error naming it", code, errOut)
		}
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// runStdin is run with stdin given to the command.
func (s *server) runStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return s.runWith(t, "", stdin, args...)
}
