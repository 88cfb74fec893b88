package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

//go:generate go run gen_reference.go

// Reference writes docs/cli.md: every command's --help, in the order of
// the command tree, and every help topic. Each page is what `nodemgr
// CMD --help` prints with nothing set in the environment, so the
// reference cannot drift from the help; TestReferenceFresh keeps the
// file equal to it.
func Reference(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("# nodemgr command reference\n\n")
	b.WriteString("Generated from the command tree by `go generate ./internal/cli`; do not edit.\n")
	b.WriteString("Each section is what `nodemgr COMMAND --help` prints. The guides in this\n")
	b.WriteString("directory tell how the commands work together.\n\n")

	root := newRoot(referenceEnv(io.Discard))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(root)

	b.WriteString("## Contents\n\n")
	for _, c := range cmds {
		indent := strings.Repeat("  ", strings.Count(c.CommandPath(), " "))
		fmt.Fprintf(&b, "%s- [%s](#%s)\n", indent, c.CommandPath(), anchor(c.CommandPath()))
	}
	b.WriteString("- [help topics](#help-topics)\n")

	for _, c := range cmds {
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		text, err := referenceRun(args)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n## %s\n\n```text\n%s```\n", c.CommandPath(), text)
	}

	b.WriteString("\n## help topics\n\nConcepts that span several commands: `nodemgr help TOPIC`.\n")
	for _, name := range topicNames() {
		text, err := referenceRun([]string{"help", name})
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n### %s\n\n```text\n%s```\n", name, text)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// referenceEnv is a command's world with nothing set: no token, no
// address, no input, so help shows the defaults everyone gets.
func referenceEnv(out io.Writer) *env {
	return &env{stdin: strings.NewReader(""), stdout: out, stderr: out, rawStdout: out, rawStderr: out,
		getenv: func(string) string { return "" }}
}

// referenceRun runs one command line and returns what it printed.
func referenceRun(args []string) (string, error) {
	var out bytes.Buffer
	if code := run(context.Background(), referenceEnv(&out), args); code != 0 {
		return "", fmt.Errorf("nodemgr %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(out.String()))
	}
	s := out.String()
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s, nil
}

// anchor is the id GitHub gives a heading: lower case, spaces as dashes,
// punctuation other than - and _ dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
