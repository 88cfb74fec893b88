package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// driver is the Store as sqlstore's Driver: the shared store's statements
// run on PostgreSQL through it.
type driver struct{ s *Store }

func (d driver) Write(ctx context.Context, fn func(sqlstore.Querier) error) error {
	return d.s.write(ctx, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

func (d driver) Read(ctx context.Context, fn func(sqlstore.Querier) error) error {
	return d.s.read(ctx, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

func (d driver) Reader() sqlstore.Querier  { return pgQuerier{d.s.pool} }
func (d driver) Classify(err error) error  { return classify(err) }
func (d driver) IsUnique(err error) bool   { return isUnique(err) }
func (d driver) NoRows(err error) bool     { return noRows(err) }
func (d driver) Lock(clause string) string { return " " + clause }
func (d driver) InJSONArray(col, ph string) string {
	return `EXISTS (SELECT 1 FROM json_array_elements_text(` + col + `::json) AS g(name) WHERE g.name = ANY(` + ph + `))`
}

func (d driver) TextList(vs []string) any                     { return vs }
func (d driver) In(col, ph string) string                     { return col + ` = ANY(` + ph + `)` }
func (d driver) JSON(col string) string                       { return asJSON(col) }
func (d driver) Now() time.Time                               { return d.s.now() }
func (d driver) PlanEach(q sqlstore.Querier) sqlstore.Querier { return plannedQuerier{q.(pgQuerier)} }
func (d driver) ReleaseDeps() string                          { return releaseDeps }

// MayHaveDeps is true: replicas cannot share a flag that says no task
// ever waited for another, so every ending looks its dependents up, one
// probe of task_deps's primary key per ended task, in one statement.
func (d driver) MayHaveDeps() bool { return true }

func (d driver) ApplyCounts(ctx context.Context, q sqlstore.Querier, t tally) error {
	return d.s.applyCounts(ctx, txOf(q), t)
}

// pgQuerier runs sqlstore's statements on a pool or a transaction.
type pgQuerier struct{ q querier }

// txOf is the transaction of a Querier that Write or Read made, for the
// hooks sqlstore calls inside them.
func txOf(q sqlstore.Querier) pgx.Tx { return q.(pgQuerier).q.(pgx.Tx) }

func (q pgQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q pgQuerier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return q.q.Query(ctx, query, args...)
}

func (q pgQuerier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.q.QueryRow(ctx, query, args...)
}

// plannedQuerier runs statements planned for each call's arguments
// (planned).
type plannedQuerier struct{ pgQuerier }

func (q plannedQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return q.pgQuerier.Exec(ctx, query, append([]any{planned}, args...)...)
}

func (q plannedQuerier) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return q.pgQuerier.Query(ctx, query, append([]any{planned}, args...)...)
}

func (q plannedQuerier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.pgQuerier.QueryRow(ctx, query, append([]any{planned}, args...)...)
}
