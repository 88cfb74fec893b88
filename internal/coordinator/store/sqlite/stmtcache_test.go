package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlstore"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "nodemgr.db"), nil)
	if err != nil {
		t.Fatalf("Open() = %v, want nil", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A query first run in a transaction is prepared once the transaction
// ends, on the writer (whose one connection the transaction holds) and on
// the readers alike, and runs prepared from then on.
func TestStatementsArePreparedAfterTheirFirstTransaction(t *testing.T) {
	s := openStore(t)
	ctx := t.Context()
	const write = `UPDATE suites SET last_task_at = $1 WHERE id = $2`
	const read = `SELECT COUNT(*) FROM nodes WHERE name = $1`
	for i := range 2 {
		err := driver{s}.Write(ctx, func(q sqlstore.Querier) error {
			_, err := q.Exec(ctx, write, i, "s-none")
			return err
		})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		err = driver{s}.Read(ctx, func(q sqlstore.Querier) error {
			var n int
			return q.QueryRow(ctx, read, "none").Scan(&n)
		})
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if s.wc.get(rebind(write)) == nil {
		t.Errorf("the writer's statement %q is not prepared after its transactions", write)
	}
	if s.rc.get(rebind(read)) == nil {
		t.Errorf("the readers' statement %q is not prepared after their transactions", read)
	}
	if s.wc.get(rebind(read)) != nil {
		t.Errorf("the read %q was prepared on the writer", read)
	}
}

// The cache holds at most maxCachedStmts statements; queries past it still
// run, each prepared as it runs.
func TestStatementCacheIsBounded(t *testing.T) {
	s := openStore(t)
	ctx := t.Context()
	c := newStmtCache(s.r)
	defer c.close()
	for i := range maxCachedStmts + 20 {
		q := fmt.Sprintf(`SELECT %d`, i)
		var got int
		if st := c.in(ctx, nil, q); st != nil {
			t.Fatalf("query %d prepared before it was seen", i)
		}
		if err := s.r.QueryRowContext(ctx, q).Scan(&got); err != nil || got != i {
			t.Fatalf("%s = %d, %v", q, got, err)
		}
		if i%100 == 99 {
			c.prepareSeen(ctx)
		}
	}
	c.prepareSeen(ctx)
	if c.n != maxCachedStmts {
		t.Errorf("the cache holds %d statements, want the bound %d", c.n, maxCachedStmts)
	}
	if st := c.get(`SELECT 0`); st == nil {
		t.Error("the first query seen is not cached")
	} else if err := st.QueryRowContext(ctx).Scan(new(int)); err != nil {
		t.Errorf("run the cached statement: %v", err)
	}
	if st := c.get(fmt.Sprintf(`SELECT %d`, maxCachedStmts+10)); st != nil {
		t.Error("a query past the bound was cached")
	}
}

// A statement prepared before a transaction runs in it and sees its
// writes, on the writer's single connection without waiting for another.
func TestCachedStatementRunsInTheTransaction(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10e9)
	defer cancel()
	const count = `SELECT COUNT(*) FROM tmp_rows`
	if _, err := s.w.ExecContext(ctx, `CREATE TEMP TABLE tmp_rows (x)`); err != nil {
		t.Fatal(err)
	}
	if err := s.wc.prepare(ctx, count); err != nil {
		t.Fatal(err)
	}
	var before, inside int
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.writeQ(tx).QueryRow(ctx, count).Scan(&before); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tmp_rows VALUES (1)`); err != nil {
			return err
		}
		return s.writeQ(tx).QueryRow(ctx, count).Scan(&inside)
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if inside != before+1 {
		t.Errorf("the cached statement counted %d rows after an insert in its transaction, want %d", inside, before+1)
	}
}
