package migrate_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/migrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fill gives a SQLite store some of everything: a user and token, nodes
// with notifications, a suite with finished, failed (with NUL-free
// output) and ready tasks, a dependency, a document and an ensemble.
func fill(t *testing.T, ctx context.Context, s store.Store) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateUser(ctx, store.User{Name: "ada", Groups: map[string]string{"ml": api.RoleWrite}}))
	must(s.CreateToken(ctx, store.Token{ID: "t-1", Kind: api.TokenAPI, Name: "laptop", Hash: []byte{0, 1, 2, 255}, User: "ada"}))
	for _, id := range []string{"n-1", "n-2"} {
		_, err := s.CreateNode(ctx, store.Node{ID: id, Name: "node-" + id, MachineID: "m-" + id, DataDir: "/d", Tags: []string{"ssd"},
			Labels: map[string]string{"zone": "eu"}, Status: api.StatusOnline})
		must(err)
		_, err = s.Enqueue(ctx, id, "wake", []byte(`{"suite":"s-1"}`))
		must(err)
	}
	must(s.CreateSuite(ctx, store.Suite{ID: "s-1", State: api.SuiteOpen, Owner: "ada",
		Spec: api.SuiteSpec{Name: "build", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}}}))
	var tasks []store.Task
	for _, id := range []string{"k-1", "k-2", "k-3", "k-4"} {
		tasks = append(tasks, store.Task{ID: id, Spec: api.TaskSpec{Name: id, Argv: []string{"sh", "-c", "echo " + id}}})
	}
	tasks[3].After = []string{"k-3"} // still waiting when copied
	// Files: the copy of tasks indexes them again in task_files;
	// blob_groups is copied.
	must(s.AddBlobGroups(ctx, "sha256:"+strings.Repeat("a", 64), []string{"ml"}))
	tasks[0].Spec.Inputs = []api.TaskFile{{Path: "a.c", Digest: "sha256:" + strings.Repeat("a", 64), Size: 1}}
	tasks[3].Spec.Inputs = []api.TaskFile{{Path: "b.c", Digest: "sha256:" + strings.Repeat("b", 64), Size: 1}}
	must(s.AddTasks(ctx, "s-1", tasks))
	claimed, err := s.ClaimTasks(ctx, "s-1", "n-1", 2)
	must(err)
	reports := []store.Attempt{
		{TaskID: claimed[0].ID, Attempt: claimed[0].Attempt, Outcome: api.OutcomeSucceeded, Result: api.TaskResult{Stdout: "ok\n", DurationMS: 5,
			Outputs: []api.TaskFile{{Path: "a.o", Digest: "sha256:" + strings.Repeat("c", 64), Size: 1}}}},
		{TaskID: claimed[1].ID, Attempt: claimed[1].Attempt, Outcome: api.OutcomeFailed, Result: api.TaskResult{ExitCode: 3, Stderr: "boom ü\n"},
			Failure: &api.TaskFailure{Reason: "exit status 3", Stderr: "boom ü\n"}},
	}
	never := func(*api.RetryPolicy, *api.RetryPolicy, []api.TaskFailure) (bool, time.Duration) { return true, 0 }
	_, err = s.FinishAttempts(ctx, "n-1", reports, never)
	must(err)
	_, err = s.PutDocument(ctx, store.Document{Kind: "templates", Name: "small", Body: []byte("name: small\ncpu: 1\n")})
	must(err)
	must(s.CreateEnsemble(ctx, api.Ensemble{ID: "e-1", Name: "shop", State: api.EnsembleRunning, Owner: "ada",
		Spec:     api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{{Name: "db", Resources: api.Resources{CPUs: 1, MemoryMB: 64}, Container: &api.ContainerJob{Image: "x"}}}},
		Replicas: []api.EnsembleReplica{{Allocation: "db", Replica: 1, NodeID: "n-1", NodeName: "node-n-1", Container: "shop-db-1"}}}))
}

// TestCopy copies a filled SQLite store into an empty PostgreSQL one and
// reads everything back through the PostgreSQL store: the same nodes,
// suite counts, tasks (in order, with results and failures), token,
// document and ensemble; per-table counts and checksums agree; new rows
// after the copy get fresh sequence numbers; a second copy into the now
// full database is refused and changes nothing.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nodemgr.db")
	src, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, src)

	url := pgtest.NewDatabase(t)
	dst, err := postgres.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()

	rep := copyInto(t, ctx, path, url)
	byName := map[string]migrate.Table{}
	for _, tb := range rep.Tables {
		byName[tb.Name] = tb
	}
	for table, want := range map[string]int64{"nodes": 2, "notifications": 2, "users": 1, "memberships": 1, "tokens": 1, "suites": 1,
		"tasks": 4, "task_failures": 1, "task_deps": 1, "task_files": 3, "blob_groups": 1, "documents": 1, "ensembles": 1} {
		if got := byName[table]; got.Rows != want || got.Checksum == "" {
			t.Errorf("table %s: copied %+v, want %d rows with a checksum", table, got, want)
		}
	}

	same := func(what string, a, b any, err1, err2 error) {
		t.Helper()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v, %v", what, err1, err2)
		}
		if d := cmp.Diff(a, b); d != "" {
			t.Errorf("%s differs after the copy (-sqlite +postgres):\n%s", what, d)
		}
	}
	n1, e1 := src.ListNodes(ctx, store.NodeFilter{})
	n2, e2 := dst.ListNodes(ctx, store.NodeFilter{})
	same("nodes", n1, n2, e1, e2)
	s1, e1 := src.GetSuite(ctx, "s-1")
	s2, e2 := dst.GetSuite(ctx, "s-1")
	same("suite", s1, s2, e1, e2)
	t1, e1 := src.ListTasks(ctx, store.TaskFilter{SuiteID: "s-1"})
	t2, e2 := dst.ListTasks(ctx, store.TaskFilter{SuiteID: "s-1"})
	same("tasks", t1, t2, e1, e2)
	k1, e1 := src.TokenByHash(ctx, []byte{0, 1, 2, 255})
	k2, e2 := dst.TokenByHash(ctx, []byte{0, 1, 2, 255})
	same("token", k1, k2, e1, e2)
	d1, e1 := src.GetDocument(ctx, "templates", "small")
	d2, e2 := dst.GetDocument(ctx, "templates", "small")
	same("document", d1, d2, e1, e2)
	en1, e1 := src.GetEnsemble(ctx, "shop")
	en2, e2 := dst.GetEnsemble(ctx, "shop")
	same("ensemble", en1, en2, e1, e2)
	p1, e1 := src.Pending(ctx, "n-1", 0)
	p2, e2 := dst.Pending(ctx, "n-1", 0)
	same("notifications", p1, p2, e1, e2)

	// The sequences go on past what was copied.
	if err := dst.AddTasks(ctx, "s-1", []store.Task{{ID: "k-5", Spec: api.TaskSpec{Argv: []string{"true"}}}}); err != nil {
		t.Fatalf("add a task after the copy: %v", err)
	}
	if k5, err := dst.GetTask(ctx, "k-5"); err != nil || k5.Seq <= t1[len(t1)-1].Seq {
		t.Errorf("a task added after the copy: seq %d (%v), want past %d", k5.Seq, err, t1[len(t1)-1].Seq)
	}
	if n, err := dst.Enqueue(ctx, "n-1", "wake", []byte(`{}`)); err != nil || n.Seq != p1[len(p1)-1].Seq+1 {
		t.Errorf("a notification after the copy: seq %d (%v), want %d", n.Seq, err, p1[len(p1)-1].Seq+1)
	}

	// Into a database that holds state already: refused, nothing written.
	src.Close()
	sdb, conn := handles(t, ctx, path, url)
	if _, err := migrate.Copy(ctx, sdb, conn, nil); err == nil {
		t.Error("a second copy into the same database succeeded; want it refused")
	}
	if got, _ := dst.ListTasks(ctx, store.TaskFilter{SuiteID: "s-1"}); len(got) != 5 {
		t.Errorf("%d tasks after a refused copy, want the 5 there were", len(got))
	}
}

func handles(t *testing.T, ctx context.Context, path, url string) (*sql.DB, *pgx.Conn) {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return sdb, conn
}

func copyInto(t *testing.T, ctx context.Context, path, url string) migrate.Report {
	t.Helper()
	sdb, conn := handles(t, ctx, path, url)
	rep, err := migrate.Copy(ctx, sdb, conn, nil)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	return rep
}
