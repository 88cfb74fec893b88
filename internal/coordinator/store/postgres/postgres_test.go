package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newDatabase returns the URL of a fresh database with the schema
// migrated: a copy of a template migrated once per test binary.
func newDatabase(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabaseFrom(t, "schema", func(ctx context.Context, url string) error {
		s, err := Open(ctx, url, nil)
		if err != nil {
			return err
		}
		return s.Close()
	})
}

// open opens a store on url and closes it when the test ends.
func open(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatalf("Open() = %v, want nil", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		url := newDatabase(t)
		s, err := Open(t.Context(), url, nil)
		if err != nil {
			t.Fatalf("Open() = %v, want nil", err)
		}
		// Whatever the test did, the counts kept are those a GROUP BY
		// finds. (Cleanups run last first: the suite has closed the store.)
		t.Cleanup(func() { checkCounts(t, url) })
		return s
	})
}

// TestNewerSchema: a database that a newer nodemgr migrated further is
// refused (downgrading the binary, or one replica left behind), untouched.
func TestNewerSchema(t *testing.T) {
	url := newDatabase(t)
	storetest.NewerSchema(t, func(ctx context.Context) (store.Store, error) {
		s, err := Open(ctx, url, nil)
		if err != nil {
			return nil, err
		}
		return s, nil
	}, sqlDB(t, url))
}

// checkCounts is storetest.CheckCounts on the database at url.
func checkCounts(t testing.TB, url string) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.CheckCounts(t, db)
}

// TestConcurrentOpensMigrateOnce: several processes starting at once on an
// empty database (replicas rolled out together) migrate it exactly once,
// and all of them open.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	const replicas = 6
	url := pgtest.NewDatabase(t)
	var migrated atomic.Int32
	logger := slog.New(countHandler{msg: "store migrated", n: &migrated})
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() {
			s, err := Open(t.Context(), url, logger)
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open() #%d = %v, want nil", i, err)
		}
	}
	// One "store migrated" per migration applied: each once in all.
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got := migrated.Load(); got != int32(len(files)) {
		t.Errorf("%d concurrent Opens applied %d migrations, want each of the %d once", replicas, got, len(files))
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var applied int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(files) {
		t.Errorf("goose_db_version has %d applied versions, want %d (00017 on)", applied, len(files))
	}
}

// countHandler counts the log records with one message.
type countHandler struct {
	msg string
	n   *atomic.Int32
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestReplicasClaimEachTaskOnce: two stores on one database (two server
// replicas), four claimers each, drain one suite at once, reporting what
// they claim: every task is claimed exactly once and finished, none is
// lost, and the counts agree.
func TestReplicasClaimEachTaskOnce(t *testing.T) {
	const tasks, replicas, claimers = 2000, 2, 4
	url := newDatabase(t)
	stores := []*Store{open(t, url), open(t, url)}
	ctx := t.Context()
	if err := stores[0].CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "race"}}); err != nil {
		t.Fatal(err)
	}
	for r := range stores {
		for c := range claimers {
			storetest.RegisterNodes(t, stores[0], fmt.Sprintf("r%d-n%d", r, c))
		}
	}
	batch := make([]store.Task, tasks)
	for i := range batch {
		batch[i] = store.Task{ID: fmt.Sprintf("t%04d", i), Spec: api.TaskSpec{Argv: []string{"true"}}}
	}
	if err := stores[1].AddTasks(ctx, "s1", batch); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	claimedBy := map[string][]string{} // task → the nodes that claimed it
	var wg sync.WaitGroup
	for r, s := range stores {
		for c := range claimers {
			node := fmt.Sprintf("r%d-n%d", r, c)
			wg.Go(func() {
				for round := 0; ; round++ {
					got, err := s.ClaimTasks(ctx, "s1", node, 1+(c+round)%32)
					if err != nil {
						t.Errorf("ClaimTasks(%s) = %v", node, err)
						return
					}
					if len(got) == 0 {
						return
					}
					reports := make([]store.Attempt, len(got))
					mu.Lock()
					for i, tk := range got {
						claimedBy[tk.ID] = append(claimedBy[tk.ID], node)
						reports[i] = store.Attempt{TaskID: tk.ID, Attempt: tk.Attempt, Outcome: api.OutcomeSucceeded}
					}
					mu.Unlock()
					if done, err := s.FinishAttempts(ctx, node, reports, nil); err != nil || done.Applied != len(got) {
						t.Errorf("FinishAttempts(%s, %d) = %+v, %v; want all applied", node, len(got), done, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()

	for id, nodes := range claimedBy {
		if len(nodes) != 1 {
			t.Errorf("task %s claimed %d times, by %v; want once", id, len(nodes), nodes)
		}
	}
	if len(claimedBy) != tasks {
		t.Errorf("%d claimers on %d stores claimed %d tasks, want %d", claimers*replicas, replicas, len(claimedBy), tasks)
	}
	su, err := stores[0].GetSuite(ctx, "s1")
	if err != nil || su.Counts != (api.TaskCounts{Finished: tasks}) {
		t.Errorf("GetSuite(s1).Counts = %+v, %v; want %d Finished", su.Counts, err, tasks)
	}
	checkCounts(t, url)
}

// TestConnectionDrops: a connection cut in the middle of a transaction
// fails the call as errdefs.ErrUnavailable with a message that says what
// happened, leaves nothing half-written, and the store works again once
// the server can be reached; a server that cannot be reached at all is
// unavailable too.
func TestConnectionDrops(t *testing.T) {
	url := newDatabase(t)
	direct := open(t, url)
	proxy := newProxy(t, url)
	s := open(t, proxy.url)
	ctx := t.Context()
	if _, err := s.CreateNode(ctx, store.Node{ID: "n1", Name: "before", MachineID: "m1", DataDir: "/d"}); err != nil {
		t.Fatal(err)
	}

	_, err := s.UpdateNode(ctx, "n1", func(n *store.Node) error {
		n.Name = "after"
		proxy.cut() // the network fails between the read and the write
		return nil
	})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Errorf("UpdateNode() with the connection cut = %v, want unavailable, naming PostgreSQL", err)
	}
	t.Logf("a cut connection reads: %v", err)
	if n, err := direct.GetNode(ctx, "n1"); err != nil || n.Name != "before" {
		t.Errorf("GetNode(n1) after the cut = %q, %v; want %q, unchanged", n.Name, err, "before")
	}
	// Each idle connection the cut broke fails once (pgx pings only those
	// idle for over a second); then the pool dials anew.
	var got error
	for range 1 + int(s.pool.Stat().TotalConns()) {
		if _, got = s.GetNode(ctx, "n1"); got == nil {
			break
		}
	}
	if got != nil {
		t.Errorf("GetNode(n1) through the proxy once it takes connections again = %v, want nil", got)
	}

	if err := s.Probe(ctx); err != nil {
		t.Errorf("Probe() = %v, want nil", err)
	}

	proxy.close() // the server is gone for good
	if _, err := s.GetNode(ctx, "n1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("GetNode(n1) with the server unreachable = %v, want unavailable", err)
	}
	if err := s.Probe(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Probe() with the server unreachable = %v, want unavailable", err)
	}
	if _, err := Open(ctx, proxy.url, nil); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "open store") {
		t.Errorf("Open() of an unreachable server = %v, want unavailable, saying open store", err)
	}
}

func TestOpenRefusesBadURL(t *testing.T) {
	_, err := Open(t.Context(), "postgres://user:s3cret@host:notaport/db", nil)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Open(bad URL) = %v, want invalid", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open(bad URL) = %q, which shows the password", err)
	}
}

// proxy forwards connections from a unix socket of its own to the server,
// and can cut them: a network that fails.
type proxy struct {
	url    string
	ln     net.Listener
	target func() (net.Conn, error)

	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, serverURL string) *proxy {
	t.Helper()
	cfg, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	network, addr := "tcp", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		network, addr = "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("host", dir)
	q.Set("port", "5432")
	u.Host, u.RawQuery = "", q.Encode()
	p := &proxy{url: u.String(), ln: ln, target: func() (net.Conn, error) { return net.Dial(network, addr) }}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := p.target()
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { io.Copy(s, c); s.Close() }()
		go func() { io.Copy(c, s); c.Close() }()
	}
}

// cut closes every connection made so far; new ones go through.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// close stops taking connections and cuts those there are.
func (p *proxy) close() {
	p.ln.Close()
	p.cut()
}

// TestOddBytes: what a process prints may hold any byte, NUL included,
// which PostgreSQL's text refuses: failures keep it byte for byte. A NUL
// where text must go (a node's name) is invalid input, not a server error.
func TestOddBytes(t *testing.T) {
	s := open(t, newDatabase(t))
	ctx := t.Context()
	if err := s.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "odd"}}); err != nil {
		t.Fatal(err)
	}
	storetest.RegisterNodes(t, s, "n1")
	if err := s.AddTasks(ctx, "s1", []store.Task{{ID: "t1", Spec: api.TaskSpec{Argv: []string{"a\x00b"}}}}); err != nil {
		t.Fatalf("AddTasks(argv with a NUL) = %v, want nil", err)
	}
	c, err := s.ClaimTasks(ctx, "s1", "n1", 1)
	if err != nil || len(c) != 1 {
		t.Fatalf("ClaimTasks() = %v, %v", c, err)
	}
	odd := "bin\x00ary\xff\xfe out"
	report := store.Attempt{TaskID: "t1", Attempt: 1, Outcome: api.OutcomeFailed,
		Failure: &api.TaskFailure{ExitCode: 1, Reason: odd, Stdout: odd, Stderr: odd}}
	retry := func(_, _ *api.RetryPolicy, _ []api.TaskFailure) (bool, time.Duration) { return false, 0 }
	if _, err := s.FinishAttempts(ctx, "n1", []store.Attempt{report}, retry); err != nil {
		t.Fatalf("FinishAttempts(output with odd bytes) = %v, want nil", err)
	}
	got, err := s.GetTask(ctx, "t1")
	if err != nil || len(got.Failures) != 1 {
		t.Fatalf("GetTask(t1) = %+v, %v", got, err)
	}
	if f := got.Failures[0]; f.Reason != odd || f.Stdout != odd || f.Stderr != odd || got.Spec.Argv[0] != "a\x00b" {
		t.Errorf("GetTask(t1) failure = %q / %q / %q, argv %q; want %q each, argv %q", f.Reason, f.Stdout, f.Stderr, got.Spec.Argv, odd, "a\x00b")
	}
	// Queries that read into the JSON of specs and results read past it.
	if _, err := s.ListTasks(ctx, store.TaskFilter{SuiteID: "s1", Labels: map[string]string{"k": "v"}}); err != nil {
		t.Errorf("ListTasks(by label) = %v, want nil", err)
	}
	if err := s.AddTasks(ctx, "s1", []store.Task{{ID: "t2"}}); err != nil {
		t.Fatal(err)
	}
	c, err = s.ClaimTasks(ctx, "s1", "n1", 2)
	if err != nil || len(c) != 2 {
		t.Fatalf("ClaimTasks() = %v, %v", c, err)
	}
	done := store.Attempt{TaskID: "t2", Attempt: 1, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Stdout: odd, Outputs: []api.TaskFile{{Path: "out", Digest: "sha256:ab"}}}}
	if _, err := s.FinishAttempts(ctx, "n1", []store.Attempt{done}, nil); err != nil {
		t.Fatalf("FinishAttempts(a result with odd bytes) = %v, want nil", err)
	}
	if used, err := s.BlobsInUse(ctx); err != nil || !used["sha256:ab"] {
		t.Errorf("BlobsInUse() = %v, %v; want sha256:ab", used, err)
	}
	_, err = s.CreateNode(ctx, store.Node{ID: "n1", Name: "nul\x00", MachineID: "m", DataDir: "/d"})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("CreateNode(name with a NUL) = %v, want invalid", err)
	}
}

// TestCancelSuiteWhileReplicasWork: a suite cancelled on one replica while
// another claims, stops and reclaims its tasks ends with no task left to
// run, whatever the interleaving, and with counts that agree.
func TestCancelSuiteWhileReplicasWork(t *testing.T) {
	const tasks = 600
	url := newDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	if err := a.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	storetest.RegisterNodes(t, a, "n0", "n1", "n2")
	if err := a.AddTasks(ctx, "s1", storetest.BenchTasks("t", tasks)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		node := fmt.Sprintf("n%d", i)
		wg.Go(func() { // claim, then give back: Running → Ready
			for range 40 {
				got, err := a.ClaimTasks(ctx, "s1", node, 8)
				if err != nil || len(got) == 0 {
					return
				}
				stops := make([]store.Attempt, len(got))
				for j, tk := range got {
					stops[j] = store.Attempt{TaskID: tk.ID, Attempt: tk.Attempt, Outcome: api.OutcomeStopped}
				}
				if _, err := a.FinishAttempts(ctx, node, stops[:len(stops)/2], nil); err != nil {
					t.Errorf("FinishAttempts(%s) = %v", node, err)
					return
				}
				if _, err := a.ReclaimNode(ctx, node); err != nil {
					t.Errorf("ReclaimNode(%s) = %v", node, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		if _, err := b.UpdateSuite(ctx, "s1", func(su *store.Suite) error { su.State = api.SuiteCancelled; return nil }); err != nil {
			t.Errorf("UpdateSuite(cancel) = %v", err)
		}
	})
	wg.Wait()
	su, err := b.GetSuite(ctx, "s1")
	if err != nil || su.Counts != (api.TaskCounts{Cancelled: tasks}) {
		t.Errorf("GetSuite(s1) after the cancel = %+v, %v; want all %d tasks cancelled", su.Counts, err, tasks)
	}
	checkCounts(t, url)
}

// TestDependencyFinishingMeanwhile: a task added on one replica after a
// task that another replica finishes at the same moment is released,
// whichever commits first: it never waits for a dependency that ended.
func TestDependencyFinishingMeanwhile(t *testing.T) {
	const rounds = 40
	url := newDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := t.Context()
	if err := a.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "deps"}}); err != nil {
		t.Fatal(err)
	}
	storetest.RegisterNodes(t, a, "n1", "n2")
	for i := range rounds {
		dep, next := fmt.Sprintf("dep%d", i), fmt.Sprintf("next%d", i)
		if err := a.AddTasks(ctx, "s1", []store.Task{{ID: dep}}); err != nil {
			t.Fatal(err)
		}
		c, err := a.ClaimTasks(ctx, "s1", "n1", 1)
		if err != nil || len(c) != 1 {
			t.Fatalf("ClaimTasks() = %v, %v", c, err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			report := store.Attempt{TaskID: dep, Attempt: c[0].Attempt, Outcome: api.OutcomeSucceeded}
			if _, err := a.FinishAttempts(ctx, "n1", []store.Attempt{report}, nil); err != nil {
				t.Errorf("FinishAttempts(%s) = %v", dep, err)
			}
		})
		wg.Go(func() {
			tk := store.Task{ID: next, After: []string{dep}, Spec: api.TaskSpec{After: []string{dep}}}
			if err := b.AddTasks(ctx, "s1", []store.Task{tk}); err != nil {
				t.Errorf("AddTasks(%s after %s) = %v", next, dep, err)
			}
		})
		wg.Wait()
		if got, err := a.GetTask(ctx, next); err != nil || got.State != api.TaskReady {
			t.Fatalf("round %d: GetTask(%s) = %s, %v; want Ready: %s finished", i, next, got.State, err, dep)
		}
		if _, err := a.ClaimTasks(ctx, "s1", "n2", 1); err != nil { // out of the way of the next round
			t.Fatal(err)
		}
	}
	checkCounts(t, url)
}

// TestAnAttemptIsHandedOutOnce: see storetest.AnAttemptIsHandedOutOnce.
func TestAnAttemptIsHandedOutOnce(t *testing.T) {
	url := newDatabase(t)
	storetest.AnAttemptIsHandedOutOnce(t, open(t, url), sqlDB(t, url))
}

// sqlDB reaches the database at url beneath the store, as database/sql.
func sqlDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
