package ui_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// addNode stores a node as registration would, offline.
func (e *env) addNode(id, name string) {
	e.t.Helper()
	now := time.Now()
	_, err := e.st.CreateNode(e.t.Context(), store.Node{ID: id, Name: name, MachineID: "m-" + id, DataDir: "/d",
		Hardware: api.Hardware{Cores: 4, MemoryBytes: 8 << 30}, Status: api.StatusOffline, RegisteredAt: now, UpdatedAt: now})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestEnsemblePages: the dashboard lists ensembles and shows one with its
// allocations (state, resources, placement), its replicas (node, ports, why
// there, restores), the replicas restored elsewhere, and why it waits.
func TestEnsemblePages(t *testing.T) {
	e := newEnv(t)
	e.addNode("n-aaaa1111", "box-a")
	e.addNode("n-bbbb2222", "box-b")
	now := time.Now()
	web := api.AllocationSpec{Name: "web", Count: 2, Resources: api.Resources{CPUs: 0.5, MemoryMB: 256},
		Placement: api.Placement{Tags: []string{"ssd"}, Spread: true}, Container: &api.ContainerJob{Name: "web", Image: "shop-web:1"}}
	shop := api.Ensemble{ID: "e-shop", Name: "shop", State: api.EnsembleDegraded, Reason: "web#2: its node is lost",
		Owner: "admin", Spec: api.EnsembleSpec{Name: "shop", Allocations: []api.AllocationSpec{web}, Policy: "spread"},
		Replicas: []api.EnsembleReplica{
			{Allocation: "web", Replica: 1, NodeID: "n-aaaa1111", NodeName: "box-a", Why: "spread: emptiest of 2", Container: "c-web-1",
				Ports: []api.ContainerPort{{Container: 8080, Host: 31001}}},
			{Allocation: "web", Replica: 2, NodeID: "n-bbbb2222", NodeName: "box-b", Container: "c-web-2", Restores: 1},
		},
		Lost:      []api.EnsembleReplica{{Allocation: "web", Replica: 2, NodeID: "n-aaaa1111", NodeName: "box-a", Container: "c-web-2"}},
		CreatedAt: now, UpdatedAt: now}
	batch := api.Ensemble{ID: "e-batch", Name: "batch", State: api.EnsembleWaiting, Owner: "admin",
		Reason:    "no node has 64 CPUs free; pool burst is starting 2 machines",
		Spec:      api.EnsembleSpec{Name: "batch", Allocations: []api.AllocationSpec{{Name: "crunch", Resources: api.Resources{CPUs: 64, MemoryMB: 1024}, Container: &api.ContainerJob{Name: "crunch", Image: "c:1"}}}},
		CreatedAt: now, UpdatedAt: now}
	old := api.Ensemble{ID: "e-old", Name: "old", State: api.EnsembleShutDown, Owner: "admin",
		Spec: api.EnsembleSpec{Name: "old", Allocations: []api.AllocationSpec{web}}, CreatedAt: now, UpdatedAt: now}
	for _, en := range []api.Ensemble{shop, batch, old} {
		if err := e.st.CreateEnsemble(t.Context(), en); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	b.login(e.admin)

	resp, list := b.get("/ui/ensembles")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/ensembles = %d: %.500s", resp.StatusCode, list)
	}
	for _, want := range []string{`href="/ui/ensembles/e-shop"`, `href="/ui/ensembles/e-batch"`, "pool burst is starting 2 machines", `href="/ui/ensembles" class="active"`} {
		if !strings.Contains(list, want) {
			t.Errorf("the ensembles page lacks %q", want)
		}
	}
	if strings.Contains(list, "e-old") {
		t.Error("the ensembles page lists a shut-down ensemble without ?all=true")
	}
	if _, all := b.get("/ui/ensembles?all=true"); !strings.Contains(all, `href="/ui/ensembles/e-old"`) {
		t.Error("?all=true does not list the shut-down ensemble")
	}

	_, page := b.get("/ui/ensembles/e-shop")
	for _, want := range []string{
		"web#1", "web#2", `href="/ui/nodes/n-aaaa1111"`, "box-b", "31001→8080", "spread: emptiest of 2",
		"0.5 CPUs, 256 MB", "tags ssd; spread", "node box-b is offline", `id="lost"`, "lost replicas move elsewhere after the server's restore deadline", `href="/ui/logs?container=c-web-1"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the ensemble page lacks %q", want)
		}
	}
	_, waiting := b.get("/ui/ensembles/batch")
	for _, want := range []string{"Waiting: no node has 64 CPUs free", "No replica is placed yet", "64.0 CPUs"} {
		if !strings.Contains(waiting, want) {
			t.Errorf("the waiting ensemble's page lacks %q", want)
		}
	}
	if resp, _ := b.get("/ui/ensembles/nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown ensemble's page = %d, want 404", resp.StatusCode)
	}
}

// TestNodePageShowsEndedContainers: a job that failed at once is on its
// node's page, with why, after the live ones (it said "No containers.").
func TestNodePageShowsEndedContainers(t *testing.T) {
	e := newEnv(t)
	e.addNode("n-cccc3333", "box-c")
	code := 4
	now := time.Now()
	err := e.st.PutContainers(t.Context(), "n-cccc3333", []api.Container{
		{Job: api.ContainerJob{ID: "c-fails", Name: "fails", Image: "busybox"}, Status: api.ContainerFailed, ExitCode: &code,
			Reason: "exit code 4", CreatedAt: now, StartedAt: &now, FinishedAt: &now},
		{Job: api.ContainerJob{ID: "c-runs", Name: "runs", Image: "busybox"}, Status: api.ContainerRunning, CreatedAt: now.Add(time.Second), StartedAt: &now},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.login(e.admin)
	_, page := b.get("/ui/nodes/n-cccc3333")
	failed, running := strings.Index(page, "c-fails"), strings.Index(page, "c-runs")
	if failed < 0 || !strings.Contains(page, "exit code 4") {
		t.Fatalf("the node page does not show the failed job and why:\n%.3000s", page)
	}
	if running < 0 || running > failed {
		t.Errorf("the running job is not listed before the ended one (running at %d, failed at %d)", running, failed)
	}
}

// TestPanelRefreshLeavesTheFlash: the page script's own fetch of the page
// (to render its live panels again) must not take the message an action
// left for the next page the user opens; and times are <time> elements
// the script keeps counting.
func TestPanelRefreshLeavesTheFlash(t *testing.T) {
	e := newEnv(t)
	su := createSuite(t, e.api, "live", "ml")
	b := e.browser()
	csrf := b.login(e.admin)
	b.post("/ui/suites/"+su.ID+"/close", url.Values{"csrf": {csrf}, "return": {"/ui/suites/" + su.ID}})

	req, err := http.NewRequest("GET", e.url+"/ui/suites/"+su.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Nodemgr-Refresh", "1")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	refreshed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(refreshed), `role="status"`) {
		t.Error("the panels' refresh took the action's message")
	}
	for _, id := range []string{`id="failures" data-refresh="suite:` + su.ID, `id="task-rows" data-refresh="suite:` + su.ID, `<time datetime="`} {
		if !strings.Contains(string(refreshed), id) {
			t.Errorf("the suite page lacks %q", id)
		}
	}
	if _, page := b.get("/ui/suites/" + su.ID); !strings.Contains(page, `role="status"`) {
		t.Error("the next page the user opens does not show the action's message")
	}
}

// TestTaskLogPages: a task's page links each attempt's whole output, and
// the log page shows a stored log whole and says it ended, so the script
// does not follow it. (Issue 31 item 6.)
func TestTaskLogPages(t *testing.T) {
	e := newEnv(t)
	e.addNode("n-log11111", "box-l")
	ctx := t.Context()
	if _, err := e.api.CreateSuite(ctx, api.SuiteSpec{Name: "lp"}); err != nil {
		t.Fatal(err)
	}
	ids, err := e.api.SubmitTasks(ctx, "lp", []api.TaskSpec{{Argv: []string{"make"}}})
	if err != nil {
		t.Fatal(err)
	}
	su, _ := e.api.Suite(ctx, "lp")
	claimed, err := e.st.ClaimTasks(ctx, su.ID, "n-log11111", 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	whole := strings.Repeat("cc -c x.c <warning>\n", 5000)
	frames := tasklog.AppendFrame(nil, tasklog.Stdout, []byte(whole))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(frames)
	zw.Close()
	path := filepath.Join(t.TempDir(), "log.gz")
	os.WriteFile(path, gz.Bytes(), 0o600)
	stored, _, err := e.api.UploadFile(ctx, path, "log")
	if err != nil {
		t.Fatal(err)
	}
	log := &api.TaskLog{Digest: stored.Digest, Bytes: int64(len(whole))}
	_, err = e.st.FinishAttempts(ctx, "n-log11111", []store.Attempt{{TaskID: ids[0], Attempt: 1, Outcome: api.OutcomeSucceeded,
		Result: api.TaskResult{Stdout: whole[len(whole)-100:], Log: log, FinishedAt: time.Now()}}}, nil)
	if err != nil {
		t.Fatal(err)
	}

	b := e.browser()
	b.login(e.admin)
	_, page := b.get("/ui/tasks/" + ids[0])
	if link := `href="/ui/logs?task=` + ids[0] + `&amp;attempt=1"`; !strings.Contains(page, link) || !strings.Contains(page, "97.7 KiB kept") {
		t.Errorf("the task page does not link the attempt's whole output (%s, 97.7 KiB kept):\n%.3000s", link, page)
	}
	resp, page := b.get("/ui/logs?task=" + ids[0])
	if resp.StatusCode != http.StatusOK || strings.Count(page, "cc -c x.c &lt;warning&gt;") != 5000 {
		t.Fatalf("log page = %d with %d of 5000 lines", resp.StatusCode, strings.Count(page, "cc -c x.c &lt;warning&gt;"))
	}
	if !strings.Contains(page, `data-complete="true"`) || !strings.Contains(page, "all of its output") || strings.Contains(page, `id="follow"`) {
		t.Errorf("the log page of an ended attempt does not say it ended, or still offers to follow it")
	}
	cursor := regexp.MustCompile(`data-cursor="(\d+)"`).FindStringSubmatch(page)
	if cursor == nil {
		t.Fatal("no cursor on the log page")
	}
	_, more := b.get("/ui/logs/more?task=" + ids[0] + "&attempt=1&after=" + cursor[1])
	var m struct {
		Text     string `json:"text"`
		Complete bool   `json:"complete"`
	}
	if err := json.Unmarshal([]byte(more), &m); err != nil || m.Text != "" || !m.Complete {
		t.Errorf("more after the end = %s, %v; want no text and complete", more, err)
	}
}
