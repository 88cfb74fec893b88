package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/spf13/cobra"
)

// TestExitCodes: 0 done, 1 the operation failed, 2 the command line is
// wrong, as nodemgr --help says (issue 31 item 11: task submit without a
// command exited 1, container deploy of a job that failed at once 0).
func TestExitCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode([]api.Container{{Job: api.ContainerJob{ID: "c-1", Name: "fails"}, Status: api.ContainerFailed}})
	}))
	defer srv.Close()
	vars := map[string]string{"NODEMGR_ADDR": srv.URL, "NODEMGR_TOKEN": "nmu_test"}
	job := writeFile(t, "job.yaml", "name: fails\nimage: busybox\ncommand: [\"false\"]\n")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"task", "submit", "--suite", "s"}, exitUsage},
		{[]string{"task", "submit", "--", "true"}, exitUsage},
		{[]string{"task", "submit", "--suite", "s", "-f", job, "--", "true"}, exitUsage},
		{[]string{"task", "ls"}, exitUsage},
		{[]string{"suite", "ls", "--limit", "0"}, exitUsage},
		{[]string{"exec", "n-1"}, exitUsage},
		{[]string{"exec", "n-1", "--env", "NOEQUALS", "--", "true"}, exitUsage},
		{[]string{"cp", "a", "b"}, exitUsage},
		{[]string{"cp", "n-1:a", "n-2:b"}, exitUsage},
		{[]string{"container", "deploy", "n-1", "-f", job}, 1},
		{[]string{"container", "deploy", "n-1", "-f", job, "--json"}, 1},
	} {
		if code, _, stderr := runEnv(t, vars, tc.args...); code != tc.want {
			t.Errorf("nodemgr %v = exit %d (%s), want %d", tc.args, code, stderr, tc.want)
		}
	}
}

// TestExitCodeRuleOverEveryCommand holds every command of the tree to the
// rule: --help exits 0; an unknown flag, or an unknown subcommand of a
// command that groups others, exits 2; and a command given arguments of
// the right shape against a server that cannot be reached fails (1, or 2
// when it wants more than placeholders), never 0, and returns.
func TestExitCodeRuleOverEveryCommand(t *testing.T) {
	// Commands that run on their own, not against a server: they start a
	// daemon or a long job (skipped), or work offline (0 is right).
	daemons := map[string]bool{"nodemgr server": true, "nodemgr agent": true, "nodemgr dev": true,
		"nodemgr worker": true, "nodemgr bench": true, "nodemgr rsync-relay": true}
	offline := map[string]bool{"nodemgr completion": true, "nodemgr version": true, "nodemgr help": true}
	var paths [][]string
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, c := range cmd.Commands() {
			walk(c, append(slices.Clone(path), c.Name()))
		}
	}
	walk(newRoot(&env{getenv: func(string) string { return "" }}), nil)
	if len(paths) < 50 {
		t.Fatalf("walked %d commands, want the whole tree", len(paths))
	}
	closed := map[string]string{"NODEMGR_ADDR": "http://127.0.0.1:9", "NODEMGR_TOKEN": "nmu_test"}
	for _, path := range paths {
		name := strings.Join(append([]string{"nodemgr"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			if code, _, stderr := runEnv(t, closed, append(path, "--help")...); code != 0 {
				t.Errorf("%s --help = exit %d (%s), want 0", name, code, stderr)
			}
			cmd := findCommand(t, path)
			if cmd.HasSubCommands() {
				if code, _, stderr := runEnv(t, closed, append(path, "no-such-command")...); code != exitUsage {
					t.Errorf("%s no-such-command = exit %d (%s), want %d", name, code, stderr, exitUsage)
				}
			}
			if len(path) == 0 || !cmd.Runnable() {
				return
			}
			if code, _, stderr := runEnv(t, closed, append(path, "--no-such-flag")...); code != exitUsage {
				t.Errorf("%s --no-such-flag = exit %d (%s), want %d", name, code, stderr, exitUsage)
			}
			if daemons["nodemgr "+path[0]] || offline[name] || cmd.HasSubCommands() {
				return
			}
			args := placeholders(cmd)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			code, _, stderr := runEnvCtx(ctx, closed, append(path, args...)...)
			if ctx.Err() != nil {
				t.Fatalf("%s %v against an unreachable server did not return in 20s", name, args)
			}
			if code == 0 {
				t.Errorf("%s %v against an unreachable server = exit 0, want a failure (stderr: %s)", name, args, stderr)
			}
		})
	}
}

// findCommand is the command at path in a fresh tree.
func findCommand(t *testing.T, path []string) *cobra.Command {
	t.Helper()
	cmd, _, err := newRoot(&env{getenv: func(string) string { return "" }}).Find(path)
	if err != nil {
		t.Fatalf("find %v: %v", path, err)
	}
	return cmd
}

// placeholders are the fewest arguments (up to three) that cmd's Args
// accepts; a command that needs a "--" part gets "-- true".
func placeholders(cmd *cobra.Command) []string {
	for n := range 4 {
		args := make([]string, n)
		for i := range args {
			args[i] = fmt.Sprintf("x%d", i)
		}
		if cmd.Args == nil || cmd.Args(cmd, args) == nil {
			if strings.Contains(cmd.Use, " -- ") {
				return append(args, "--", "true")
			}
			return args
		}
	}
	return nil
}

// runEnvCtx is runEnv with a context.
func runEnvCtx(ctx context.Context, environ map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, rawStdout: &out, rawStderr: &errb,
		getenv: func(k string) string { return environ[k] }}
	code = run(ctx, e, args)
	return code, out.String(), errb.String()
}
