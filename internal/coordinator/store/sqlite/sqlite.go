package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/nodemgr/nodemgr/internal/base/datadir"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for a lock held by another
// connection (or process) before failing with SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// Store is a store.Store kept in one SQLite file.
type Store struct {
	*sqlstore.Store // what both SQL stores share

	w   *sql.DB // one connection: SQLite has one writer at a time anyway
	r   *sql.DB // read-only connections that WAL lets run beside the writer
	now func() time.Time

	// The writer's and the readers' statements, each prepared once.
	wc, rc *stmtCache

	// deps says whether any task ever waited for another; until one does,
	// ending a task looks for no dependents (see deps.go).
	deps atomic.Bool
}

// hotWrites and hotReads are the queries that Open prepares: the dispatch
// loop's, which GetSuite and NodeReadsBlob run on the pool directly.
var (
	hotWrites = []string{claimAuth, claimTasks, finishEnds, recordFailure, afterFailures, addCounts}
	hotReads  = []string{getSuite, nodeReadsBlob, claimAuth}
)

// Open opens the SQLite database at path, creating the file if needed, and
// brings its schema up to date.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" || path == ":memory:" {
		// Each pool would get a database of its own.
		return nil, fmt.Errorf("open store: path %q: %w", path, errdefs.ErrInvalid)
	}

	if err := makePrivate(path, logger); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	if err := migrate(ctx, w, logger); err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	// The readers open only once migrations have made the file and put it
	// in WAL mode, which persists in the file.
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}

	s := &Store{w: w, r: r, now: time.Now}
	s.Store = sqlstore.New(driver{s})
	s.wc, s.rc = newStmtCache(w), newStmtCache(r)
	if err = s.wc.prepare(ctx, hotWrites...); err == nil {
		err = s.rc.prepare(ctx, hotReads...)
	}
	if err == nil {
		var any bool
		err = r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM task_deps)`).Scan(&any)
		s.deps.Store(any)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	logger.Debug("store opened", "path", path, "readers", n)
	return s, nil
}

// makePrivate creates the database file 0600 before SQLite does (SQLite
// would use 0644 less the umask), and tightens an existing one and its WAL
// and shared-memory files, which SQLite creates with the database's mode:
// the store holds token hashes and every node's state.
func makePrivate(path string, logger *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		was, err := datadir.PrivateFile(p)
		if err != nil {
			return err
		}
		if was != 0 {
			logger.Warn("store file was readable by others; made it 0600", "path", p, "mode", was.String())
		}
	}
	return nil
}

// dsn is the driver's data source name for path. Pragmas ride in the DSN so
// that every connection the pools open gets them.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		// Take the write lock at BEGIN, so a transaction that reads before
		// it writes cannot fail to upgrade when another process writes.
		q.Set("_txlock", "immediate")
	}
	u := url.URL{Path: path}
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

// migrate applies the embedded migrations that db lacks. A file that a
// newer nodemgr migrated further is refused before anything changes.
func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys,
		goose.WithSlog(logger),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	applied, known, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrate: read the schema version: %w", err)
	}
	if err := sqlrow.CheckSchemaVersion(applied, known); err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	done := make([]sqlrow.Migrated, len(results))
	for i, r := range results {
		done[i] = sqlrow.Migrated{Version: r.Source.Version, Duration: r.Duration}
	}
	sqlrow.LogMigrated(logger, done)
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	return errors.Join(s.wc.close(), s.rc.close(), s.r.Close(), s.w.Close())
}

// stmt is query as a statement of the write transaction tx: the writer's
// cached one, else one prepared for tx alone (the cache has it after tx).
func (s *Store) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st := s.wc.in(ctx, tx, query); st != nil {
		return st, nil
	}
	stmt, err := tx.PrepareContext(ctx, query)
	return stmt, classify(err)
}

// writeQ is the write transaction tx as sqlstore's Querier.
func (s *Store) writeQ(tx *sql.Tx) sqlQ { return sqlQ{q: tx, tx: tx, c: s.wc} }

// write runs fn in a transaction on the writer connection. A ctx fenced
// by a lease (store.WithFence) writes only while the lease has the fence's
// holder and term (checkFence).
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return classify(err)
	}
	defer s.wc.prepareSeen(ctx)
	if err := checkFence(ctx, s.writeQ(tx)); err != nil {
		tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return classify(tx.Commit())
}

// querier is what reads need from a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// classify gives driver errors that callers can act on their errdefs class.
// An error that has a class already keeps it.
func classify(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || errdefs.Code(err) != "internal" {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", errdefs.ErrConflict, err)
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	case sqlite3.SQLITE_FULL:
		// The disk (or max_page_count) is full: the write is lost, the
		// store is not; it works again once space is freed.
		return fmt.Errorf("%w: %w", errdefs.ErrStorageFull, err)
	}
	return err
}

// isUnique reports whether err is a unique or primary key clash.
func isUnique(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

var _ store.Store = (*Store)(nil)
