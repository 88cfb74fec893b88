// Package pgtest gives tests fresh PostgreSQL databases, as httptest gives
// them servers. A package's tests call Main from TestMain, then
// NewDatabase (an empty database) or NewDatabaseFrom (a copy of a template
// prepared once per test binary, such as a migrated schema):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		url := pgtest.NewDatabase(t) // dropped when the test ends
//		...
//	}
//
// The databases live on the server that NODEMGR_TEST_POSTGRES_URL names
// (its user must be allowed to create databases), or else on one server
// started for the test binary from the PostgreSQL binaries installed on the
// machine (/usr/lib/postgresql/15/bin first), listening on a unix socket in
// a temporary directory and nowhere else, with fsync off. As root, it runs
// as the user nobody, since PostgreSQL refuses to run as root. Main stops
// it when the tests are done.
//
// Without the binaries the tests are skipped, saying why, unless the
// environment variable CI or NODEMGR_REQUIRE_POSTGRES is set (the latter
// as NODEMGR_REQUIRE_DOCKER is for the Docker tests): then they fail,
// saying what to install.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvURL names an existing server to make the test databases on, as a
// postgres:// URL of a user that may create databases.
const EnvURL = "NODEMGR_TEST_POSTGRES_URL"

// adminTimeout bounds each CREATE or DROP DATABASE.
const adminTimeout = time.Minute

var (
	mainRunning atomic.Bool

	startOnce sync.Once
	cluster   *server // the server and an admin pool on it
	startErr  error

	prefix  = "nodemgr_test_" + randomHex(4) // this binary's databases
	counter atomic.Int64

	templatesMu sync.Mutex
	templates   = map[string]*template{}
)

// Main runs the tests and then stops the server that NewDatabase started,
// if any, and drops the templates it made on a server given by EnvURL.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain that has more to do after the tests: it
// runs them, stops what NewDatabase started, and returns m.Run's code.
func Run(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	stopAll()
	return code
}

// NewDatabase creates an empty database for the test, dropped when the
// test ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "template0")
}

// NewDatabaseFrom creates a database for the test that is a copy of the
// template called name, and returns its URL; the database is dropped when
// the test ends. The first call for a name makes the template and calls
// prepare with its URL to fill it (migrate a schema, say); prepare must
// close its connections before it returns. Copying a prepared template is
// much faster than preparing every test's database.
func NewDatabaseFrom(t testing.TB, name string, prepare func(ctx context.Context, url string) error) string {
	t.Helper()
	s := serverFor(t)
	tmpl, err := templateFor(s, name, prepare)
	if err != nil {
		t.Fatalf("pgtest: prepare template %s: %v", name, err)
	}
	return newDatabase(t, tmpl)
}

func newDatabase(t testing.TB, template string) string {
	t.Helper()
	s := serverFor(t)
	name := fmt.Sprintf("%s_%d", prefix, counter.Add(1))
	if err := s.createDatabase(name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.dropDatabase(name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.url(name)
}

// serverFor returns the server to make databases on, starting one the
// first time; it skips or fails the test when there is none.
func serverFor(t testing.TB) *server {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatal("pgtest: call pgtest.Main(m) from the package's TestMain, so that the PostgreSQL server started for the tests is stopped after them")
	}
	startOnce.Do(func() { cluster, startErr = connect() })
	if startErr != nil {
		noServer(t, startErr)
	}
	return cluster
}

// noServer ends a test that has no server: it skips when PostgreSQL is
// not installed, unless CI or NODEMGR_REQUIRE_POSTGRES is set, and fails
// on any other error.
func noServer(t testing.TB, err error) {
	t.Helper()
	missing := (*missingError)(nil)
	switch {
	case !errors.As(err, &missing):
		t.Fatalf("pgtest: %v", err)
	case os.Getenv("CI") != "" || os.Getenv("NODEMGR_REQUIRE_POSTGRES") != "":
		t.Fatalf("pgtest: %v; CI or NODEMGR_REQUIRE_POSTGRES is set, so this fails instead of skipping: install postgresql (Debian: apt-get install postgresql-15) or set %s", err, EnvURL)
	default:
		t.Skipf("pgtest: skipping: %v; install postgresql or set %s to run it", err, EnvURL)
	}
}

// connect opens the admin pool on the server EnvURL names, or starts one.
func connect() (*server, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return dial(u, nil)
	}
	p, err := startPostgres()
	if err != nil {
		return nil, err
	}
	s, err := dial(p.url(), p)
	if err != nil {
		p.stop()
		return nil, err
	}
	return s, nil
}

// server is where test databases are made: a server reached through an
// admin pool, and the process when pgtest started it.
type server struct {
	admin *pgxpool.Pool
	base  *url.URL // the admin URL; test URLs differ in the database
	proc  *process // nil for a server given by EnvURL
	// copyClause ends CREATE DATABASE: on a server of pgtest's own (15 or
	// newer), a file copy, which takes half the time of the default WAL
	// copy there (a checkpoint costs little with fsync off; on a server
	// given by EnvURL it might not).
	copyClause string
}

func dial(raw string, proc *process) (*server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %v", EnvURL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	admin, err := pgxpool.New(ctx, raw)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		if admin != nil {
			admin.Close()
		}
		return nil, fmt.Errorf("connect to the PostgreSQL server at %s: %v", u.Redacted(), err)
	}
	s := &server{admin: admin, base: u, proc: proc}
	var version int
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err == nil && proc != nil && version >= 150000 {
		s.copyClause = ` STRATEGY = FILE_COPY`
	}
	return s, nil
}

// url is the URL of database name on the server.
func (s *server) url(name string) string {
	u := *s.base
	u.Path = "/" + name
	return u.String()
}

func (s *server) createDatabase(name, template string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	_, err := s.admin.Exec(ctx, `CREATE DATABASE `+ident(name)+` TEMPLATE `+ident(template)+s.copyClause)
	if err != nil {
		return fmt.Errorf("create database %s from %s: %w", name, template, err)
	}
	return nil
}

// dropDatabase drops a test's database, closing what connections to it
// the test left open.
func (s *server) dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if _, err := s.admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident(name)+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// template is a prepared database that tests' databases copy.
type template struct {
	once sync.Once
	name string
	err  error
}

// templateName is what a template's name may be: part of a database name.
var templateName = regexp.MustCompile(`^[a-z0-9_]{1,20}$`)

func templateFor(s *server, name string, prepare func(ctx context.Context, url string) error) (string, error) {
	if !templateName.MatchString(name) {
		return "", fmt.Errorf("template name %q: use 1 to 20 of a-z, 0-9 and _", name)
	}
	templatesMu.Lock()
	tm := templates[name]
	if tm == nil {
		tm = &template{name: prefix + "_tmpl_" + name}
		templates[name] = tm
	}
	templatesMu.Unlock()
	tm.once.Do(func() { tm.err = s.prepareTemplate(tm.name, prepare) })
	return tm.name, tm.err
}

func (s *server) prepareTemplate(name string, prepare func(ctx context.Context, url string) error) error {
	if err := s.createDatabase(name, "template0"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := prepare(ctx, s.url(name)); err != nil {
		return err
	}
	// A database with connections cannot be copied: close what prepare
	// left open.
	_, err := s.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
	return err
}

// stopAll drops the templates (the test databases are dropped by their
// tests) and stops the server pgtest started.
func stopAll() {
	if cluster == nil {
		return
	}
	if cluster.proc == nil {
		for _, tm := range templates {
			if err := cluster.dropDatabase(tm.name); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
		}
	}
	cluster.admin.Close()
	if cluster.proc != nil {
		cluster.proc.stop()
	}
}

// ident quotes a database name.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
