package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// bouncerBin is Debian's PgBouncer.
const bouncerBin = "/usr/sbin/pgbouncer"

// Bouncer starts PgBouncer in transaction mode in front of the database
// at dbURL (one NewDatabase made), listening on 127.0.0.1, stopped when
// the test ends, and returns a URL through it that the stores can use:
// statements are sent unnamed (default_query_exec_mode=exec), since a
// PgBouncer older than 1.21 cannot keep named ones across transactions.
// Without PgBouncer installed the test skips, or fails where CI or
// NODEMGR_REQUIRE_POSTGRES is set.
func Bouncer(t testing.TB, dbURL string) string {
	t.Helper()
	if _, err := os.Stat(bouncerBin); err != nil {
		noServer(t, &missingError{what: "pgbouncer (Debian: apt-get install pgbouncer)"})
	}
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("pgtest: bouncer for %s: %v", dbURL, err)
	}
	dir, err := os.MkdirTemp("", "pgtest-bouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	owner, err := serverUser()
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	ini := fmt.Sprintf(`[databases]
%[1]s = host=%[2]s port=%[3]d dbname=%[1]s user=%[4]s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[5]d
unix_socket_dir =
auth_type = trust
auth_file = %[6]s/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,idle_in_transaction_session_timeout
logfile = %[6]s/pgbouncer.log
pidfile = %[6]s/pgbouncer.pid
`, cfg.Database, cfg.Host, cfg.Port, cfg.User, port, dir)
	users := fmt.Sprintf("%q \"\"\n", cfg.User)
	for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if owner != nil {
		os.Chown(dir, owner.uid, owner.gid)
	}
	cmd := exec.Command(bouncerBin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = sysProcAttr(owner, true)
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	through := (&url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: addr, Path: "/" + cfg.Database,
		RawQuery: url.Values{"sslmode": {"disable"}, "default_query_exec_mode": {"exec"}}.Encode()}).String()
	if err := waitAnswers(through); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		t.Fatalf("pgtest: pgbouncer: %v\n%s", err, log)
	}
	return through
}

// waitAnswers waits until a query through url works.
func waitAnswers(u string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("it did not answer within 10s"), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
