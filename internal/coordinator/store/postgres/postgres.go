package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Waiting for another process's migration: how often to look whether its
// lock is free, and for how long before giving up.
const (
	migrationLockPoll = 250 * time.Millisecond
	migrationLockWait = 5 * time.Minute
)

// A transaction that PostgreSQL aborted to break a deadlock or a
// serialization conflict runs again, up to maxTries times in all.
const maxTries = 5

// Store is a store.Store kept in a PostgreSQL database. Several Stores,
// in one process or in several, may share the database.
type Store struct {
	*sqlstore.Store // what both SQL stores share

	pool  *pgxpool.Pool
	now   func() time.Time
	shard func() int // the suite_counts shard a transaction adds to
	// listen is where Listen connects: the store's database, or a direct
	// URL where the store's goes through a pooler (WithListenURL).
	listen *pgx.ConnConfig
}

// Open connects to the PostgreSQL database at url (postgres://... or
// postgresql://...), checks that it answers, and brings its schema up to
// date. Several processes may open one database at once: one migrates,
// the others wait for it.
func Open(ctx context.Context, url string, logger *slog.Logger, opts ...Option) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := poolConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	listen := cfg.ConnConfig
	if o.listenURL != "" {
		lc, err := pgx.ParseConfig(o.listenURL)
		if err != nil {
			return nil, errdefs.Class(fmt.Errorf("open store: parse the listen URL: %s", parseProblem(err)), errdefs.ErrInvalid)
		}
		listen = lc
	}
	where := fmt.Sprintf("postgres %s/%s", hostOf(cfg.ConnConfig), cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", where, classify(err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w", where, classify(err))
	}
	if err := migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w", where, err)
	}
	logger.Debug("store opened", "database", where, "max_conns", cfg.MaxConns)
	s := &Store{pool: pool, now: time.Now, shard: randomShard, listen: listen}
	s.Store = sqlstore.New(driver{s})
	return s, nil
}

// Option tunes Open.
type Option func(*options)

type options struct{ listenURL string }

// WithListenURL makes Listen connect to url instead of the store's URL:
// LISTEN holds a session, which PgBouncer in transaction mode does not
// give, so behind one Listen needs the database directly.
func WithListenURL(url string) Option { return func(o *options) { o.listenURL = url } }

// poolConfig parses url. A pool size the URL does not set (pool_max_conns)
// is sized for a server rather than pgx's default of the CPU count.
func poolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errdefs.Class(fmt.Errorf("parse the PostgreSQL URL: %s", parseProblem(err)), errdefs.ErrInvalid)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(8, 2*runtime.GOMAXPROCS(0)))
	}
	// A server that stops mid-transaction (paused, its machine frozen)
	// must not hold its row locks for ever: a fenced write holds the
	// leader lease's row, which the next leader must lock to take over.
	// PostgreSQL ends such a session after this long idle in its
	// transaction; the URL may set another.
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.Itoa(int(idleInTransaction.Milliseconds()))
	}
	return cfg, nil
}

// idleInTransaction bounds how long a transaction may wait on its client.
// Every transaction of this store runs its statements back to back, so
// the limit only ever ends one whose process stopped.
const idleInTransaction = 5 * time.Second

// parseProblem is what pgx says is wrong with a connection string, without
// the string itself: pgx masks passwords in it only on a best-effort basis.
func parseProblem(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "`: "); ok {
		return after
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return "the URL is malformed"
	}
	return msg
}

// hostOf names the server for messages: host:port, or the socket directory.
func hostOf(c *pgx.ConnConfig) string {
	if strings.HasPrefix(c.Host, "/") {
		return c.Host
	}
	return c.Host + ":" + strconv.Itoa(int(c.Port))
}

// migrate applies the embedded migrations that the database lacks. The
// lock is goose's table lock, a row that a lease keeps, not a session
// advisory lock: it works through any pool or PgBouncer, and a process
// that dies holding it holds it no longer than the lease.
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	locker, err := lock.NewPostgresTableLocker(
		lock.WithTableLockTimeout(migrationLockPoll, uint64(migrationLockWait/migrationLockPoll)),
		lock.WithTableLogger(logger),
		// Wait while another process holds the lock; fail at once on a
		// database error, which waiting would not cure.
		lock.WithTableRetryPolicy(func(err error) bool {
			var pe *pgconn.PgError
			return !errors.As(err, &pe) && !connectionLost(err)
		}))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithLocker(locker),
		goose.WithSlog(logger),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Most opens find nothing to do: they ask without taking the lock, so
	// that replicas restarting together do not queue for it. (On an empty
	// database, goose's Up makes its version table before it takes the
	// lock; replicas that race to make it retry a second later.)
	if pending, err := hasPending(ctx, pool, p); err != nil || !pending {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", classify(err))
	}
	done := make([]sqlrow.Migrated, len(results))
	for i, r := range results {
		done[i] = sqlrow.Migrated{Version: r.Source.Version, Duration: r.Duration}
	}
	sqlrow.LogMigrated(logger, done)
	return nil
}

// hasPending reports, without the migration lock, whether the database's
// version (goose's record; none yet: 0) is below the newest migration's.
// A database that a newer nodemgr migrated further is refused.
func hasPending(ctx context.Context, pool *pgxpool.Pool, p *goose.Provider) (bool, error) {
	var versioned bool
	var version int64
	err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&versioned)
	if err == nil && versioned {
		err = pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version`).Scan(&version)
	}
	if err != nil {
		return false, fmt.Errorf("migrate: read the schema version: %w", classify(err))
	}
	sources := p.ListSources()
	if len(sources) == 0 {
		return false, nil
	}
	known := sources[len(sources)-1].Version
	if err := sqlrow.CheckSchemaVersion(version, known); err != nil {
		return false, err
	}
	return version < known, nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// querier is what statements need from the pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// planned, passed as a statement's first argument, has PostgreSQL plan
// the statement for the arguments of each call, where pgx would otherwise
// run a prepared statement whose cached generic plan knows nothing of them.
// Statements that join a batch sent as arrays take it: a generic plan
// guesses the batch's size, and the guess that a report batch is small
// made PostgreSQL walk the node's running tasks once per report (5x slower
// for 256 reports).
const planned = pgx.QueryExecModeCacheDescribe

// write runs fn in a READ COMMITTED transaction and commits it. What must
// not race takes row locks (SELECT ... FOR UPDATE, or an UPDATE that
// re-checks its condition on the row it locked); when PostgreSQL breaks a
// deadlock between two writers by aborting one, or a serialization
// conflict aborts it, the aborted one runs again from the start, fn
// included, after a short random pause. A ctx fenced by a lease
// (store.WithFence) writes only while the lease has the fence's holder and
// term (fenced).
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if want, ok := store.FenceFrom(ctx); ok {
		fn = fenced(ctx, want, fn)
	}
	for try := 1; ; try++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil {
			return nil
		}
		if try == maxTries || !retryable(err) {
			return classify(err)
		}
		pause := time.Duration(rand.Int64N(int64(time.Duration(try) * 10 * time.Millisecond)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
}

// read runs fn in a read-only REPEATABLE READ transaction: every query in
// it sees the same snapshot, and it never waits for a writer.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	return classify(err)
}

// retryable reports whether PostgreSQL aborted a transaction that may
// succeed if it runs again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// classify gives errors that callers can act on their errdefs class: the
// same classes the SQLite store gives its driver's equivalents. An error
// that has a class already keeps it.
func classify(err error) error {
	if err == nil || hasClass(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if class := classOf(pe); class != nil {
			return errdefs.Class(err, class)
		}
		return err
	}
	if connectionLost(err) {
		return errdefs.Class(fmt.Errorf("PostgreSQL is unreachable or dropped the connection (down, restarting, out of connections, or the network is cut); try again once it answers: %w", err), errdefs.ErrUnavailable)
	}
	return err
}

// classOf is the class of an error PostgreSQL reported, by SQLSTATE.
func classOf(pe *pgconn.PgError) error {
	switch pe.Code {
	case "23505": // unique_violation
		return errdefs.ErrConflict
	case "23503": // foreign_key_violation: the row it names is gone
		return errdefs.ErrNotFound
	case "53100": // disk_full
		return errdefs.ErrStorageFull
	case "40001", "40P01", // serialization_failure, deadlock_detected (after retries)
		"55P03", // lock_not_available
		"25006", // read_only_sql_transaction: a standby
		"57014": // query_canceled by statement_timeout
		return errdefs.ErrUnavailable
	}
	switch pe.Code[:2] {
	case "08", // connection exception
		"53", // insufficient resources: out of memory, too many connections
		"57": // operator intervention: shutdown, cannot connect now
		return errdefs.ErrUnavailable
	case "22": // data exception: a value PostgreSQL cannot hold, such as a NUL in text
		return errdefs.ErrInvalid
	}
	return nil
}

// connectionLost reports whether err is a connection that failed or broke,
// as opposed to an answer from the server.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// hasClass reports whether err already carries an errdefs class.
func hasClass(err error) bool {
	for _, c := range []error{errdefs.ErrNotFound, errdefs.ErrConflict, errdefs.ErrInvalid,
		errdefs.ErrUnavailable, errdefs.ErrPermission} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// isUnique reports whether err is a unique or primary key clash.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// constraint names the constraint err violated, if it did.
func constraint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.ConstraintName
	}
	return ""
}

// detail is PostgreSQL's detail of err, such as the key that clashed.
func detail(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		return pe.Detail
	}
	return "see the server log"
}

// noRows reports whether a QueryRow found nothing.
func noRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// asJSON is SQL that reads the JSON text in column col. PostgreSQL's JSON
// functions refuse the escape \u0000 (a NUL, which a task's argv or output
// may hold) anywhere in a document, so it reads as U+FFFD: the document
// stays valid JSON, and a query that looks into it works whatever it holds.
func asJSON(col string) string {
	return `replace(` + col + `, E'\\u0000', E'\\ufffd')::json`
}

var _ store.Store = (*Store)(nil)
