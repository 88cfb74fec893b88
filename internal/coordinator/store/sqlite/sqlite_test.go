package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pressly/goose/v3"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "nodemgr.db")
		s, err := Open(t.Context(), path, nil)
		if err != nil {
			t.Fatalf("Open() = %v, want nil", err)
		}
		// Whatever the test did, the counts kept are those a GROUP BY
		// finds. (Cleanups run last first: the suite has closed the store.)
		t.Cleanup(func() { checkCounts(t, path) })
		return s
	})
}

// TestNewerSchema: a file that a newer nodemgr migrated further is refused
// (downgrading the binary), untouched.
func TestNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodemgr.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.NewerSchema(t, func(ctx context.Context) (store.Store, error) {
		s, err := Open(ctx, path, nil)
		if err != nil {
			return nil, err
		}
		return s, nil
	}, db)
}

// checkCounts is storetest.CheckCounts on the file at path.
func checkCounts(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.CheckCounts(t, db)
}

// open opens the store at path and closes it when the test ends.
func open(t *testing.T, path string, logger *slog.Logger) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, logger)
	if err != nil {
		t.Fatalf("Open(%q) = %v, want nil", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "nodemgr.db")

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s := open(t, path, logger)
	if !strings.Contains(logs.String(), "store created") || strings.Contains(logs.String(), "store migrated") {
		t.Errorf("Open(%q) of a new file did not say in one line that it made the store:\n%s", path, logs.String())
	}
	node, err := s.CreateNode(ctx, store.Node{ID: "n1", MachineID: "m1", DataDir: "/d", Tags: []string{"a"}, Status: api.StatusOnline})
	if err != nil {
		t.Fatalf("CreateNode() = %v", err)
	}
	for range 2 {
		if _, err := s.Enqueue(ctx, "n1", "ping", []byte(`{}`)); err != nil {
			t.Fatalf("Enqueue() = %v", err)
		}
	}
	if err := s.Ack(ctx, "n1", 2); err != nil {
		t.Fatalf("Ack() = %v", err)
	}
	if err := s.CreateUser(ctx, store.User{Name: "alice", Groups: map[string]string{"ml": api.RoleAdmin}}); err != nil {
		t.Fatalf("CreateUser() = %v", err)
	}
	user, err := s.GetUser(ctx, "alice")
	if err != nil {
		t.Fatalf("GetUser() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}

	// Reopening finds the schema current: nothing to migrate, data intact.
	for i := range 2 {
		logs.Reset()
		s := open(t, path, logger)
		if strings.Contains(logs.String(), "store migrated") {
			t.Errorf("Open(%q) again (%d) migrated again:\n%s", path, i, logs.String())
		}
		got, err := s.GetNode(ctx, "n1")
		if err != nil {
			t.Fatalf("GetNode(%q) after reopen = %v, want nil", "n1", err)
		}
		if diff := cmp.Diff(node, got); diff != "" {
			t.Errorf("GetNode(%q) after reopen mismatch (-before +after):\n%s", "n1", diff)
		}
		gotUser, err := s.GetUser(ctx, "alice")
		if err != nil {
			t.Fatalf("GetUser(%q) after reopen = %v, want nil", "alice", err)
		}
		if diff := cmp.Diff(user, gotUser); diff != "" {
			t.Errorf("GetUser(%q) after reopen mismatch (-before +after):\n%s", "alice", diff)
		}
		// Seqs carry on from where they were, though every row was acked.
		nt, err := s.Enqueue(ctx, "n1", "ping", nil)
		if err != nil || nt.Seq != uint64(3+i) {
			t.Errorf("Enqueue(%q) after reopen = seq %d, %v, want %d, nil", "n1", nt.Seq, err, 3+i)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close() = %v, want nil", err)
		}
	}

	// The file is at the newest migration.
	s = open(t, path, nil)
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, s.w, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("goose.NewProvider() = %v", err)
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil || current != target || current < 1 {
		t.Errorf("GetVersions() = %d, %d, %v, want equal versions of at least 1", current, target, err)
	}
}

// migratedTo makes a file migrated up to version, for a test of what
// later migrations make of it; the test closes db before it opens a store.
func migratedTo(t *testing.T, version int64) (path string, db *sql.DB) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "nodemgr.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("goose.NewProvider() = %v", err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatalf("UpTo(%d) = %v", version, err)
	}
	return path, db
}

// TestUpgrade opens a file made by the first schema, with a node in it, and
// finds the node intact under the newest one.
func TestUpgrade(t *testing.T) {
	ctx := t.Context()
	path, db := migratedTo(t, 1)
	if _, err := db.ExecContext(ctx, `INSERT INTO nodes (id, name, machine_id, data_dir, status, registered_at, updated_at)
		VALUES ('n1', 'alpha', 'm1', '/d', ?, 1, 1)`, api.StatusOnline); err != nil {
		t.Fatalf("insert a node at version 1: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path, nil)
	n, err := s.GetNode(ctx, "n1")
	if err != nil {
		t.Fatalf("GetNode(%q) after upgrade = %v, want nil", "n1", err)
	}
	if n.Name != "alpha" || n.Status != api.StatusOnline || n.CurrentSuite != "" {
		t.Errorf("GetNode(%q) after upgrade = name %q, status %q, suite %q; want %q, %q, %q",
			"n1", n.Name, n.Status, n.CurrentSuite, "alpha", api.StatusOnline, "")
	}
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "first"}}); err != nil {
		t.Errorf("CreateSuite() after upgrade = %v, want nil", err)
	}
}

// TestUpgradeCountsTasks opens a file made by the second schema, with
// suites and tasks in every state, and finds them counted.
func TestUpgradeCountsTasks(t *testing.T) {
	ctx := t.Context()
	path, db := migratedTo(t, 2)
	want := map[string]api.TaskCounts{
		"s1": {Ready: 3, Running: 2, Finished: 4, Failed: 1, Cancelled: 2},
		"s2": {Ready: 1},
		"s3": {},
	}
	for id, c := range want {
		if _, err := db.ExecContext(ctx, `INSERT INTO suites (id, name, spec, state, created_at, updated_at)
			VALUES (?, ?, '{"name": "x"}', ?, 1, 1)`, id, "suite-"+id, oldSpelling(api.SuiteClosed)); err != nil {
			t.Fatalf("insert suite %s at version 2: %v", id, err)
		}
		for state, n := range map[string]int{api.TaskReady: c.Ready, api.TaskRunning: c.Running,
			api.TaskFinished: c.Finished, api.TaskFailed: c.Failed, api.TaskCancelled: c.Cancelled} {
			for i := range n {
				if _, err := db.ExecContext(ctx, `INSERT INTO tasks (id, suite_id, spec, state, attempt, node_id, created_at, updated_at)
					VALUES (?, ?, '{"argv": ["true"]}', ?, 1, 'n1', 1, 1)`, fmt.Sprintf("%s-%s-%d", id, state, i), id, oldSpelling(state)); err != nil {
					t.Fatalf("insert task at version 2: %v", err)
				}
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path, nil)
	for id, c := range want {
		if su, err := s.GetSuite(ctx, id); err != nil || su.Counts != c {
			t.Errorf("GetSuite(%q) after upgrade = %+v, %v; want counts %+v", id, su.Counts, err, c)
		}
	}
	// The counts go on from there.
	if n, err := s.ReclaimNode(ctx, "n1"); err != nil || n != 2 {
		t.Errorf("ReclaimNode(%q) after upgrade = %d, %v, want 2, nil", "n1", n, err)
	}
	storetest.RegisterNodes(t, s, "n2")
	if got, err := s.ClaimTasks(ctx, "s1", "n2", 10); err != nil || len(got) != 5 {
		t.Errorf("ClaimTasks(%q) after upgrade = %d tasks, %v, want 5, nil", "s1", len(got), err)
	}
	if ids, err := s.CompleteSuites(ctx); err != nil || !slices.Equal(ids, []string{"s3"}) {
		t.Errorf("CompleteSuites() after upgrade = %q, %v, want [s3]", ids, err)
	}
	s.Close()
	checkCounts(t, path)
}

// TestDispatchPlans pins how SQLite runs the statements of the dispatch
// loop: each finds its tasks through an index, by ID where it names them,
// and none walks a table or a node's running tasks per report.
func TestDispatchPlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	tests := []struct {
		name, query string
		want        []string // the plan's lines, in order
	}{
		{"claim", claimTasks, []string{
			"SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)",
			"LIST SUBQUERY 1",
			"SEARCH tasks USING COVERING INDEX tasks_ready (suite_id=?)",
		}},
		{"finish", finishEnds, []string{
			"SCAN r VIRTUAL TABLE INDEX 1:",
			"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)",
		}},
		{"record failure", recordFailure, []string{
			"SEARCH tasks USING INDEX sqlite_autoindex_tasks_1 (id=?)",
		}},
		{"after failures", afterFailures, []string{
			"SCAN r VIRTUAL TABLE INDEX 1:",
			"SEARCH tasks USING COVERING INDEX sqlite_autoindex_tasks_1 (id=?)",
		}},
		{"counts", addCounts, []string{
			"SEARCH suite_counts USING PRIMARY KEY (suite_id=?)",
		}},
		{"get suite", getSuite, []string{
			"SEARCH c USING PRIMARY KEY (suite_id=?)",
			"SEARCH s USING INDEX sqlite_autoindex_suites_1 (id=?)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkPlan(t, s.w, tc.query, tc.want, make([]any, 9)...) // not used: EXPLAIN runs nothing
		})
	}
}

// checkPlan compares the lines of query's plan on db, with args, with want.
func checkPlan(t *testing.T, db *sql.DB, query string, want []string, args ...any) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN = %v", err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		got = append(got, detail)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EXPLAIN QUERY PLAN mismatch (-want +got):\n%s", diff)
	}
}

func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	tests := []struct {
		pool   string
		db     querier
		pragma string
		want   string
	}{
		{"writer", s.w, "journal_mode", "wal"},
		{"writer", s.w, "foreign_keys", "1"},
		{"writer", s.w, "synchronous", "1"}, // NORMAL
		{"writer", s.w, "busy_timeout", "5000"},
		{"reader", s.r, "journal_mode", "wal"},
		{"reader", s.r, "foreign_keys", "1"},
		{"reader", s.r, "synchronous", "1"},
		{"reader", s.r, "query_only", "1"},
	}
	for _, tc := range tests {
		var got string
		if err := tc.db.QueryRowContext(t.Context(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("%s: PRAGMA %s = %v", tc.pool, tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("%s: PRAGMA %s = %q, want %q", tc.pool, tc.pragma, got, tc.want)
		}
	}
}

// TestReadsDoNotWaitForWrites holds the writer inside a transaction and
// reads meanwhile: the reader pool sees the last committed state.
func TestReadsDoNotWaitForWrites(t *testing.T) {
	ctx := t.Context()
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	if _, err := s.CreateNode(ctx, store.Node{ID: "n1", Name: "before", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatalf("CreateNode() = %v", err)
	}

	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.UpdateNode(ctx, "n1", func(n *store.Node) error {
			n.Name = "after"
			close(inside)
			<-release
			return nil
		})
		done <- err
	}()
	<-inside

	readCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.GetNode(readCtx, "n1")
	close(release)
	if err != nil {
		t.Fatalf("GetNode(%q) during a write = %v, want nil", "n1", err)
	}
	if got.Name != "before" {
		t.Errorf("GetNode(%q).Name during a write = %q, want %q", "n1", got.Name, "before")
	}
	if err := <-done; err != nil {
		t.Fatalf("UpdateNode(%q) = %v, want nil", "n1", err)
	}
	if got, err := s.GetNode(ctx, "n1"); err != nil || got.Name != "after" {
		t.Errorf("GetNode(%q) after the write = %q, %v, want %q, nil", "n1", got.Name, err, "after")
	}
}

func TestOpenRefusesMemory(t *testing.T) {
	for _, path := range []string{"", ":memory:"} {
		if _, err := Open(t.Context(), path, nil); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want %v", path, err, errdefs.ErrInvalid)
		}
	}
}

func TestPathWithOddCharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?#%", "nodemgr.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	s := open(t, path, nil)
	if _, err := s.CreateNode(t.Context(), store.Node{ID: "n1", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatalf("CreateNode() in %q = %v, want nil", path, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("store at %q: %v", path, err)
	}
}

// newStore opens a new store in b's temporary directory, closed when b
// ends.
func newStore(b *testing.B) store.Store {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkRecordHeartbeats: see storetest.BenchRecordHeartbeats.
func BenchmarkRecordHeartbeats(b *testing.B) { storetest.BenchRecordHeartbeats(b, newStore(b)) }

// BenchmarkClaimAndFinish: see storetest.BenchClaimAndFinish.
func BenchmarkClaimAndFinish(b *testing.B) { storetest.BenchClaimAndFinish(b, newStore) }

// BenchmarkAddTasks: see storetest.BenchAddTasks.
func BenchmarkAddTasks(b *testing.B) { storetest.BenchAddTasks(b, newStore(b)) }

// largeSuite opens a store with one suite, s1, of n tasks: a fifth each
// Finished, Failed (given up), Running, Cancelled and Ready, in the order
// they were added.
func largeSuite(b *testing.B, n int) *Store {
	ctx := b.Context()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "bench"}}); err != nil {
		b.Fatal(err)
	}
	if err := s.AddTasks(ctx, "s1", storetest.BenchTasks("t", n)); err != nil {
		b.Fatal(err)
	}
	storetest.RegisterNodes(b, s, "n1", "n2")
	claimed, err := s.ClaimTasks(ctx, "s1", "n1", 4*n/5)
	if err != nil {
		b.Fatal(err)
	}
	var reports []store.Attempt
	for i, t := range claimed[:2*n/5] {
		r := store.Attempt{TaskID: t.ID, Attempt: t.Attempt, Outcome: api.OutcomeSucceeded}
		if i%2 == 1 {
			r.Outcome, r.Failure = api.OutcomeFailed, &api.TaskFailure{Reason: "exit status 1"}
		}
		reports = append(reports, r)
	}
	giveUp := func(_, _ *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) { return true, 0 }
	if _, err := s.FinishAttempts(ctx, "n1", reports, giveUp); err != nil {
		b.Fatal(err)
	}
	for _, t := range claimed[3*n/5:] {
		if _, err := s.CancelTask(ctx, t.ID); err != nil {
			b.Fatal(err)
		}
	}
	want := api.TaskCounts{Ready: n / 5, Running: n / 5, Finished: n / 5, Failed: n / 5, Cancelled: n / 5}
	if su, err := s.GetSuite(ctx, "s1"); err != nil || su.Counts != want {
		b.Fatalf("GetSuite() = %+v, %v, want %+v", su.Counts, err, want)
	}
	return s
}

// BenchmarkGetSuiteLarge reads the counts of a suite of 50,000 tasks, as
// `nodemgr suite watch` and agents looking for work do. While dispatching,
// a claim and a return land between reads, so readers find the file
// changed, as they do on a busy coordinator.
func BenchmarkGetSuiteLarge(b *testing.B) {
	const n = 50_000
	ctx := b.Context()
	s := largeSuite(b, n)
	check := func() {
		su, err := s.GetSuite(ctx, "s1")
		if err != nil || su.Counts.Total() != n {
			b.Fatalf("GetSuite() = %+v, %v, want %d tasks", su.Counts, err, n)
		}
	}
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			check()
		}
	})
	b.Run("dispatching", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			t, err := s.ClaimTasks(ctx, "s1", "n2", 1)
			if err != nil || len(t) != 1 {
				b.Fatalf("ClaimTasks() = %d tasks, %v", len(t), err)
			}
			if _, err := s.ReturnTasks(ctx, "n2", []string{t[0].ID}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			check()
		}
	})
}

// BenchmarkListTasksLarge reads the first page of a large suite's tasks in
// one state, as `nodemgr suite tasks --state` does.
func BenchmarkListTasksLarge(b *testing.B) {
	const n = 50_000
	ctx := b.Context()
	s := largeSuite(b, n)
	for _, state := range []string{api.TaskReady, api.TaskRunning, api.TaskFinished, api.TaskFailed, api.TaskCancelled} {
		b.Run(state, func(b *testing.B) {
			for b.Loop() {
				tasks, err := s.ListTasks(ctx, store.TaskFilter{SuiteID: "s1", States: []string{state}, Page: store.Page{Limit: 1000}})
				if err != nil || len(tasks) != 1000 {
					b.Fatalf("ListTasks(%s) = %d tasks, %v", state, len(tasks), err)
				}
			}
		})
	}
}

// BenchmarkListTasksPage reads a page of 1,000 tasks of a 50,000-task
// suite at its top and near its end: keyset paging seeks to the cursor, so
// a deep page costs what the first does (an OFFSET would read every row
// before it).
func BenchmarkListTasksPage(b *testing.B) {
	const n = 50_000
	ctx := b.Context()
	s := largeSuite(b, n)
	all, err := s.ListTasks(ctx, store.TaskFilter{SuiteID: "s1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, at := range []int{0, n - 1001} {
		after := ""
		if at > 0 {
			after = all[at].Cursor()
		}
		b.Run(fmt.Sprintf("after=%d", at), func(b *testing.B) {
			for b.Loop() {
				tasks, err := s.ListTasks(ctx, store.TaskFilter{SuiteID: "s1", Page: store.Page{After: after, Limit: 1000}})
				if err != nil || len(tasks) != 1000 {
					b.Fatalf("ListTasks = %d tasks, %v", len(tasks), err)
				}
			}
		})
	}
}

// TestFilesArePrivate: the database, its WAL and its shared memory are
// 0600 whatever the umask, and a store file left readable by an earlier
// version is tightened (with a warning) on open.
func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodemgr.db")
	s := open(t, path, nil)
	if _, err := s.CreateNode(t.Context(), store.Node{ID: "n1", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}
	checkModes := func(when string) {
		t.Helper()
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if m := fi.Mode().Perm(); m != 0o600 {
				t.Errorf("%s: mode of %s = %v, want -rw-------", when, filepath.Base(p), m)
			}
		}
	}
	checkModes("new store")
	s.Close()

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	open(t, path, slog.New(slog.NewTextHandler(&logs, nil)))
	checkModes("reopened 0644 store")
	if !strings.Contains(logs.String(), "made it 0600") {
		t.Errorf("reopening a 0644 store logged no warning:\n%s", logs.String())
	}
}

// TestAnAttemptIsHandedOutOnce: see storetest.AnAttemptIsHandedOutOnce.
func TestAnAttemptIsHandedOutOnce(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	storetest.AnAttemptIsHandedOutOnce(t, s, s.w)
}

// oldSpelling is a task's or suite's state as stores before 00030 kept it.
func oldSpelling(state string) string { return strings.ToUpper(state[:1]) + state[1:] }

// TestUpgradeSpellsStatesInLowerCase opens a file made by schema 29, with
// states in their old spellings, and finds them in the one casing, the
// partial indexes that name them working.
func TestUpgradeSpellsStatesInLowerCase(t *testing.T) {
	ctx := t.Context()
	path, db := migratedTo(t, 29)
	for _, q := range []string{
		`INSERT INTO nodes (id, name, machine_id, data_dir, status, agent_state, registered_at, updated_at)
			VALUES ('n1', 'alpha', 'm1', '/d', 'online', 'ShuttingDown', 1, 1)`,
		`INSERT INTO suites (id, name, spec, state, created_at, updated_at) VALUES ('s1', 'build', '{"name": "build"}', 'Open', 1, 1)`,
		`INSERT INTO suite_counts (suite_id, ready, running) VALUES ('s1', 1, 1)`,
		`INSERT INTO tasks (id, suite_id, spec, state, attempt, node_id, created_at, updated_at)
			VALUES ('t1', 's1', '{"argv": ["cc"]}', 'Ready', 0, '', 1, 1)`,
		`INSERT INTO tasks (id, suite_id, spec, state, attempt, node_id, created_at, updated_at)
			VALUES ('t2', 's1', '{"argv": ["cc"]}', 'Running', 1, 'n1', 1, 1)`,
		`INSERT INTO containers (node_id, id, status, live, record, created_at, updated_at)
			VALUES ('n1', 'j1', 'RUNNING', 1, '{"job": {"id": "j1"}, "status": "RUNNING"}', 1, 1)`,
		`INSERT INTO ensembles (id, name, spec, state, created_at, updated_at) VALUES ('e1', 'shop', '{"name": "shop"}', 'shut down', 1, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("at version 29: %v\n%s", err, q)
		}
	}
	db.Close()

	s := open(t, path, nil)
	if su, err := s.GetSuite(ctx, "s1"); err != nil || su.State != api.SuiteOpen {
		t.Errorf("suite after upgrade: %q, %v; want %q", su.State, err, api.SuiteOpen)
	}
	if n, err := s.GetNode(ctx, "n1"); err != nil || n.AgentState != api.AgentShuttingDown {
		t.Errorf("agent state after upgrade: %q, %v; want %q", n.AgentState, err, api.AgentShuttingDown)
	}
	if cs, err := s.FindContainer(ctx, "j1"); err != nil || len(cs) != 1 || cs[0].Status != api.ContainerRunning {
		t.Errorf("container after upgrade: %+v, %v; want %q", cs, err, api.ContainerRunning)
	}
	if e, err := s.GetEnsemble(ctx, "e1"); err != nil || e.State != api.EnsembleShutDown {
		t.Errorf("ensemble after upgrade: %q, %v; want %q", e.State, err, api.EnsembleShutDown)
	}
	storetest.RegisterNodes(t, s, "n2")
	if got, err := s.ClaimTasks(ctx, "s1", "n2", 10); err != nil || len(got) != 1 || got[0].ID != "t1" {
		t.Errorf("ClaimTasks after upgrade = %v, %v; want t1, the Ready one", got, err)
	}
	if n, err := s.ReclaimNode(ctx, "n1"); err != nil || n != 1 {
		t.Errorf("ReclaimNode after upgrade = %d, %v; want t2 back", n, err)
	}
}
