package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/humantime"
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
