package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// CompletionScript writes the shell completion script of shell (bash,
// zsh, fish) that the Debian package installs: the same as `nodemgr
// completion SHELL`.
func CompletionScript(shell string, w io.Writer) error {
	var errb strings.Builder
	e := &env{stdin: strings.NewReader(""), stdout: w, stderr: &errb, rawStdout: w, rawStderr: &errb,
		getenv: func(string) string { return "" }}
	if code := run(context.Background(), e, []string{"completion", shell}); code != 0 {
		return fmt.Errorf("completion %s: %s", shell, strings.TrimSpace(errb.String()))
	}
	return nil
}
