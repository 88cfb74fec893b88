package sqlite

import "testing"

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT a FROM t WHERE id = $1`:                      `SELECT a FROM t WHERE id = ?1`,
		`UPDATE t SET a = $2, b = $12 WHERE id = $1`:         `UPDATE t SET a = ?2, b = ?12 WHERE id = ?1`,
		`SELECT json_extract(spec, '$.name') FROM t`:         `SELECT json_extract(spec, '$.name') FROM t`,
		`SELECT 'costs $1' FROM t WHERE a = $1`:              `SELECT 'costs $1' FROM t WHERE a = ?1`,
		`SELECT "col$1" FROM t WHERE a = $1 AND b = 'it''s'`: `SELECT "col$1" FROM t WHERE a = ?1 AND b = 'it''s'`,
		`SELECT $`: `SELECT $`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}
