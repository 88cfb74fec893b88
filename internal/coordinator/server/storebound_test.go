package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/storemetrics"
)

// silentStore is a SQLite store whose calls, once silenced, wait until
// their context ends, as PostgreSQL's do while it is stopped (SIGSTOP).
// Authentication and the reads of GET /v1/nodes and /metrics can be
// silenced; everything else is the SQLite store's.
type silentStore struct {
	store.Store
	auth, data atomic.Bool // silence authentication; silence the rest
}

func (s *silentStore) wait(ctx context.Context, silent *atomic.Bool) error {
	if !silent.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *silentStore) TokenByHash(ctx context.Context, hash []byte) (store.Token, error) {
	if err := s.wait(ctx, &s.auth); err != nil {
		return store.Token{}, err
	}
	return s.Store.TokenByHash(ctx, hash)
}

func (s *silentStore) GetUser(ctx context.Context, name string) (store.User, error) {
	if err := s.wait(ctx, &s.auth); err != nil {
		return store.User{}, err
	}
	return s.Store.GetUser(ctx, name)
}

func (s *silentStore) ListNodes(ctx context.Context, f store.NodeFilter) ([]store.Node, error) {
	if err := s.wait(ctx, &s.data); err != nil {
		return nil, err
	}
	return s.Store.ListNodes(ctx, f)
}

func (s *silentStore) CountNodes(ctx context.Context) (map[string]int, error) {
	if err := s.wait(ctx, &s.data); err != nil {
		return nil, err
	}
	return s.Store.CountNodes(ctx)
}

func (s *silentStore) CountSuites(ctx context.Context) (map[string]int, api.TaskCounts, error) {
	if err := s.wait(ctx, &s.data); err != nil {
		return nil, api.TaskCounts{}, err
	}
	return s.Store.CountSuites(ctx)
}

// silentServer is a server with a store bound of bound over a silentStore,
// with a node, served by httptest.
func silentServer(t *testing.T, bound time.Duration) (*testServer, *silentStore) {
	t.Helper()
	dir := t.TempDir()
	db := openStore(t, dir)
	st := &silentStore{Store: db}
	s, admin := newServerOver(t, dir, Config{StoreTimeout: bound}, st)
	if _, err := db.CreateNode(t.Context(), store.Node{ID: "n-a", Name: "a", MachineID: "m-a", DataDir: "/d",
		Status: api.StatusOnline, RegisteredAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testServer{Server: s, http: hs, admin: admin}, st
}

// timedCall is call with a deadline of limit, and how long it took. A
// request that does not answer within limit fails the test.
func (ts *testServer) timedCall(t *testing.T, limit time.Duration, method, path string) (int, string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, ts.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	start := time.Now()
	resp, err := ts.http.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s did not answer within %s: %v", method, path, limit, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), time.Since(start)
}

// TestSilentStoreIs503WithinTheBound: a request whose store call does not
// answer is answered 503 within the store bound, saying so and what to do,
// whether the store falls silent in authentication or in the handler's
// own reads (issue 27: node ls hung for 22 s while PostgreSQL was stopped).
func TestSilentStoreIs503WithinTheBound(t *testing.T) {
	const bound = 200 * time.Millisecond
	tests := []struct {
		name      string
		auth      bool // silence authentication too
		wantStore string
	}{
		{"the handler's reads", false, "ListNodes"},
		{"authentication", true, "TokenByHash"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts, st := silentServer(t, bound)
			ts.mustCall(t, http.StatusOK, ts.admin, "GET", "/v1/nodes", nil, nil)
			st.data.Store(true)
			st.auth.Store(tc.auth)
			code, body, took := ts.timedCall(t, 5*time.Second, "GET", "/v1/nodes")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"code": "unavailable"`) {
				t.Errorf("GET /v1/nodes with a silent store = %d %s, want 503 unavailable", code, body)
			}
			for _, want := range []string{"the store did not answer within 200ms (" + tc.wantStore + ")", "--store-timeout"} {
				if !strings.Contains(body, want) {
					t.Errorf("GET /v1/nodes with a silent store = %s, want it to say %q", body, want)
				}
			}
			if took > bound+time.Second {
				t.Errorf("GET /v1/nodes with a silent store took %s, want about the bound (%s)", took, bound)
			}
		})
	}
}

// TestMetricsServeStaleCountsWhileTheStoreIsSilent: while the store does
// not answer, /metrics answers at once with the counts last read, marked
// stale with their age, and the server's own series (issue 27: /metrics
// hung for 29 s while PostgreSQL was stopped).
func TestMetricsServeStaleCountsWhileTheStoreIsSilent(t *testing.T) {
	const bound = 200 * time.Millisecond
	ts, st := silentServer(t, bound)
	code, body, _ := ts.timedCall(t, 5*time.Second, "GET", "/metrics")
	if code != http.StatusOK || !strings.Contains(body, "nodemgr_metrics_stale 0") || !strings.Contains(body, `nodemgr_nodes{status="online"} 1`) {
		t.Fatalf("GET /metrics = %d, want 200 with fresh counts:\n%s", code, grepLines(body, "nodemgr_"))
	}
	st.auth.Store(true)
	st.data.Store(true)
	ts.metrics.stats.Expire() // due to be read again

	for i := range 2 { // the second while the first's read still waits
		code, body, took := ts.timedCall(t, 5*time.Second, "GET", "/metrics")
		if code != http.StatusOK {
			t.Fatalf("scrape %d with a silent store = %d %s, want 200", i+1, code, body)
		}
		for _, want := range []string{"nodemgr_metrics_stale 1", `nodemgr_nodes{status="online"} 1`, "nodemgr_agents_connected 0"} {
			if !strings.Contains(body, want) {
				t.Errorf("scrape %d with a silent store has no %s:\n%s", i+1, want, grepLines(body, "nodemgr_"))
			}
		}
		age := regexp.MustCompile(`(?m)^nodemgr_metrics_age_seconds (\S+)$`).FindStringSubmatch(body)
		if age == nil || parseFloat(age[1]) < storemetrics.TTL.Seconds() {
			t.Errorf("scrape %d with a silent store: age %v, want nodemgr_metrics_age_seconds of at least %s", i+1, age, storemetrics.TTL)
		}
		if took > bound+time.Second {
			t.Errorf("scrape %d with a silent store took %s, want about the bound (%s)", i+1, took, bound)
		}
	}
}

// TestEveryRouteBoundsItsStoreTime calls every route the server
// authenticates with a store that does not answer: each is 503 within the
// bound, but /metrics (stale counts, above) and the agent's WebSocket,
// which authenticates itself and holds a session.
func TestEveryRouteBoundsItsStoreTime(t *testing.T) {
	const bound = 100 * time.Millisecond
	ts, st := silentServer(t, bound)
	st.auth.Store(true)
	st.data.Store(true)
	params := regexp.MustCompile(`\{[a-z.]+\}`)
	for _, rt := range ts.routeTable() {
		if (rt.Auth != authUser && rt.Auth != authAdmin) || rt.Path == metricsPath {
			continue
		}
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			t.Parallel()
			code, body, took := ts.timedCall(t, 5*time.Second, rt.Method, params.ReplaceAllString(rt.Path, "x"))
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "the store did not answer within") {
				t.Errorf("%s %s with a silent store = %d %s, want 503 saying the store did not answer", rt.Method, rt.Path, code, firstLine(body))
			}
			if took > bound+2*time.Second {
				t.Errorf("%s %s with a silent store took %s, want about the bound (%s)", rt.Method, rt.Path, took, bound)
			}
		})
	}
}

func parseFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
