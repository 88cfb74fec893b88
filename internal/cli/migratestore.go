//go:build !agentonly && !clientonly

package cli

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/migrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

func newMigrateStoreCmd(e *env) *cobra.Command {
	var from, to string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "migrate-store --from sqlite:PATH --to postgres://...",
		Short: "Copy a SQLite coordinator's state into an empty PostgreSQL database, verified",
		Long: `Copy every table of a SQLite store (the server's DATA_DIR/nodemgr.db) into a
new, empty PostgreSQL database, in one transaction, then check each table's
row count and a checksum of its rows read back from both sides. A copy that
fails or does not verify writes nothing. Both stores are first brought to
this nodemgr's schema version.

Stop the server first: what it writes after the copy starts is not copied.
Then start the replicas with --db postgres://... Keep the password out of the
URL (PGPASSWORD or ~/.pgpass).

  nodemgr migrate-store --from sqlite:/var/lib/nodemgr/nodemgr.db --to postgres://nodemgr@db1/nodemgr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, ok := strings.CutPrefix(from, "sqlite:")
			if !ok || path == "" {
				return usagef("--from must be sqlite:PATH (the server's DATA_DIR/nodemgr.db), got %q", from)
			}
			if !strings.HasPrefix(to, "postgres://") && !strings.HasPrefix(to, "postgresql://") {
				return usagef("--to must be a postgres:// URL, got %q", to)
			}
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			rep, err := migrateStore(cmd.Context(), e, path, to, !asJSON)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(e.stdout, rep)
			}
			t := newTable(e.stdout, "TABLE", "ROWS", "CHECKSUM")
			var total int64
			for _, tb := range rep.Tables {
				t.row(tb.Name, strconv.FormatInt(tb.Rows, 10), tb.Checksum)
				total += tb.Rows
			}
			if err := t.flush(); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "copied and verified %d rows in %d tables; start the server with --db %s\n", total, len(rep.Tables), redactURL(to))
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite store: sqlite:PATH")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database: postgres://USER@HOST/DB (new and empty)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the per-table report as JSON")
	cmd.MarkFlagRequired("from")
	cmd.MarkFlagRequired("to")
	return cmd
}

// migrateStore migrates both schemas to this version, then copies.
func migrateStore(ctx context.Context, e *env, path, dbURL string, progress bool) (migrate.Report, error) {
	src, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		return migrate.Report{}, fmt.Errorf("open the SQLite store: %w", err)
	}
	src.Close()
	dst, err := postgres.Open(ctx, dbURL, nil)
	if err != nil {
		return migrate.Report{}, fmt.Errorf("open the PostgreSQL store: %w", err)
	}
	dst.Close()
	sdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return migrate.Report{}, err
	}
	defer sdb.Close()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return migrate.Report{}, fmt.Errorf("connect to %s: %w", redactURL(dbURL), err)
	}
	defer conn.Close(ctx)
	start := time.Now()
	var note func(migrate.Table)
	if progress {
		note = func(t migrate.Table) {
			fmt.Fprintf(e.stderr, "copied %-18s %8d rows (%s)\n", t.Name, t.Rows, time.Since(start).Round(time.Millisecond))
		}
	}
	rep, err := migrate.Copy(ctx, sdb, conn, note)
	if err != nil {
		return rep, fmt.Errorf("migrate-store: %w; nothing was written to the PostgreSQL database", err)
	}
	return rep, nil
}
