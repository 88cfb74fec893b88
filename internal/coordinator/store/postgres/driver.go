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

func (d driver) TextList(vs []string) any { return vs }
func (d driver) Now() time.Time           { return d.s.now() }

// pgQuerier runs sqlstore's statements on a pool or a transaction.
type pgQuerier struct{ q querier }

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
