package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// waitUntil polls cond every 10ms until it holds or wait passes, and fails
// the test saying what with the last state cond described.
func waitUntil(t *testing.T, wait time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, wait, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leads waits until s leads (or, with want false, does not), and returns
// the term it leads in.
func leads(t *testing.T, s *Server, want bool, wait time.Duration) int64 {
	t.Helper()
	var term int64
	waitUntil(t, wait, fmt.Sprintf("replica %s leading: %v", s.cfg.ReplicaID, want), func() (bool, string) {
		l, ok := s.hub.Leads()
		term = l.Term
		return ok == want, fmt.Sprintf("leading %v at term %d", ok, l.Term)
	})
	return term
}

// get fetches url with token and returns the body of a 200.
func get(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// TestSoleServerLeads: on SQLite the one server leads at once, even when a
// previous run left the lease held (it crashed), shows it in /healthz and
// the metrics, and releases the lease when it stops.
func TestSoleServerLeads(t *testing.T) {
	s, st, admin := newServer(t, "", Config{ReplicaID: "r-one"})
	if _, err := st.AcquireLease(t.Context(), hub.LeaderLease, "r-crashed", time.Hour); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })

	if term := leads(t, s, true, 5*time.Second); term != 2 {
		t.Errorf("term = %d, want 2: the crashed run's term 1, taken over", term)
	}
	var h api.Health
	decode(t, get(t, url+"/healthz", ""), &h)
	if h != (api.Health{Status: "ok", Version: "dev", Replica: "r-one", Leader: true, Term: 2}) {
		t.Errorf("/healthz = %+v, want the replica leading at term 2", h)
	}
	metrics := get(t, url+"/metrics", admin)
	for _, want := range []string{`nodemgr_leader{replica="r-one"} 1`, `nodemgr_leader_term 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	<-done
	l, err := st.GetLease(context.Background(), hub.LeaderLease)
	if err != nil || l.Holder != "" || l.Term != 2 {
		t.Errorf("lease after shutdown = %+v, %v; want released at term 2", l, err)
	}
}

// TestLeadershipMoves: a replica whose lease another takes stops its
// singleton loops (here: closing idle suites), and starts them again at a
// new term once the lease is free.
func TestLeadershipMoves(t *testing.T) {
	lease := 150 * time.Millisecond
	s, st, _ := newServer(t, "", Config{LeaderLease: lease, SuiteTick: 10 * time.Millisecond, SuiteCloseAfter: 50 * time.Millisecond})
	serve(t, s)
	ctx := t.Context()
	first := leads(t, s, true, 5*time.Second)

	// Another replica takes over (the release stands for its lease
	// running out).
	if err := st.ReleaseLease(ctx, hub.LeaderLease, s.hub.Instance()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, hub.LeaderLease, "r-other", time.Hour); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	leads(t, s, false, lease+time.Second)
	t.Logf("stopped leading %s after the takeover (renewal every %s)", time.Since(start).Round(time.Millisecond), lease/3)

	// A follower closes no suite.
	if err := st.CreateSuite(ctx, store.Suite{ID: "s1", Spec: api.SuiteSpec{Name: "idle"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if su, _ := st.GetSuite(ctx, "s1"); su.State != api.SuiteOpen {
		t.Fatalf("a follower closed suite s1 (%s); only the leader may", su.State)
	}

	// The other goes away: this replica leads again, at a new term, and
	// its loops run again.
	if err := st.ReleaseLease(ctx, hub.LeaderLease, "r-other"); err != nil {
		t.Fatal(err)
	}
	if again := leads(t, s, true, lease+time.Second); again != first+2 {
		t.Errorf("term after leading again = %d, want %d", again, first+2)
	}
	waitUntil(t, 5*time.Second, "the new term closes the idle suite", func() (bool, string) {
		su, err := st.GetSuite(ctx, "s1")
		// Closed, then Complete at once: it has no task.
		return err == nil && su.State != api.SuiteOpen, fmt.Sprintf("%s %v", su.State, err)
	})
}

// TestLostConnectionToOneReplica: an agent that moved to another replica
// (its hello there came before this replica saw its old connection end)
// is not suspected, nor declared offline, by the replica it left. Two
// servers share one SQLite file here, as replicas share a database.
func TestLostConnectionToOneReplica(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{HeartbeatInterval: 10 * time.Minute, OfflineAfter: time.Hour, ReconnectGrace: 200 * time.Millisecond}
	a, st, admin := newServer(t, dir, cfg)
	b := secondReplica(t, dir, cfg)
	urlA, urlB := serve(t, a), serve(t, b)
	hs := httptest.NewServer(a.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{Server: a, http: hs, admin: admin}
	id, cred := ts.nodeNamed(t, "mover")

	old := fakeAgent(t, urlA, cred)
	time.Sleep(10 * time.Millisecond) // the hellos' times differ
	moved := fakeAgent(t, urlB, cred)
	defer moved.CloseNow()
	old.CloseNow() // A sees its connection end without a goodbye

	time.Sleep(cfg.ReconnectGrace + 300*time.Millisecond)
	n, err := st.GetNode(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n.Status != api.StatusOnline {
		t.Errorf("node connected to replica B is %s (%s), want online", n.Status, n.StatusReason)
	}
}

// secondReplica is another server on the SQLite file in dir.
func secondReplica(t *testing.T, dir string, cfg Config) *Server {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "nodemgr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.DataDir = filepath.Join(dir, "b")
	s, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
