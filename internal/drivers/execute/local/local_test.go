package local_test

import (
	"bytes"
	"context"
	"errors"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/executetest"
	"github.com/nodemgr/nodemgr/internal/drivers/execute/local"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	plocal "github.com/nodemgr/nodemgr/internal/drivers/provision/local"
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

func TestConformance(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	executetest.Run(t, func(t *testing.T) executetest.Target {
		e, d := host(t)
		// Commands get nodemgr's environment, but for its own settings.
		t.Setenv("LOCAL_TEST_OUTER", "outer")
		return executetest.Target{Executor: e, Deployment: d, User: u.Username, Env: "LOCAL_TEST_OUTER=outer"}
	})
}

// TestExecBackgroundOutput checks that output a background process holds
// open after the command exits is waited for briefly, not until the
// background sleep ends.
func TestExecBackgroundOutput(t *testing.T) {
	e, d := host(t)
	cmd := execute.Command{Argv: []string{"sh", "-c", "echo started; sleep 4 & echo done"}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code, err := e.Exec(context.Background(), d, cmd)
	if err != nil {
		t.Fatalf("Exec(%q) = %v", cmd.Argv, err)
	}
	if code != 0 || stdout.String() != "started\ndone\n" || stderr.String() != "" {
		t.Errorf("Exec(%q) = %d, stdout %q, stderr %q; want 0, %q, %q", cmd.Argv, code, stdout.String(), stderr.String(), "started\ndone\n", "")
	}
}

// TestCopyErrors holds the failed copies the suite leaves out: into its
// own source, which only a copy within one host can do, and a tree onto a
// file, which the docker executor reports with the engine's error
// unclassed.
func TestCopyErrors(t *testing.T) {
	e, d := host(t)
	src := executetest.Tree(t, t.TempDir(), "tree")
	want := executetest.Listing(t, src)
	tests := []struct {
		name, src, dst string
		class          error
	}{
		{"tree onto a file", src, filepath.Join(src, "secret"), errdefs.ErrInvalid},
		{"tree onto another file", filepath.Join(src, "sub"), filepath.Join(src, "..", "tree", "run.sh"), errdefs.ErrConflict},
		{"tree into itself", src, filepath.Join(src, "sub", "inner"), errdefs.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.CopyTo(context.Background(), d, tc.src, tc.dst); !errors.Is(err, tc.class) {
				t.Errorf("CopyTo(%s, %s) = %v, want class %v", tc.src, tc.dst, err, tc.class)
			}
		})
	}
	if diff := cmp.Diff(want, executetest.Listing(t, src)); diff != "" {
		t.Errorf("failed copies changed the source (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	e := local.New()
	if e.Name() != "local" || e.Capability() != "exec:local" {
		t.Errorf("Name, Capability = %q, %q; want local, exec:local", e.Name(), e.Capability())
	}
}

// nodemgr's own settings hold its secrets; a command on the host does not
// get them.
func TestExecHidesNodemgrSettings(t *testing.T) {
	t.Setenv("NODEMGR_TOKEN", "nmu_secret")
	t.Setenv("NODEMGR_JOIN_TOKEN", "nmj_secret")
	e, d := host(t)
	var stdout bytes.Buffer
	cmd := execute.Command{Argv: []string{"env"}, Stdout: &stdout}
	if code, err := e.Exec(context.Background(), d, cmd); code != 0 || err != nil {
		t.Fatalf("Exec(env) = %d, %v", code, err)
	}
	if strings.Contains(stdout.String(), "NODEMGR_") || !strings.Contains(stdout.String(), "PATH=") {
		t.Errorf("Exec(env) printed %q, want PATH and no NODEMGR_ variable", stdout.String())
	}
}

// TestExecCannotStart: a program that cannot start is an error (exec's
// 255), with a class and a message that names the real cause, never an
// exit code a command could have returned.
func TestExecCannotStart(t *testing.T) {
	e, d := host(t)
	dir := t.TempDir()
	tests := []struct {
		name  string
		cmd   execute.Command
		class error
		want  string
	}{
		{"missing workdir", execute.Command{Argv: []string{"true"}, Dir: dir + "/nope"}, errdefs.ErrNotFound,
			"exec true: workdir: " + dir + "/nope does not exist on the machine; create it first or choose another"},
		{"workdir is a file", execute.Command{Argv: []string{"true"}, Dir: "/etc/hostname"}, errdefs.ErrInvalid,
			"exec true: workdir: /etc/hostname is not a directory"},
		{"not a program", execute.Command{Argv: []string{"/etc/hostname"}}, errdefs.ErrInvalid, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, err := e.Exec(context.Background(), d, tc.cmd)
			if code != -1 || !errors.Is(err, tc.class) {
				t.Fatalf("Exec(%q in %q) = %d, %v; want -1 and class %v", tc.cmd.Argv, tc.cmd.Dir, code, err, tc.class)
			}
			if tc.want != "" && errdefs.Message(err) != tc.want {
				t.Errorf("Exec(%q in %q) = %q, want %q", tc.cmd.Argv, tc.cmd.Dir, errdefs.Message(err), tc.want)
			}
		})
	}
}
