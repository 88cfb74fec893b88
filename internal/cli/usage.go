package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// exitUsage is the exit code of a command line that nodemgr cannot parse:
// an unknown command, a bad flag, the wrong number of arguments (the
// shells' and getopt's convention).
const exitUsage = 2

// usageError is a command line that cannot run as written. Main prints it
// and exits with exitUsage, so a script can tell a typo from a failure.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef is a usageError: a flag's value or an argument that cannot be
// right whatever the server holds.
func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

// strictUsage makes every command of the tree refuse what it does not
// know, instead of printing help and succeeding:
//   - a command with subcommands and no action of its own refuses an
//     unknown subcommand with a suggestion (cobra does this only for the
//     root), and prints its help when given none;
//   - argument-count and flag errors become usage errors.
func strictUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
	})
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		// cobra defaults the distance only where it suggests by itself
		// (the root); SuggestionsFor on any other command needs it set.
		cmd.SuggestionsMinimumDistance = 2
		switch {
		case cmd.HasSubCommands() && !cmd.Runnable():
			cmd.Args = unknownSubcommand
			cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		case cmd.Args != nil:
			args := cmd.Args
			cmd.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &usageError{fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())}
				}
				return nil
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(root)
}

// unknownSubcommand refuses any argument of a command that only groups
// subcommands, with cobra's own wording and suggestions.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	} else {
		msg += fmt.Sprintf(" (see %s --help)", cmd.CommandPath())
	}
	return &usageError{fmt.Errorf("%s", msg)}
}
