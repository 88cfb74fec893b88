package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

// driver is the Store as sqlstore's Driver: the shared store's statements
// run on SQLite through it.
type driver struct{ s *Store }

func (d driver) Write(ctx context.Context, fn func(sqlstore.Querier) error) error {
	return classify(d.s.write(ctx, func(tx *sql.Tx) error { return fn(d.s.writeQ(tx)) }))
}

func (d driver) Reader() sqlstore.Querier { return sqlQ{q: d.s.r, c: d.s.rc} }
func (d driver) Classify(err error) error { return classify(err) }
func (d driver) IsUnique(err error) bool  { return isUnique(err) }
func (d driver) NoRows(err error) bool    { return errors.Is(err, sql.ErrNoRows) }
func (d driver) Now() time.Time           { return d.s.now() }

// Lock is empty: SQLite has one writer, whose transaction holds the whole
// database.
func (d driver) Lock(string) string { return "" }

func (d driver) InJSONArray(col, ph string) string {
	return `EXISTS (SELECT 1 FROM json_each(` + col + `) AS g WHERE g.value IN (SELECT value FROM json_each(` + ph + `)))`
}

// TextList is JSON text: SQLite has no array parameters.
func (d driver) TextList(vs []string) any {
	b, _ := json.Marshal(vs) // strings always marshal
	return string(b)
}

func (d driver) In(col, ph string) string {
	return col + ` IN (SELECT value FROM json_each(` + ph + `))`
}

// JSON is the column itself: SQLite's JSON functions read JSON text.
func (d driver) JSON(col string) string { return col }

// PlanEach is tx: SQLite plans each statement with its arguments.
func (d driver) PlanEach(tx sqlstore.Querier) sqlstore.Querier { return tx }

func (d driver) MayHaveDeps() bool   { return d.s.deps.Load() }
func (d driver) ReleaseDeps() string { return releaseDeps }

func (d driver) ApplyCounts(ctx context.Context, tx sqlstore.Querier, t tally) error {
	return d.s.applyCounts(ctx, txOf(tx), t)
}

// txOf is the transaction of a Querier that Write made, for the hooks
// sqlstore calls inside it.
func txOf(q sqlstore.Querier) *sql.Tx { return q.(sqlQ).tx }

// Read runs fn in a read-only transaction on the readers' pool: WAL gives
// it one snapshot, beside the writer.
func (d driver) Read(ctx context.Context, fn func(sqlstore.Querier) error) error {
	tx, err := d.s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return classify(err)
	}
	// Deferred, so that a panic in fn (which net/http recovers) still
	// gives the connection back; the statements it saw are prepared
	// once it is back.
	defer d.s.rc.prepareSeen(ctx)
	defer tx.Rollback()
	return classify(fn(sqlQ{q: tx, tx: tx, c: d.s.rc}))
}

// sqlQ runs sqlstore's statements, their $N placeholders rewritten, each
// prepared once (c) where it can be.
type sqlQ struct {
	q interface {
		querier
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
	tx *sql.Tx    // q, if it is a transaction
	c  *stmtCache // nil: prepare each statement as it runs
}

// prepared is query's statement, or nil when it is not prepared yet.
func (q sqlQ) prepared(ctx context.Context, query string) *sql.Stmt {
	if q.c == nil {
		return nil
	}
	return q.c.in(ctx, q.tx, query)
}

func (q sqlQ) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	query = rebind(query)
	var res sql.Result
	var err error
	if st := q.prepared(ctx, query); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = q.q.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, classify(err)
	}
	n, err := res.RowsAffected()
	return n, classify(err)
}

func (q sqlQ) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	query = rebind(query)
	var rows *sql.Rows
	var err error
	if st := q.prepared(ctx, query); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = q.q.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, classify(err)
	}
	return sqlRows{rows}, nil
}

func (q sqlQ) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	query = rebind(query)
	if st := q.prepared(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.q.QueryRowContext(ctx, query, args...)
}

// sqlRows is *sql.Rows with a Close that returns nothing, like pgx's.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// rebound caches rebind's results: the shared statements are a fixed set.
var rebound sync.Map

// rebind rewrites PostgreSQL's $N placeholders to SQLite's ?N (the same
// numbered parameter), outside quoted strings.
func rebind(query string) string {
	if v, ok := rebound.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	quote := byte(0)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '$' && i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9':
			c = '?'
		}
		b.WriteByte(c)
	}
	out := b.String()
	rebound.Store(query, out)
	return out
}
