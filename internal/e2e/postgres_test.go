package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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

// startReplica starts another server on s's database and data dir (the
// admin token is the same), on an address of its own.
func startReplica(t *testing.T, s *server) *server {
	t.Helper()
	r := &server{addr: freeAddr(t), dataDir: s.dataDir, token: s.token}
	r.args = slices.Clone(s.args)
	for i, a := range r.args {
		if a == "--listen" {
			r.args[i+1] = r.addr
		}
	}
	r.restart(t)
	return r
}

// TestTwoServersShareOnePostgres: two servers on one database, an agent
// connected to each. A suite submitted through the first runs on both
// agents (the second server hears the wake), a tag set through the first
// reaches the agent of the second (its outbox is signalled), and a
// cancel through the second stops the tasks on both.
func TestTwoServersShareOnePostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s1 := startServer(t, "--db", url)
	s2 := startReplica(t, s1)
	startAgent(t, s1, "on-one")
	agentTwo := startAgent(t, s2, "on-two")
	one := waitStatus(t, s1, "on-one", api.StatusOnline, 20*time.Second)
	two := waitStatus(t, s1, "on-two", api.StatusOnline, 20*time.Second)

	createSuite(t, s1, api.SuiteSpec{Name: "shared", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, s1, "shared", slices.Repeat([]api.TaskSpec{sh("sleep 0.3")}, 12))
	s1.client().CloseSuite(context.Background(), "shared")
	waitSuite(t, s1, "shared", api.SuiteComplete, time.Minute)
	ran := map[string]int{}
	for _, tk := range allTasks(t, s1, "shared") {
		if tk.Result != nil {
			ran[tk.Result.NodeID]++
		}
	}
	if ran[one.ID] == 0 || ran[two.ID] == 0 || ran[one.ID]+ran[two.ID] != 12 {
		t.Errorf("tasks ran %v on (%s, %s); want all 12, on both agents", ran, one.ID, two.ID)
	}

	// A tag set through the first server reaches the agent of the second
	// at once (its outbox is signalled), not at its next reconnect.
	if _, _, code := s1.run(t, "node", "tag", "on-two", "--add", "via-one"); code != 0 {
		t.Fatal("node tag through the first server failed")
	}
	waitFor(t, 5*time.Second, "the agent on the second server to receive the tag", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(agentTwo.dataDir, "agent.json"))
		var st struct {
			Tags []string `json:"tags"`
		}
		json.Unmarshal(b, &st)
		return err == nil && slices.Contains(st.Tags, "via-one"), string(b)
	})

	// Each server shows both agents connected.
	for _, srv := range []*server{s1, s2} {
		for _, name := range []string{"on-one", "on-two"} {
			if n, _ := nodeByName(t, srv, name); !n.Connected {
				t.Errorf("node %s through server %s: connected false; want true (its agent is connected to one of the two)", name, srv.addr)
			}
		}
	}

	// A call to the local API of an agent connected to the other server
	// is relayed there, answers and errors alike.
	if out, stderr, code := s1.run(t, "service", "ls", "on-two"); code != 0 {
		t.Errorf("service ls on-two through the first server: exit %d\n%s%s; want the list relayed from the second", code, out, stderr)
	}
	if _, stderr, code := s1.run(t, "artifact", "show", "on-two", "acme:none:1"); code == 0 || !strings.Contains(stderr, "not installed") && !strings.Contains(stderr, "not found") {
		t.Errorf("artifact show of a missing artifact through the first server: exit %d, %q; want the agent's not-found, relayed", code, stderr)
	}

	createSuite(t, s1, api.SuiteSpec{Name: "long", WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, s1, "long", slices.Repeat([]api.TaskSpec{sh("sleep 60")}, 4))
	waitFor(t, 30*time.Second, "a long task running on each agent", func() (bool, string) {
		su, err := s1.client().Suite(context.Background(), "long")
		return err == nil && su.Counts.Running == 2, fmt.Sprint(su.Counts, err)
	})
	if _, err := s2.client().CancelSuite(context.Background(), "long"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "both agents idle after the cancel", func() (bool, string) {
		a, _ := nodeByName(t, s1, "on-one")
		b, _ := nodeByName(t, s1, "on-two")
		return a.AgentState == api.AgentIdle && b.AgentState == api.AgentIdle, a.AgentState + " " + b.AgentState
	})
}
