package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, rawStdout: &out, rawStderr: &errb,
		getenv: func(string) string { return "" }}
	code = run(context.Background(), e, args)
	return code, out.String(), errb.String()
}

// TestUnknownCommandIsAUsageError: a mistyped subcommand exits 2 with what
// was wrong and a suggestion, at every level, instead of help and 0.
func TestUnknownCommandIsAUsageError(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"lifecycle", "suspend", "d1"}, `error: unknown command "suspend" for "nodemgr lifecycle"; did you mean hibernate?`},
		{[]string{"lifecycle", "strat", "d1"}, `error: unknown command "strat" for "nodemgr lifecycle"; did you mean start?`},
		{[]string{"node", "lss"}, `error: unknown command "lss" for "nodemgr node"; did you mean ls?`},
		{[]string{"lifecycle", "explode"}, `error: unknown command "explode" for "nodemgr lifecycle" (see nodemgr lifecycle --help)`},
		{[]string{"nodes"}, `error: unknown command "nodes" for "nodemgr"; did you mean node?`},
		{[]string{"lifecycle", "start"}, `error: nodemgr lifecycle start: accepts 1 arg(s), received 0 (usage: nodemgr lifecycle start DEPLOYMENT [flags])`},
		{[]string{"node", "ls", "--bogus"}, `error: unknown flag: --bogus (see nodemgr node ls --help)`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tc.args...)
			if code != exitUsage || strings.TrimSpace(stderr) != tc.want {
				t.Errorf("nodemgr %q = exit %d, stderr %q; want exit %d, %q", tc.args, code, stderr, exitUsage, tc.want)
			}
			if stdout != "" {
				t.Errorf("nodemgr %q printed %q on stdout; want nothing", tc.args, stdout)
			}
		})
	}
}

// TestEveryParentRefusesUnknownSubcommands walks the whole tree: each
// command that groups subcommands exits 2 on an unknown one, and prints its
// help with 0 when given none.
func TestEveryParentRefusesUnknownSubcommands(t *testing.T) {
	root := newRoot(&env{getenv: func(string) string { return "" }})
	var parents [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() {
			parents = append(parents, path)
		}
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(root, nil)
	if len(parents) < 10 {
		t.Fatalf("found %d parent commands; the walk is broken", len(parents))
	}
	for _, p := range parents {
		code, _, stderr := runArgs(t, append(p, "no-such-verb")...)
		want := `unknown command "no-such-verb" for "` + strings.TrimSpace("nodemgr "+strings.Join(p, " ")) + `"`
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("nodemgr %s no-such-verb = exit %d, %q; want exit 2 and %q", strings.Join(p, " "), code, stderr, want)
		}
		code, stdout, _ := runArgs(t, p...)
		if code != 0 || !strings.Contains(stdout, "Usage:") {
			t.Errorf("nodemgr %s = exit %d, stdout %q; want its help and 0", strings.Join(p, " "), code, stdout)
		}
	}
}

// TestProvisionCountIsChecked: --count 0 used to make one machine (0 is
// "absent" on the wire); any count outside 1..100 is refused before the
// server is asked.
func TestProvisionCountIsChecked(t *testing.T) {
	for _, count := range []string{"0", "-1", "101"} {
		code, _, stderr := runArgs(t, "provision", "--template", "t", "--provider", "local", "--count", count, "--addr", "http://127.0.0.1:1")
		want := "error: count: must be between 1 and 100, got " + count
		if code != exitUsage || strings.TrimSpace(stderr) != want {
			t.Errorf("provision --count %s = exit %d, %q; want exit 2, %q", count, code, stderr, want)
		}
	}
}
