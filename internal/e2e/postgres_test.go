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
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/postgres/pgtest"
)

// TestMigrateStoreThenServeFromPostgres: a coordinator on SQLite with a
// node and a finished suite is stopped, its state copied into PostgreSQL
// with `nodemgr migrate-store` (every table verified), and started again
// on PostgreSQL: the same admin token works, the suite and its results
// are there, the agent reconnects with its credential, and a new suite
// runs to completion.
func TestMigrateStoreThenServeFromPostgres(t *testing.T) {
	s := startServer(t)
	_, node := startOnline(t, s, "mover")
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
// admin token is the same), on an address of its own, with extra flags
// after s's.
func startReplica(t *testing.T, s *server, extra ...string) *server {
	t.Helper()
	r := &server{addr: freeAddr(t), dataDir: s.dataDir, token: s.token}
	r.args = append(slices.Clone(s.args), extra...)
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

// health asks one server how it is, leader or not.
func health(t *testing.T, s *server) (api.Health, error) {
	t.Helper()
	return client.New(s.addr, "").Health(context.Background())
}

// leaders lists the servers that say they lead.
func leaders(t *testing.T, servers ...*server) []*server {
	t.Helper()
	var out []*server
	for _, s := range servers {
		if h, err := health(t, s); err == nil && h.Leader {
			out = append(out, s)
		}
	}
	return out
}

// TestReplicasLoseNothingWhenTheLeaderIsKilled: three servers on one
// database, two agents on different servers each given all three URLs, a
// suite of 3,000 tasks that each append their name to a file. Mid-suite
// the leader is killed with SIGKILL: another leads within the lease and a
// renewal, the agent that was on it fails over, and the suite completes
// with every task run exactly once. Then the new leader is stopped with
// SIGSTOP past its lease: another takes over, and when it continues it
// follows, so one server leads. Last, a rolling restart of all three with
// tasks in flight runs each task once.
func TestReplicasLoseNothingWhenTheLeaderIsKilled(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s1 := startServer(t, "--db", url, "--leader-lease", "1s")
	waitFor(t, 10*time.Second, "the first server to lead", func() (bool, string) { return len(leaders(t, s1)) == 1, "" })
	s2, s3 := startReplica(t, s1), startReplica(t, s1)
	urls := func(first ...*server) string {
		var u []string
		for _, s := range first {
			u = append(u, s.url())
		}
		return strings.Join(u, ",")
	}
	startAgent(t, s1, "ra", "--server", urls(s1, s2, s3))
	startAgent(t, s2, "rb", "--server", urls(s2, s3, s1))
	waitStatus(t, s2, "ra", api.StatusOnline, 20*time.Second)
	waitStatus(t, s2, "rb", api.StatusOnline, 20*time.Second)

	const n = 5000
	ran := filepath.Join(sharedDir(t), "ran")
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = api.TaskSpec{Argv: []string{"sh", "-c", `echo "$T" >> ` + ran}, Env: map[string]string{"T": fmt.Sprint("t", i)}}
	}
	createSuite(t, s2, api.SuiteSpec{Name: "big", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
	submit(t, s2, "big", tasks)
	s2.client().CloseSuite(context.Background(), "big")
	waitFor(t, 2*time.Minute, "a third of the suite done", func() (bool, string) {
		su, err := s2.client().Suite(context.Background(), "big")
		return err == nil && su.Counts.Finished >= n/3, fmt.Sprint(su.Counts, err)
	})

	killed := time.Now()
	s1.signal(syscall.SIGKILL)
	s1.wait(10 * time.Second)
	waitFor(t, 10*time.Second, "another server to lead", func() (bool, string) { return len(leaders(t, s2, s3)) == 1, "" })
	took := time.Since(killed)
	if took > 1*time.Second+time.Second/3+2*time.Second {
		t.Errorf("a new leader after %v; want within the 1s lease and a renewal (and the polling)", took)
	}
	done, _ := s2.client().Suite(context.Background(), "big")
	t.Logf("leader killed with %d of %d tasks finished; a new leader after %v", done.Counts.Finished, n, took.Round(time.Millisecond))
	su := waitSuite(t, s2, "big", api.SuiteComplete, 3*time.Minute)
	if su.Counts.Finished != n || su.Counts.Failed != 0 || su.Counts.Cancelled != 0 {
		t.Errorf("suite after the leader's kill: %+v; want all %d finished", su.Counts, n)
	}
	b, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	dups := 0
	for _, c := range seen {
		if c > 1 {
			dups++
		}
	}
	t.Logf("%d lines in the file, %d distinct tasks", len(lines), len(seen))
	if len(seen) != n || dups != 0 {
		t.Errorf("%d lines, %d distinct tasks ran, %d ran more than once; want each of the %d exactly once", len(lines), len(seen), dups, n)
	}

	// SIGSTOP the leader past its lease: another takes over; continued,
	// it follows.
	lead := leaders(t, s2, s3)[0]
	other := s2
	if lead == s2 {
		other = s3
	}
	lead.signal(syscall.SIGSTOP)
	stopped := time.Now()
	waitFor(t, 20*time.Second, "the other server to lead while the leader is stopped", func() (bool, string) {
		h, err := health(t, other)
		return err == nil && h.Leader, fmt.Sprint(h, err)
	})
	t.Logf("leader stopped; the other leads after %v", time.Since(stopped).Round(time.Millisecond))
	lead.signal(syscall.SIGCONT)
	waitFor(t, 10*time.Second, "one leader after the stopped one continues", func() (bool, string) {
		h, err := health(t, lead)
		return err == nil && !h.Leader && len(leaders(t, s2, s3)) == 1, fmt.Sprint(h, err)
	})

	// A rolling restart of every server, one by one, with tasks in flight:
	// nothing is lost or run twice.
	s1.restart(t)
	ran2 := filepath.Join(sharedDir(t), "ran2")
	for i := range tasks {
		tasks[i].Argv = []string{"sh", "-c", `sleep 0.01; echo "$T" >> ` + ran2}
	}
	createSuite(t, s2, api.SuiteSpec{Name: "rolling", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2}})
	submit(t, s2, "rolling", tasks[:2000])
	s2.client().CloseSuite(context.Background(), "rolling")
	for _, s := range []*server{s1, s2, s3} {
		s.signal(syscall.SIGTERM)
		s.wait(20 * time.Second)
		s.restart(t)
		time.Sleep(500 * time.Millisecond) // let agents come back before the next one goes
	}
	su = waitSuite(t, s2, "rolling", api.SuiteComplete, 3*time.Minute)
	b, err = os.ReadFile(ran2)
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Fields(string(b))
	clear(seen)
	for _, l := range lines {
		seen[l]++
	}
	t.Logf("rolling restart: %d lines, %d distinct tasks, suite %+v", len(lines), len(seen), su.Counts)
	if su.Counts.Finished != 2000 || len(seen) != 2000 || len(lines) != 2000 {
		t.Errorf("after a rolling restart: suite %+v, %d lines, %d distinct; want 2000 finished, each run once", su.Counts, len(lines), len(seen))
	}
	if l := leaders(t, s1, s2, s3); len(l) != 1 {
		t.Errorf("%d leaders after the rolling restart, want 1", len(l))
	}
}

// TestServersThroughPgBouncer: two servers reach the database through
// PgBouncer in transaction mode (LISTEN goes to the database itself, as
// --db-listen-url says), an agent on each: a suite of 5,000 tasks runs to
// completion with every task run once, on both agents.
func TestServersThroughPgBouncer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	bounced := pgtest.Bouncer(t, url)
	s1 := startServer(t, "--db", bounced, "--db-listen-url", url)
	s2 := startReplica(t, s1)
	startAgent(t, s1, "pb-one")
	startAgent(t, s2, "pb-two")
	one := waitStatus(t, s1, "pb-one", api.StatusOnline, 20*time.Second)
	two := waitStatus(t, s1, "pb-two", api.StatusOnline, 20*time.Second)

	const n = 5000 // the suite of TestReplicasLoseNothingWhenTheLeaderIsKilled
	ran := filepath.Join(sharedDir(t), "ran")
	tasks := make([]api.TaskSpec, n)
	for i := range tasks {
		tasks[i] = api.TaskSpec{Argv: []string{"sh", "-c", `echo "$T" >> ` + ran}, Env: map[string]string{"T": fmt.Sprint("t", i)}}
	}
	createSuite(t, s1, api.SuiteSpec{Name: "bounced", WorkerSchedule: api.WorkerSchedule{WorkerCount: 2, TaskPrefetchCount: prefetch(4)}})
	submit(t, s1, "bounced", tasks)
	s1.client().CloseSuite(context.Background(), "bounced")
	su := waitSuite(t, s2, "bounced", api.SuiteComplete, 3*time.Minute)
	b, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if su.Counts.Finished != n || len(lines) != n || len(seen) != n {
		t.Errorf("through PgBouncer: suite %+v, %d lines, %d distinct; want %d finished, each run once", su.Counts, len(lines), len(seen), n)
	}
	on := map[string]int{}
	for _, tk := range allTasks(t, s1, "bounced") {
		if tk.Result != nil {
			on[tk.Result.NodeID]++
		}
	}
	if on[one.ID] == 0 || on[two.ID] == 0 {
		t.Errorf("tasks ran %v; want some on each agent (%s, %s)", on, one.ID, two.ID)
	}
}

// TestLeaderPingsAnAgentOnAnotherServer: the leader's liveness check of a
// node whose heartbeats are overdue reaches its agent through the server
// holding its session. The agent's server asks for a heartbeat only every
// 30s, the leader expects one every second: the node is suspected each
// round, pinged through its server, and stays online.
func TestLeaderPingsAnAgentOnAnotherServer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s1 := startServer(t, "--db", url)
	waitFor(t, 10*time.Second, "the first server to lead", func() (bool, string) { return len(leaders(t, s1)) == 1, "" })
	s2 := startReplica(t, s1, "--heartbeat-interval", "30s", "--offline-after", "60s")
	startAgent(t, s2, "quiet", "--server", s2.url())
	waitStatus(t, s1, "quiet", api.StatusOnline, 20*time.Second)
	deadline := time.Now().Add(6 * time.Second) // several offline windows of the leader
	for time.Now().Before(deadline) {
		if n, _ := nodeByName(t, s1, "quiet"); n.Status == api.StatusOffline {
			t.Fatalf("node quiet went offline (%s); want it pinged through its server and kept online", n.StatusReason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, _ := nodeByName(t, s1, "quiet"); n.Status == api.StatusOffline || n.LastHeartbeat == nil || time.Since(*n.LastHeartbeat) > 5*time.Second {
		t.Errorf("node quiet after 6s: %s, last heartbeat %v; want online, its pings counted as heartbeats", n.Status, n.LastHeartbeat)
	}
}
