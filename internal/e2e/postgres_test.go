package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/store/postgres/pgtest"
)

// TestMigrateStoreThenServeFromPostgres: a coordinator on SQLite with a
// node and a finished suite is stopped, its state copied into PostgreSQL
// with `nodemgr migrate-store` (every table verified), and started again
// on PostgreSQL: the same admin token works, the suite and its results
// are there, the agent reconnects with its credential, and a new suite
// runs to completion.
func TestMigrateStoreThenServeFromPostgres(t *testing.T) {
	s := startServer(t)
	startAgent(t, s, "mover")
	node := waitStatus(t, s, "mover", api.StatusOnline, 20*time.Second)
	createSuite(t, s, api.SuiteSpec{Name: "before", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
	submit(t, s, "before", []api.TaskSpec{sh("echo one"), sh("echo two"), sh("exit 3")})
	s.client().CloseSuite(context.Background(), "before")
	waitSuite(t, s, "before", api.SuiteComplete, time.Minute)

	s.signal(syscall.SIGTERM)
	if code := s.wait(10 * time.Second); code != 0 {
		t.Fatalf("server exited %d on SIGTERM", code)
	}
	url := pgtest.NewDatabase(t)
	out, stderr, code := s.run(t, "migrate-store", "--from", "sqlite:"+s.dataDir+"/nodemgr.db", "--to", url)
	if code != 0 || !strings.Contains(out, "copied and verified") || !strings.Contains(stderr, "copied tasks") {
		t.Fatalf("migrate-store: exit %d\n%s%s", code, out, stderr)
	}
	for _, table := range []string{"nodes", "suites", "tasks", "tokens", "users"} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(l, table+" ") }) {
			t.Errorf("migrate-store report lacks table %s:\n%s", table, out)
		}
	}

	s.args = append(s.args, "--db", url)
	s.restart(t)
	su, err := s.client().Suite(context.Background(), "before")
	if err != nil || su.Counts.Finished != 2 || su.Counts.Failed != 1 {
		t.Errorf("suite before on PostgreSQL: %+v, %v; want 2 finished and 1 failed, as on SQLite", su.Counts, err)
	}
	waitFor(t, 30*time.Second, "the agent back, with its credential", func() (bool, string) {
		n, _ := nodeByName(t, s, "mover")
		return n.Connected && n.ID == node.ID, n.Status
	})
	createSuite(t, s, api.SuiteSpec{Name: "after", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
	submit(t, s, "after", []api.TaskSpec{sh("echo a"), sh("echo b")})
	s.client().CloseSuite(context.Background(), "after")
	if su := waitSuite(t, s, "after", api.SuiteComplete, time.Minute); su.Counts.Finished != 2 {
		t.Errorf("a suite on PostgreSQL: %+v, want 2 finished", su.Counts)
	}
}
