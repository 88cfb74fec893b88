package storetest

// For the schema the suite pins down (NewerSchema): a store refuses to
// open a database that a newer nodemgr migrated beyond the newest
// migration this binary knows, as errdefs.ErrConflict, saying "the store is
// at migration N, this binary knows up to M; upgrade nodemgr or restore a
// backup"; the refusal changes nothing; the same database opens again once
// it is back at a version the binary knows.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// NewerSchema runs the schema check against one backend. open opens a
// store on the same database each time it is called; db reaches that
// database beneath the store, as goose's bookkeeping table
// (goose_db_version) is kept in both backends.
func NewerSchema(t *testing.T, open func(context.Context) (store.Store, error), db *sql.DB) {
	ctx := t.Context()
	s, err := open(ctx)
	if err != nil {
		t.Fatalf("open a new store = %v, want nil", err)
	}
	RegisterNodes(t, s, "n1")
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}

	var known int64
	if err := db.QueryRowContext(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&known); err != nil {
		t.Fatalf("read the schema version: %v", err)
	}
	// What a newer nodemgr leaves: its next migration, applied.
	newer := known + 1
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (%d, true)`, newer)); err != nil {
		t.Fatalf("record migration %d: %v", newer, err)
	}
	before := readSchemaState(t, db)

	s, err = open(ctx)
	if err == nil {
		s.Close()
		t.Fatalf("open a store at migration %d, beyond this binary's %d = nil error, want a refusal", newer, known)
	}
	want := fmt.Sprintf("the store is at migration %d, this binary knows up to %d; upgrade nodemgr or restore a backup", newer, known)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.HasSuffix(errdefs.Message(err), want) {
		t.Errorf("open a store at migration %d = %v, want an errdefs.ErrConflict ending %q", newer, err, want)
	}
	if diff := cmp.Diff(before, readSchemaState(t, db)); diff != "" {
		t.Errorf("the refused open changed the database (-before +after):\n%s", diff)
	}

	// Back at a version it knows (the backup restored), the store opens.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM goose_db_version WHERE version_id = %d`, newer)); err != nil {
		t.Fatalf("forget migration %d: %v", newer, err)
	}
	s, err = open(ctx)
	if err != nil {
		t.Fatalf("open at migration %d again = %v, want nil", known, err)
	}
	defer s.Close()
	if _, err := s.GetNode(ctx, "n1"); err != nil {
		t.Errorf("GetNode(%q) after the refusal = %v, want nil", "n1", err)
	}
}

// schemaState is what an open could change: goose's record of the
// migrations, and the rows of a table they made.
type schemaState struct {
	Migrations []appliedMigration
	Nodes      []string
}

type appliedMigration struct {
	ID, Version int64
	Applied     bool
}

func readSchemaState(t *testing.T, db *sql.DB) schemaState {
	t.Helper()
	ctx := t.Context()
	var st schemaState
	rows, err := db.QueryContext(ctx, `SELECT id, version_id, is_applied FROM goose_db_version ORDER BY id`)
	if err != nil {
		t.Fatalf("read goose_db_version: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m appliedMigration
		if err := rows.Scan(&m.ID, &m.Version, &m.Applied); err != nil {
			t.Fatalf("read goose_db_version: %v", err)
		}
		st.Migrations = append(st.Migrations, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read goose_db_version: %v", err)
	}
	nodes, err := db.QueryContext(ctx, `SELECT id FROM nodes ORDER BY id`)
	if err != nil {
		t.Fatalf("read nodes: %v", err)
	}
	defer nodes.Close()
	for nodes.Next() {
		var id string
		if err := nodes.Scan(&id); err != nil {
			t.Fatalf("read nodes: %v", err)
		}
		st.Nodes = append(st.Nodes, id)
	}
	if err := nodes.Err(); err != nil {
		t.Fatalf("read nodes: %v", err)
	}
	return st
}
