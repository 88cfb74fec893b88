package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/humantime"
	"github.com/spf13/cobra"
)

// printJSON writes v as indented JSON, for scripts (--json).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// output prints v as JSON for scripts, or with print for people.
func output[T any](e *env, asJSON bool, v T, print func(*env, T)) error {
	if asJSON {
		return printJSON(e.stdout, v)
	}
	print(e, v)
	return nil
}

// showCmd is a command that shows one thing of the server's, named by its
// one argument: fetch reads it, print prints it for people, --json as the
// API's JSON. fetch takes the client first, so that a method expression
// such as (*client.Client).Node serves.
func showCmd[T any](e *env, use, short string, fetch func(c *client.Client, ctx context.Context, ref string) (T, error), print func(*env, T)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := fetch(clientFor(cmd, e), cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return output(e, asJSON, v, print)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// table writes aligned columns for humans.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }
func (t *table) flush() error       { return t.tw.Flush() }

// ago renders a past time relative to now: "4s ago", "3m ago", "never".
func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return humantime.Ago(*t, now)
}

// bytesIEC renders a size in binary units: "15.6 GiB".
func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func expires(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	if t.Before(now) {
		return "expired"
	}
	return t.Format(time.RFC3339)
}
