// Package sqlite is the embedded implementation of store.Store: one SQLite
// file beside the coordinator, no server to run.
//
// It uses the pure-Go driver modernc.org/sqlite in WAL mode with two
// connection pools: a single writer, so writes queue in Go instead of
// failing with SQLITE_BUSY, and several readers, which WAL lets read the last
// committed state while a write is in progress. The schema is versioned with
// goose migrations embedded from migrations/ and applied by Open, which
// refuses a file that a newer nodemgr migrated further than it knows.
//
// The schema is shaped so a PostgreSQL store can mirror it: TEXT ids, times
// as unix nanoseconds (NULL for "never"), lists and maps as JSON text.
//
// Tasks are dispatched under the single writer: a claim is one UPDATE of the
// first Ready tasks in (priority, insertion) order, and a batch of reports
// applies through statements conditioned on each attempt still holding its
// task, so the first commit wins without locks of its own. The dispatch
// loop's statements are prepared once, in Open. Tasks are indexed by state
// only where a state is looked for (Ready by suite to claim, Running by node
// to reclaim, Failed by suite to list), so a task that finishes leaves no
// index entry to keep.
//
// A suite's task counts are kept in suite_counts, in the same transaction
// as every change they count (see counts.go), so reading a suite costs the
// same however many tasks it has.
//
// Where store.Store's comments leave room, it behaves as the conformance
// suite in store/storetest pins down.
package sqlite
