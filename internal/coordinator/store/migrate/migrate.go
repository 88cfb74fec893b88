// Package migrate copies a SQLite coordinator's state into an empty
// PostgreSQL database (`nodemgr migrate-store`), table by table, and
// verifies the copy: each table's row count and a checksum of its rows,
// read back from both sides.
//
// The two schemas hold the same tables and columns, in the encodings
// each store documents; the copy converts each value to the PostgreSQL
// column's type (text to BYTEA for what processes printed, 0/1 to
// boolean). What only PostgreSQL has is filled in: an identity column
// that stands for SQLite's implicit rowid (suites.seq, tasks.seq) takes
// the rowid, so order is kept, and suite_counts rows go to shard 0.
//
// The source is read in one transaction (a snapshot) and the target is
// written in one: a copy that fails or does not verify leaves the target
// as empty as it was. Stop the server before copying, or what it writes
// after the snapshot is lost.
package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is what was copied of one table.
type Table struct {
	Name     string `json:"name"`
	Rows     int64  `json:"rows"`
	Checksum string `json:"checksum"` // hex, order-independent, equal on both sides
}

// Report lists the tables copied, in the order they were written.
type Report struct {
	Tables []Table `json:"tables"`
}

// skipped are tables that are not state: the migration tools' own, the
// health probe's scratch row, the leader lease (the old server's would
// keep the new replicas waiting for it to expire), and the nodes'
// and overlay revisions, counters that only tell running servers their
// copy of the nodes or the overlay is stale (the target's own triggers
// move them as rows are copied).
var skipped = map[string]bool{"goose_db_version": true, "goose_lock": true, "leases": true, "sqlite_sequence": true, "health_probe": true,
	"node_revision": true, "overlay_revision": true}

// derived are tables that triggers fill as the tables they index are
// written: task_files, from tasks. They are not copied (the copy would
// clash with what the triggers wrote) but verified like the others, last,
// so a trigger that indexed the copy differently fails it.
var derived = map[string]bool{"task_files": true}

// column is a target column and how to fill it.
type column struct {
	name     string
	pgType   string // information_schema data_type
	identity bool
	source   string // the SQLite column it comes from; "" when filled in
}

// Copy copies every table of src (a SQLite store's database) into dst (a
// PostgreSQL store's, migrated to the same version and empty), then
// verifies counts and checksums; progress, when not nil, hears of each
// table as it is done.
func Copy(ctx context.Context, src *sql.DB, dst *pgx.Conn, progress func(Table)) (Report, error) {
	var rep Report
	if err := sameVersion(ctx, src, dst); err != nil {
		return rep, err
	}
	order, err := tablesInOrder(ctx, dst)
	if err != nil {
		return rep, err
	}
	rtx, err := src.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return rep, fmt.Errorf("read the SQLite store: %w", err)
	}
	defer rtx.Rollback()
	wtx, err := dst.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("write the PostgreSQL store: %w", err)
	}
	defer wtx.Rollback(ctx)
	for _, table := range order {
		t, err := copyTable(ctx, rtx, wtx, table)
		if err != nil {
			return rep, fmt.Errorf("table %s: %w", table, err)
		}
		rep.Tables = append(rep.Tables, t)
		if progress != nil {
			progress(t)
		}
	}
	if err := wtx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("commit the copy: %w", err)
	}
	return rep, nil
}

// sameVersion checks that both schemas are at one migration version.
func sameVersion(ctx context.Context, src *sql.DB, dst *pgx.Conn) error {
	const q = `SELECT max(version_id) FROM goose_db_version WHERE is_applied`
	var from, to int64
	if err := src.QueryRowContext(ctx, q).Scan(&from); err != nil {
		return fmt.Errorf("read the SQLite store's schema version: %w", err)
	}
	if err := dst.QueryRow(ctx, q).Scan(&to); err != nil {
		return fmt.Errorf("read the PostgreSQL store's schema version: %w", err)
	}
	if from != to {
		return fmt.Errorf("the SQLite store is at schema version %d and the PostgreSQL store at %d: open each with this nodemgr once (a server start migrates it), then copy", from, to)
	}
	return nil
}

// tablesInOrder lists the target's tables so that each comes after the
// tables its foreign keys name.
func tablesInOrder(ctx context.Context, dst *pgx.Conn) ([]string, error) {
	rows, err := dst.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	rows, err = dst.Query(ctx, `SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint
		WHERE contype = 'f' AND connamespace = current_schema()::regnamespace`)
	if err != nil {
		return nil, err
	}
	needs := map[string][]string{}
	for rows.Next() {
		var t, ref string
		if err := rows.Scan(&t, &ref); err != nil {
			return nil, err
		}
		if t != ref {
			needs[t] = append(needs[t], ref)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var order []string
	done := map[string]bool{}
	var visit func(t string, depth int) error
	visit = func(t string, depth int) error {
		if done[t] || skipped[t] {
			return nil
		}
		if depth > len(tables) {
			return fmt.Errorf("the foreign keys of table %s make a cycle", t)
		}
		for _, ref := range needs[t] {
			if err := visit(ref, depth+1); err != nil {
				return err
			}
		}
		done[t] = true
		order = append(order, t)
		return nil
	}
	for _, t := range tables {
		if err := visit(t, 0); err != nil {
			return nil, err
		}
	}
	// Derived tables are checked once what fills them is copied.
	slices.SortStableFunc(order, func(a, b string) int {
		switch {
		case derived[a] == derived[b]:
			return 0
		case derived[a]:
			return 1
		}
		return -1
	})
	return order, nil
}

// copyTable copies one table and checks it.
func copyTable(ctx context.Context, src *sql.Tx, dst pgx.Tx, table string) (Table, error) {
	cols, err := columnsOf(ctx, src, dst, table)
	if err != nil {
		return Table{}, err
	}
	var n int64
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		return Table{}, err
	}
	if n > 0 && !derived[table] {
		return Table{}, fmt.Errorf("the PostgreSQL store holds %d rows already; copy into a new, empty database", n)
	}
	rows, err := readSource(ctx, src, table, cols)
	if err != nil {
		return Table{}, err
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	copied := int64(len(rows))
	if !derived[table] {
		if copied, err = dst.CopyFrom(ctx, pgx.Identifier{table}, names, pgx.CopyFromRows(rows)); err != nil {
			return Table{}, fmt.Errorf("write %d rows: %w", len(rows), err)
		}
		if err := resetIdentities(ctx, dst, table, cols); err != nil {
			return Table{}, err
		}
	}
	want := checksum(rows)
	got, count, err := targetChecksum(ctx, dst, table, names)
	if err != nil {
		return Table{}, err
	}
	if count != int64(len(rows)) || copied != int64(len(rows)) || got != want {
		return Table{}, fmt.Errorf("the copy does not verify: %d rows read, %d written, %d read back; checksum %s, read back %s", len(rows), copied, count, want, got)
	}
	return Table{Name: table, Rows: count, Checksum: got}, nil
}

// columnsOf lists the target table's columns with where each comes from.
func columnsOf(ctx context.Context, src *sql.Tx, dst pgx.Tx, table string) ([]column, error) {
	srcCols := map[string]bool{}
	rows, err := src.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, err
		}
		srcCols[name] = true
	}
	rows.Close()
	if len(srcCols) == 0 {
		return nil, errors.New("the SQLite store has no such table")
	}
	prow, err := dst.Query(ctx, `SELECT column_name, data_type, is_identity = 'YES', column_default IS NOT NULL OR is_nullable = 'YES'
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	defer prow.Close()
	var cols []column
	for prow.Next() {
		var c column
		var optional bool
		if err := prow.Scan(&c.name, &c.pgType, &c.identity, &optional); err != nil {
			return nil, err
		}
		switch {
		case srcCols[c.name]:
			c.source = c.name
		case c.identity:
			c.source = "rowid" // it stands for SQLite's implicit rowid
		case optional:
			continue // its default serves
		case table == "suite_counts" && c.name == "shard":
			c.source = "0"
		default:
			return nil, fmt.Errorf("column %s is in the PostgreSQL store only and has no default: this nodemgr cannot copy it", c.name)
		}
		cols = append(cols, c)
	}
	return cols, prow.Err()
}

// readSource reads the table's rows from SQLite, each value converted to
// its target column's type.
func readSource(ctx context.Context, src *sql.Tx, table string, cols []column) ([][]any, error) {
	exprs := make([]string, len(cols))
	order := "" // a WITHOUT ROWID table has none; order matters only to a rowid's copy
	for i, c := range cols {
		exprs[i] = `"` + c.source + `"`
		switch c.source {
		case "rowid":
			exprs[i], order = c.source, " ORDER BY rowid"
		case "0":
			exprs[i] = c.source
		}
	}
	rows, err := src.QueryContext(ctx, `SELECT `+strings.Join(exprs, ", ")+` FROM "`+table+`"`+order)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, c := range cols {
			v, err := convert(vals[i], c.pgType)
			if err != nil {
				return nil, fmt.Errorf("column %s: %w", c.name, err)
			}
			vals[i] = v
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

// convert turns a SQLite value into what pgx writes to a column of type t.
func convert(v any, t string) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch t {
	case "bytea":
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		}
	case "boolean":
		if x, ok := v.(int64); ok {
			return x != 0, nil
		}
	case "text", "character varying":
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case "bigint", "integer", "smallint":
		if x, ok := v.(int64); ok {
			return x, nil
		}
	case "double precision", "real", "numeric":
		switch x := v.(type) {
		case float64:
			return x, nil
		case int64:
			return float64(x), nil
		}
	default:
		return v, nil
	}
	return nil, fmt.Errorf("a %T (%v) does not fit a %s column", v, v, t)
}

// resetIdentities moves each identity column's sequence past the values
// copied, so new rows do not collide with them.
func resetIdentities(ctx context.Context, dst pgx.Tx, table string, cols []column) error {
	for _, c := range cols {
		if !c.identity {
			continue
		}
		q := fmt.Sprintf(`SELECT setval(pg_get_serial_sequence($1, $2), COALESCE((SELECT max(%s) FROM %s), 0) + 1, false)`,
			pgx.Identifier{c.name}.Sanitize(), pgx.Identifier{table}.Sanitize())
		if _, err := dst.Exec(ctx, q, table, c.name); err != nil {
			return fmt.Errorf("reset the sequence of %s: %w", c.name, err)
		}
	}
	return nil
}

// targetChecksum reads the table back and sums its rows.
func targetChecksum(ctx context.Context, dst pgx.Tx, table string, names []string) (string, int64, error) {
	idents := make([]string, len(names))
	for i, n := range names {
		idents[i] = pgx.Identifier{n}.Sanitize()
	}
	rows, err := dst.Query(ctx, `SELECT `+strings.Join(idents, ", ")+` FROM `+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return "", 0, err
	}
	vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		return "", 0, err
	}
	return checksum(vals), int64(len(vals)), nil
}

// checksum is the XOR of each row's SHA-256 over its values in a
// canonical text form: independent of row order, equal for equal rows
// whichever side read them.
func checksum(rows [][]any) string {
	var sum [sha256.Size]byte
	for _, row := range rows {
		h := sha256.New()
		for _, v := range row {
			fmt.Fprintf(h, "%s\x00", canonical(v))
		}
		for i, b := range h.Sum(nil) {
			sum[i] ^= b
		}
	}
	return fmt.Sprintf("%x", sum[:8])
}

// canonical writes a value as both drivers read it back alike.
func canonical(v any) string {
	switch x := v.(type) {
	case nil:
		return "\x01null"
	case []byte:
		return "b:" + string(x)
	case string:
		return "s:" + x
	case int64, int32, int16, int:
		return fmt.Sprintf("i:%d", x)
	case float64:
		return fmt.Sprintf("f:%v", x)
	case float32:
		return fmt.Sprintf("f:%v", float64(x))
	case bool:
		return fmt.Sprintf("t:%v", x)
	}
	return fmt.Sprintf("?:%v", v)
}
