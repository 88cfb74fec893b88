package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/server"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
	"github.com/nodemgr/nodemgr/internal/coordinator/store/sqlite"
)

// Scale of BenchmarkPagesAtScale: issue 19 asks for pages under 100 ms at
// p95 and under 200 KB with this many rows in the store.
const (
	benchNodes  = 5_000
	benchSuites = 20
	benchTasks  = 200_000
)

// fillStore writes benchNodes nodes and benchTasks tasks (in benchSuites
// suites, a tenth of them failed) straight into the store.
func fillStore(tb testing.TB, st store.Store) (nodeID, suiteID, taskID string) {
	ctx := context.Background()
	now := time.Now().UTC()
	for i := range benchNodes {
		status := api.StatusOnline
		if i%10 == 0 {
			status = api.StatusOffline
		}
		n, err := st.CreateNode(ctx, store.Node{ID: fmt.Sprintf("n-bench%05d", i), Name: fmt.Sprintf("node-%05d", i),
			MachineID: fmt.Sprintf("m%05d", i), DataDir: "/var/lib/nodemgr", Tags: []string{"linux", "x86"},
			Groups: []string{"ml"}, Status: status, AgentState: api.AgentIdle, AgentVersion: "dev",
			Hardware:     api.Hardware{Hostname: fmt.Sprintf("host-%05d", i), OS: "linux", Arch: "amd64", Cores: 16, MemoryBytes: 64 << 30},
			RegisteredAt: now, UpdatedAt: now, LastHeartbeat: now})
		if err != nil {
			tb.Fatal(err)
		}
		nodeID = n.ID
	}
	perSuite := benchTasks / benchSuites
	for s := range benchSuites {
		su := store.Suite{ID: fmt.Sprintf("s-bench%02d", s), Spec: api.SuiteSpec{Name: fmt.Sprintf("suite-%02d", s), Group: "ml",
			WorkerSchedule: api.WorkerSchedule{WorkerCount: 4}}, State: api.SuiteOpen, Owner: "admin",
			CreatedAt: now, UpdatedAt: now, LastTaskAt: now}
		if err := st.CreateSuite(ctx, su); err != nil {
			tb.Fatal(err)
		}
		suiteID = su.ID
		for start := 0; start < perSuite; start += 5000 {
			var batch []store.Task
			for i := start; i < start+5000; i++ {
				batch = append(batch, store.Task{ID: fmt.Sprintf("k-b%02d%06d", s, i), SuiteID: su.ID, State: api.TaskReady,
					Spec:      api.TaskSpec{Name: fmt.Sprintf("t%06d", i), Argv: []string{"make", "-C", "src", fmt.Sprintf("target-%d", i)}},
					CreatedAt: now, UpdatedAt: now})
			}
			if err := st.AddTasks(ctx, su.ID, batch); err != nil {
				tb.Fatal(err)
			}
			taskID = batch[0].ID
		}
	}
	return nodeID, suiteID, taskID
}

// BenchmarkPagesAtScale measures the dashboard's pages with 5,000 nodes
// and 200,000 tasks in a SQLite store, through HTTP as a browser gets
// them, and reports each page's p95 latency and size:
//
//	go test -run '^$' -bench PagesAtScale -benchtime 200x ./internal/coordinator/ui/
func BenchmarkPagesAtScale(b *testing.B) {
	dir := b.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "nodemgr.db"), log)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	nodeID, suiteID, taskID := fillStore(b, st)
	b.Logf("filled the store with %d nodes and %d tasks in %s", benchNodes, benchTasks, time.Since(start).Round(time.Second))
	s, err := server.New(server.Config{DataDir: dir}, st, log)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	admin, _, err := server.Bootstrap(context.Background(), st, dir)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	e := &env{t: b, url: hs.URL, admin: admin}
	br := e.browser()
	br.login(admin)
	_, page := br.get("/ui/suites/" + suiteID)
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`).FindStringSubmatch(page)
	if next == nil {
		b.Fatal("the suite page has no next page")
	}
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"nodes", "/ui/nodes"},
		{"nodes-offline", "/ui/nodes?status=offline"},
		{"node", "/ui/nodes/" + nodeID},
		{"suites", "/ui/suites"},
		{"suite", "/ui/suites/" + suiteID},
		{"suite-page-2", strings.ReplaceAll(next[1], "&amp;", "&")},
		{"suite-filtered", "/ui/suites/" + suiteID + "?state=Ready&name=t004242"},
		{"task", "/ui/tasks/" + taskID},
		{"ensembles", "/ui/ensembles"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var lat []time.Duration
			size := 0
			for b.Loop() {
				t0 := time.Now()
				resp, err := br.c.Get(hs.URL + p.path)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s = %d", p.path, resp.StatusCode)
				}
				size = int(n)
			}
			slices.Sort(lat)
			p95 := lat[len(lat)*95/100]
			b.ReportMetric(float64(p95.Microseconds())/1000, "p95-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
			b.ReportMetric(float64(size)/1024, "KB/page")
			if p95 > 100*time.Millisecond || size > 200<<10 {
				b.Errorf("%s: p95 %s, %d KB; the target is under 100 ms and 200 KB", p.name, p95, size>>10)
			}
		})
	}
}
