package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxCachedStmts bounds a stmtCache. The store's queries are a fixed set
// of a few hundred (filters combine, values are parameters); a query past
// the bound is simply prepared each time, as every query once was.
const maxCachedStmts = 1024

// stmtCache keeps one *sql.Stmt per query for a *sql.DB, which
// database/sql prepares once on each connection that runs it. modernc
// takes tens of microseconds to parse and plan a statement, as long as a
// small claim takes to run: preparing every statement anew was 16% of a
// server's CPU while it ran lone tasks (nodemgr bench latency).
//
// A query first seen in a transaction is prepared after the transaction
// (prepareSeen), not in it: the writer's one connection is the
// transaction's, and readers in transactions could take every connection
// of their pool while waiting for one more.
type stmtCache struct {
	db    *sql.DB
	stmts sync.Map // query → *sql.Stmt

	mu   sync.Mutex
	n    int                 // statements in stmts
	seen map[string]struct{} // run unprepared: to prepare at the next prepareSeen
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, seen: map[string]struct{}{}}
}

// get returns query's statement, or nil when it is not prepared yet; then
// the next prepareSeen prepares it.
func (c *stmtCache) get(query string) *sql.Stmt {
	if st, ok := c.stmts.Load(query); ok {
		return st.(*sql.Stmt)
	}
	c.mu.Lock()
	if c.n+len(c.seen) < maxCachedStmts {
		c.seen[query] = struct{}{}
	}
	c.mu.Unlock()
	return nil
}

// prepare prepares queries now; for Open, before any transaction runs.
func (c *stmtCache) prepare(ctx context.Context, queries ...string) error {
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return classify(err)
		}
		c.put(q, st)
	}
	return nil
}

// prepareSeen prepares the queries get did not find, outside any
// transaction of the caller's. A query that fails to prepare (the context
// ended) is left to be seen again.
func (c *stmtCache) prepareSeen(ctx context.Context) {
	c.mu.Lock()
	if len(c.seen) == 0 {
		c.mu.Unlock()
		return
	}
	seen := c.seen
	c.seen = map[string]struct{}{}
	c.mu.Unlock()
	for q := range seen {
		if _, ok := c.stmts.Load(q); ok {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return
		}
		c.put(q, st)
	}
}

func (c *stmtCache) put(query string, st *sql.Stmt) {
	if _, loaded := c.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

// in returns query's statement to run in tx (nil tx: on the pool), or nil.
func (c *stmtCache) in(ctx context.Context, tx *sql.Tx, query string) *sql.Stmt {
	st := c.get(query)
	if st == nil || tx == nil {
		return st
	}
	return tx.StmtContext(ctx, st)
}

func (c *stmtCache) close() error {
	var errs []error
	c.stmts.Range(func(_, st any) bool {
		errs = append(errs, st.(*sql.Stmt).Close())
		return true
	})
	return errors.Join(errs...)
}
