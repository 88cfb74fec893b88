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

	"github.com/nodemgr/nodemgr/api"
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

// AnAttemptIsHandedOutOnce checks the schema's own rule, apart from the
// claim's conditions: an attempt of a task already handed out cannot be
// handed out again. A return takes its attempt back, so that attempt may
// be handed out anew; any other write that moves a task's attempt back
// (here, a buggy path putting a Running task back to Ready at the attempt
// before) is refused by the database, and the task stays where it was. s
// is a new store and db reaches its database beneath it.
func AnAttemptIsHandedOutOnce(t *testing.T, s store.Store, db *sql.DB) {
	ctx := t.Context()
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "once"}}); err != nil {
		t.Fatal(err)
	}
	RegisterNodes(t, s, "n1", "n2", "n3")
	if err := s.AddTasks(ctx, "s1", []store.Task{{ID: "t1", Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		t.Fatal(err)
	}
	handedOut := func() string {
		t.Helper()
		return strings.Join(texts(t, db, `SELECT state || ' ' || attempt || '/' || handed_out FROM tasks WHERE id = 't1'`), "")
	}
	if _, err := s.ClaimTasks(ctx, "s1", "n1", 1); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReturnTasks(ctx, "n1", []string{"t1"}); err != nil || n != 1 {
		t.Fatalf("ReturnTasks() = %d, %v, want 1, nil", n, err)
	}
	if got, want := handedOut(), "ready 0/0"; got != want {
		t.Errorf("after a return: %s, want %s", got, want)
	}
	if got, err := s.ClaimTasks(ctx, "s1", "n2", 1); err != nil || len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("ClaimTasks() after a return = %v, %v, want t1 at attempt 1", got, err)
	}
	if got, want := handedOut(), "running 1/1"; got != want {
		t.Errorf("after the claim: %s, want %s", got, want)
	}

	// The bug: t1 back to Ready at attempt 0, though attempt 1 was handed out.
	if _, err := db.ExecContext(ctx, `UPDATE tasks SET state = 'ready', attempt = 0 WHERE id = 't1'`); err == nil {
		t.Errorf("moving a handed-out attempt back succeeded, want the database to refuse it")
	}
	if got, err := s.ClaimTasks(ctx, "s1", "n3", 1); err != nil || len(got) != 0 {
		t.Errorf("ClaimTasks() after the refused write = %v, %v, want nothing to claim", got, err)
	}
	if got, want := handedOut(), "running 1/1"; got != want {
		t.Errorf("after the refused write: %s, want %s", got, want)
	}
}

// texts reads a query's one text column.
func texts(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TaskFilesGoWithTheirTasks: task_files has no foreign key (it would check
// every row a submission adds); a trigger deletes a task's files with it,
// as when its suite is deleted. s is a new store, db reaches its database
// beneath it.
func TaskFilesGoWithTheirTasks(t *testing.T, s store.Store, db *sql.DB) {
	ctx := t.Context()
	LoadHeldInputs(t, s)
	count := func() (n int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM task_files`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 2000*50+32*1000 {
		t.Fatalf("%d task files, want %d", n, 2000*50+32*1000)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM suites WHERE id = 'crowd'`); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 32*1000 {
		t.Errorf("%d task files after deleting suite crowd, want %d", n, 32*1000)
	}
}
