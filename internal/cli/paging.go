package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/client"
)

// defaultListLimit is how many rows an ls shows without --limit: the most
// one page may hold. A longer list ends with a hint on stderr that says
// how to see the rest, so a table never stops short without saying so.
const defaultListLimit = client.MaxPageLimit

// pageFlags are the paging flags of every ls command.
type pageFlags struct {
	limit   int
	after   string
	all     bool
	allName string
}

// add registers --limit, --after and the flag that fetches every page,
// named allName (--all, unless the command uses --all for something else).
func (f *pageFlags) add(cmd *cobra.Command, allName string) {
	f.allName = allName
	cmd.Flags().IntVar(&f.limit, "limit", defaultListLimit, fmt.Sprintf("show at most this many, 1 to %d (the page size with --%s)", client.MaxPageLimit, allName))
	cmd.Flags().StringVar(&f.after, "after", "", "start after this cursor: the next page a previous ls printed")
	cmd.Flags().BoolVar(&f.all, allName, false, "fetch every page, however long the list")
}

// list reads what the flags ask for: one page, or with all every page from
// the cursor on. next is where the rows shown stop ("" at the end).
func list[T any](ctx context.Context, f pageFlags, page func(context.Context, client.Page) ([]T, string, error)) (rows []T, next string, err error) {
	if f.limit < 1 || f.limit > client.MaxPageLimit {
		return nil, "", usagef("--limit must be from 1 to %d, got %d; use --%s to see every page", client.MaxPageLimit, f.limit, f.allName)
	}
	p := client.Page{Limit: f.limit, After: f.after}
	if !f.all {
		return page(ctx, p)
	}
	rows = []T{}
	for {
		items, next, err := page(ctx, p)
		if err != nil {
			return nil, "", err
		}
		rows = append(rows, items...)
		if next == "" || next == p.After {
			return rows, "", nil
		}
		p.After = next
	}
}

// moreHint tells people, on stderr so that scripts reading the table are
// not disturbed, that the table is one page of a longer list.
func (f pageFlags) moreHint(e *env, shown int, next string) {
	if next == "" {
		return
	}
	// The cursor stands between spaces, so that it copies cleanly.
	fmt.Fprintf(e.stderr, "showing %d; there are more: --%s shows every page, --after %s the next\n", shown, f.allName, next)
}

// lsCmd makes cmd (its Use, Short, Args and own flags set) an ls of the
// server's: it reads the pages the paging flags ask for with page (the
// client first, so that a method expression such as
// (*client.Client).UsersPage serves), and prints their rows with table,
// or with --json as the API's list (body makes it of the rows and the
// next cursor), with a hint on stderr when more pages follow. allName is
// the flag that fetches every page.
func lsCmd[T any, L interface{ Page() ([]T, string) }](e *env, cmd *cobra.Command, allName string,
	page func(c *client.Client, ctx context.Context, p client.Page) (L, error),
	body func(rows []T, next string) any,
	table func(e *env, rows []T) error) *cobra.Command {
	var asJSON bool
	var pf pageFlags
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c := clientFor(cmd, e)
		rows, next, err := list(cmd.Context(), pf, func(ctx context.Context, p client.Page) ([]T, string, error) {
			l, err := page(c, ctx, p)
			rows, next := l.Page()
			return rows, next, err
		})
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(e.stdout, body(rows, next))
		}
		defer pf.moreHint(e, len(rows), next)
		return table(e, rows)
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	pf.add(cmd, allName)
	return cmd
}
