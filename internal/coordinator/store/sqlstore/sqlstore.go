// Package sqlstore holds the store logic both SQL databases share, written
// once over a small driver interface: each database package (sqlite,
// postgres) keeps its connection, migrations, error classes and hot paths
// (adding tasks in batches, claims, how a batch of reports is sent,
// heartbeat batches, LISTEN/NOTIFY) and embeds a Store for the rest.
//
// Statements here are written for both databases: placeholders are $1,
// $2, ... (the SQLite driver rewrites them to ?1, ?2, ...), and what
// differs goes through the Driver: a row lock's clause, a list as an
// argument, a JSON column, and the few statements each database tunes
// (counts, releasing dependents).
package sqlstore

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlrow"
)

// Driver is what one SQL database gives the shared store.
type Driver interface {
	// Write runs fn in a write transaction, fenced by ctx's lease
	// (store.WithFence) and run again where the database aborts it for a
	// conflict it can resolve by retrying. Errors come back classified.
	Write(ctx context.Context, fn func(Querier) error) error
	// Read runs fn in a read-only transaction that sees one snapshot.
	Read(ctx context.Context, fn func(Querier) error) error
	// Reader runs reads outside a transaction.
	Reader() Querier
	// Classify gives a driver error its errdefs class; an error that has
	// one keeps it.
	Classify(err error) error
	// IsUnique reports whether err is a unique or primary key clash.
	IsUnique(err error) bool
	// NoRows reports whether a QueryRow found nothing.
	NoRows(err error) bool
	// Lock is a row-locking clause for a SELECT in Write, such as
	// Lock("FOR UPDATE"): the clause where the database locks rows, ""
	// where writes are serial anyway.
	Lock(clause string) string
	// InJSONArray is a condition true where the JSON array of strings in
	// column col holds one of the strings of the argument placeholder ph,
	// made with TextList.
	InJSONArray(col, ph string) string
	// TextList is a list of strings as InJSONArray's and In's argument.
	TextList(vs []string) any
	// In is a condition true where column col holds one of the strings of
	// the argument placeholder ph, made with TextList.
	In(col, ph string) string
	// JSON is the JSON document that the text column col holds, for the
	// operators -> and ->>, which both databases share.
	JSON(col string) string
	// Now is the store's clock.
	Now() time.Time

	// SuiteCounts is the join that reads suite s's task counts as c
	// (c.pending, c.ready, c.running, c.finished, c.failed, c.cancelled).
	SuiteCounts() string
	// NewSuiteCounts is the statement that makes a new suite's counts
	// ($1 the suite's ID).
	NewSuiteCounts() string
	// CancelSuiteTasks cancels the suite's Pending, Ready and Running
	// tasks in tx, and counts what it moved.
	CancelSuiteTasks(ctx context.Context, tx Querier, suiteID string, now time.Time) error
	// InsertOrder is the column that orders a table's rows as they were
	// inserted.
	InsertOrder() string

	// ApplyCounts adds the tally t to suite_counts in tx.
	ApplyCounts(ctx context.Context, tx Querier, t sqlrow.Tally) error
	// PlanEach is tx planning each statement for its arguments, for those
	// that name a list of rows whose length a cached generic plan would
	// guess; tx itself where the database plans each statement anyway.
	PlanEach(tx Querier) Querier
	// MayHaveDeps is false while no task has ever waited for another, so
	// that ending tasks need not look for dependents.
	MayHaveDeps() bool
	// ReleaseDeps is the statement that counts down the Pending dependents
	// of the finished tasks $1 (made with TextList), each by as many of
	// them as it waits for, makes Ready those at zero, stamps them $2, and
	// returns the suite_id and state of each.
	ReleaseDeps() string
	// NewTasks is a submission of tasks, all with IDs, as the database
	// inserts them.
	NewTasks(tasks []store.Task) (NewTasks, error)
	// Reports is a batch of reports as the database applies them,
	// encoded before the write transaction takes its locks.
	Reports(b Batch) (Reports, error)
}

// Querier runs statements on a pool or in a transaction.
type Querier interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Rows is a query's result, read row by row.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a single row's result.
type Row interface {
	Scan(dest ...any) error
}

// Store implements the store methods both databases share.
type Store struct {
	d Driver
	// auth keeps the tokens and users that requests authenticate with;
	// every write to them empties it (store.AuthCache).
	auth *store.AuthCache
}

// New returns the shared store over d.
func New(d Driver) *Store { return &Store{d: d, auth: store.NewAuthCache()} }

// AuthChanged empties the cache of tokens and users: another server, or
// another process, changed them.
func (s *Store) AuthChanged() { s.auth.Changed() }
