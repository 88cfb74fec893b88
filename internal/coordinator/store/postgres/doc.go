// Package postgres is the PostgreSQL implementation of store.Store, for
// coordinators that run as several server replicas sharing one database.
// It passes the conformance suite in store/storetest, as store/sqlite does,
// so the server behaves the same on either.
//
//	s, err := postgres.Open(ctx, "postgres://nodemgr@db.example/nodemgr", logger)
//
// It uses pgx through a pgxpool pool (pool_max_conns in the URL sizes it;
// unset, it is max(8, 2×GOMAXPROCS)). It holds no session state and no
// session-level advisory lock, so it works through PgBouncer in transaction
// mode; there, unless PgBouncer is 1.21 or newer with max_prepared_statements
// set, add default_query_exec_mode=exec to the URL, since pgx otherwise
// prepares statements on a connection and reuses them.
//
// # Schema and migrations
//
// The schema mirrors SQLite's table for table and column for column, with
// the same encodings (TEXT ids, BIGINT unix nanoseconds, JSON in TEXT), so
// the two packages read alike; migrations/00017_schema.sql says where it
// differs and why. Migrations are goose files embedded from migrations/ and
// applied by Open. The first one is numbered 00017, after the SQLite
// migration whose schema it equals, so that a schema version means the
// same tables in both stores. To change the schema, add the next number
// (00018_what.sql, then 00019_...) to internal/coordinator/store/sqlite/migrations and
// to internal/coordinator/store/postgres/migrations in the same commit, each in its
// own dialect; a change that only one store needs still gets an empty
// migration of that number in the other, so the numbers never part. Then
// run both stores' tests.
//
// A database at a migration newer than any this binary embeds (a newer
// nodemgr migrated it) is refused at Open, as in the SQLite store
// (sqlrow.CheckSchemaVersion), before anything is written.
//
// Opens that find the schema current take no lock. Otherwise goose's
// table lock serializes the migrators: a row in goose_lock held under a
// lease that the holder renews, not an advisory lock, so it works through
// any pool, and a migrator that dies holds it no longer than the lease.
// Several processes opening an empty database at once migrate it once.
//
// # Concurrency
//
// Writes run in READ COMMITTED transactions. What must not race takes row
// locks: read-modify-write calls (UpdateNode, UpdateSuite, ...) lock the row
// first (SELECT ... FOR UPDATE); state changes are single UPDATEs whose
// conditions PostgreSQL checks again on each row as it locks it, so a late
// or repeated report, or a task another replica moved meanwhile, changes
// nothing. A claim is one UPDATE of the first Ready tasks picked FOR UPDATE
// SKIP LOCKED: claimers on one suite, in one process or several, take
// disjoint tasks without waiting for each other, and a task moves only
// from the attempt it was picked at, so no attempt is handed out twice.
// Transactions that PostgreSQL aborts to break a deadlock or a serialization
// conflict run again, from the start, a few times (so a function passed to
// an Update call may run more than once).
//
// Nothing is cached in the process: another replica may change anything.
// (The SQLite store skips dependency lookups until a process-local flag
// says a task ever had one; here every task that ends looks its dependents
// up, one index probe each.) A suite's task counts live in suite_counts, in
// the transaction of every change they count, as in SQLite, but spread over
// a few shard rows per suite so that concurrent claims rarely queue on one
// row; readers add the shards up.
//
// Times come from the clock of the process that writes them, as in the
// SQLite store: keep the replicas' clocks in step (NTP), since one
// replica's cutoff is compared with another's heartbeat times.
//
// # Errors
//
// Errors have the classes the SQLite store gives: a missing row is
// errdefs.ErrNotFound (a foreign key that names a missing row too), a
// unique clash errdefs.ErrConflict, a full disk errdefs.ErrStorageFull, a
// value PostgreSQL cannot store (a NUL in text) errdefs.ErrInvalid, and a
// server that cannot be reached, drops the connection, shuts down or is out
// of connections errdefs.ErrUnavailable. A write whose connection broke at
// commit may or may not have been applied; the store does not retry it.
package postgres
