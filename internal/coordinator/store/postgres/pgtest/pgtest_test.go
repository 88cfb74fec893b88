package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// recorder is a testing.TB that notes how the test would end.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestNoServer(t *testing.T) {
	missing := &missingError{looked: []string{"/usr/lib/postgresql/15/bin"}}
	tests := []struct {
		name, ci, require string
		err               error
		skip, fail        bool
	}{
		{"missing binaries skip", "", "", missing, true, false},
		{"missing binaries fail in CI", "true", "", missing, false, true},
		{"missing binaries fail when required", "", "1", missing, false, true},
		{"another error fails", "", "", errors.New("initdb: disk full"), false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv("NODEMGR_REQUIRE_POSTGRES", tc.require)
			r := &recorder{TB: t}
			noServer(r, tc.err)
			if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
				t.Fatalf("noServer(%v) with CI=%q: skipped %q, failed %q; want skip %v, fail %v", tc.err, tc.ci, r.skipped, r.failed, tc.skip, tc.fail)
			}
			if msg := r.skipped + r.failed; tc.err == missing && !strings.Contains(msg, "install postgresql") {
				t.Errorf("noServer() said %q, want it to say to install postgresql", msg)
			}
		})
	}
}

func TestFindBinariesPrefersEnvBin(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvBin, dir)
	if got, err := findBinaries(); err != nil || got != dir {
		t.Errorf("findBinaries() with %s=%s = %q, %v; want %q", EnvBin, dir, got, err, dir)
	}
}

func TestMain(m *testing.M) { Main(m) }

// TestNewDatabase: each call gets a database of its own, which the test
// can use, and which is gone after the test; a server pgtest started
// listens on its unix socket only.
func TestNewDatabase(t *testing.T) {
	var names [2]string
	t.Run("make", func(t *testing.T) {
		for i := range names {
			url := NewDatabase(t)
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatalf("connect to %s: %v", url, err)
			}
			defer conn.Close(context.Background())
			if err := conn.QueryRow(t.Context(), `SELECT current_database()`).Scan(&names[i]); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), `CREATE TABLE t (x int)`); err != nil {
				t.Errorf("CREATE TABLE in a new database = %v", err)
			}
			if os.Getenv(EnvURL) == "" && !strings.Contains(url, "host=%2F") {
				t.Errorf("NewDatabase() = %s, want a unix socket's directory as its host", url)
			}
		}
		if names[0] == names[1] {
			t.Errorf("two NewDatabase calls gave one database, %s", names[0])
		}
	})
	var left int
	err := cluster.admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_database WHERE datname = ANY($1)`, names[:]).Scan(&left)
	if err != nil || left != 0 {
		t.Errorf("%d of the test's databases left after it ended (%v), want none", left, err)
	}
}
