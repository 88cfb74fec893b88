package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
)

// A pool file is read strictly, like every other spec file: a typo is an
// error at FILE:LINE:COL with the field and a did-you-mean.
func TestPoolFileErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"typo", "name: ci\ntemplate: w\nprovider: docker\nmax: 2\nidle_timout: 5m\n",
			":5:1: idle_timout: unknown field; did you mean idle_timeout?"},
		{"candidate typo", "name: ci\ncandidates:\n  - templat: w\n    provider: docker\nmax: 2\n",
			":3:5: candidates[0].templat: unknown field; did you mean template?"},
		{"duration without a unit", "name: ci\nidle_timeout: 300\n",
			":2:15: idle_timeout: must be a duration with a unit, such as 30s, 5m or 1h30m; got the whole number 300"},
		{"JSON typo", `{"name": "ci", "max_launch": 3}`,
			":1:16: max_launch: unknown field; did you mean max_launching?"},
		{"no name", "template: w\nprovider: docker\nmax: 1\n",
			": name: required; name the pool, e.g. name: ci"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pool.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadPoolFile(path)
			if want := path + tc.want; err == nil || describe(err) != want {
				t.Errorf("LoadPoolFile(%q) = %v, want %s", tc.yaml, err, want)
			}
		})
	}
}

// poolServer answers PUT /v1/pools/{pool} as the server does: 201 with
// equal times on create, 200 with a later update time on replace.
type poolServer struct {
	mu    sync.Mutex
	specs map[string]api.PoolSpec
	made  map[string]time.Time
}

func (s *poolServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/v1/pools/")
	if r.Method != http.MethodPut || !ok {
		http.NotFound(w, r)
		return
	}
	var spec api.PoolSpec
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil || spec.Name != name {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Error{Code: "invalid", Message: "bad pool", Field: "name"}})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	created, ok := s.made[name]
	status := http.StatusOK
	if !ok {
		created, status = now, http.StatusCreated
		s.made[name] = now
	}
	s.specs[name] = spec
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.Pool{Spec: spec, Machines: map[string]int{}, Desired: spec.Min, CreatedAt: created, UpdatedAt: now})
}

// pool apply sends the file's spec, durations and all, and says whether
// it made or replaced the pool.
func TestPoolApply(t *testing.T) {
	ps := &poolServer{specs: map[string]api.PoolSpec{}, made: map[string]time.Time{}}
	srv := httptest.NewServer(ps)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "pool.yaml")
	file := "name: ci\ntemplate: worker\nprovider: docker\ntags: [linux]\nmin: 1\nmax: 4\nidle_timeout: 10m\nbootstrap_timeout: 2m\nmax_launching: 2\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pool ci created: desired 1 (min 1, max 4), machines: none\n", "pool ci updated: desired 1 (min 1, max 4), machines: none\n"} {
		code, stdout, stderr := runArgs(t, "pool", "apply", "-f", path, "--addr", srv.URL)
		if code != 0 || stdout != want {
			t.Errorf("pool apply = exit %d, %q (stderr %q); want 0, %q", code, stdout, stderr, want)
		}
	}
	wantSpec := api.PoolSpec{Name: "ci", Template: "worker", Provider: "docker", Tags: []string{"linux"}, Min: 1, Max: 4,
		IdleTimeout: api.Duration(10 * time.Minute), BootstrapTimeout: api.Duration(2 * time.Minute), MaxLaunching: 2}
	if diff := cmp.Diff(wantSpec, ps.specs["ci"]); diff != "" {
		t.Errorf("pool apply sent (-want +got):\n%s", diff)
	}
}

func TestMachineCounts(t *testing.T) {
	tests := []struct {
		in   map[string]int
		want string
	}{
		{nil, "none"},
		{map[string]int{api.MachineReady: 0}, "none"},
		{map[string]int{api.MachineBootstrapping: 1, api.MachineReady: 2}, "2 ready, 1 bootstrapping"},
		{map[string]int{api.MachineDraining: 1, api.MachineRequested: 3, "odd": 1}, "3 requested, 1 draining, 1 odd"},
	}
	for _, tc := range tests {
		if got := machineCounts(tc.in); got != tc.want {
			t.Errorf("machineCounts(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// pool ls says what each pool makes from in one cell, counts machines by
// state, and cuts a long WAITING with an ellipsis.
func TestPoolTable(t *testing.T) {
	long := "2 machines wanted but the pool is at its CPU limit (8 of max_cpus 8 used; a machine has 2) and then some more"
	pools := []api.Pool{
		{Spec: api.PoolSpec{Name: "ci", Template: "worker", Provider: "docker", Min: 1, Max: 4}, Desired: 3,
			Machines: map[string]int{api.MachineReady: 2, api.MachineBootstrapping: 1}},
		{Spec: api.PoolSpec{Name: "gpu", Candidates: []api.PoolCandidate{{Template: "a", Provider: "aws"}, {Template: "b", Provider: "docker"}}, Max: 2},
			Waiting: long},
	}
	var out bytes.Buffer
	if err := printPools(&env{stdout: &out}, pools); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("printPools printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	tests := []struct {
		name, line string
		want       []string
	}{
		{"header", lines[0], []string{"NAME", "TEMPLATE/PROVIDER", "MIN", "MAX", "DESIRED", "MACHINES", "WAITING"}},
		{"one template", lines[1], []string{"ci", "worker/docker", "2 ready, 1 bootstrapping", " -"}},
		{"candidates", lines[2], []string{"gpu", "2 candidates", "none", clip(long, maxWaitingWidth)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.want {
				if !strings.Contains(tc.line, s) {
					t.Errorf("row %q lacks %q", tc.line, s)
				}
			}
		})
	}
	if strings.Contains(lines[2], long) || !strings.HasSuffix(lines[2], "…") {
		t.Errorf("row %q: want WAITING cut with …", lines[2])
	}
}

// pool show gives the spec, the demand and why it waits, and a machine
// table.
func TestPoolShow(t *testing.T) {
	now := time.Now()
	idle := now.Add(-2 * time.Minute)
	p := api.PoolDetail{
		Pool: api.Pool{
			Spec: api.PoolSpec{Name: "ci", Candidates: []api.PoolCandidate{{Template: "small", Provider: "docker", Price: ptr(0.02)}, {Template: "big", Provider: "aws"},
				{Template: "tiny", Provider: "local", Price: ptr(0.0)}},
				Policy: "cheapest", Tags: []string{"linux"}, Groups: []string{"ci"}, Min: 1, Max: 4, MaxCPUs: 8,
				IdleTimeout: api.Duration(5 * time.Minute), MinAge: api.Duration(time.Minute), BootstrapTimeout: api.Duration(3 * time.Minute), MaxLaunching: 4},
			Machines: map[string]int{api.MachineReady: 1, api.MachineFailed: 0}, Desired: 2,
			Demand: "suite build: 8 ready, 4 per node, 0 serving", Waiting: "1 more machine wanted after the 4 launching (max_launching 4)",
		},
		MachineList: []api.PoolMachine{
			{ID: "pm-aaaaaaaaaaaa", State: api.MachineReady, Template: "small", Provider: "docker", Node: "n-1", Deployment: "d-1", CreatedAt: now.Add(-5 * time.Minute), IdleSince: &idle},
			{ID: "pm-bbbbbbbbbbbb", State: api.MachineFailed, Template: "big", Provider: "aws", Deployment: "d-2", CreatedAt: now.Add(-time.Hour),
				StateReason: "bootstrap: its agent did not register within the bootstrap timeout (3m0s); its log ends: " + strings.Repeat("x", 200)},
		},
	}
	var out bytes.Buffer
	if err := printPool(&env{stdout: &out}, p, now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Candidate 1  small on docker, $0.02/h", "Candidate 2  big on aws, price unknown", "Candidate 3  tiny on local, free", "Policy       cheapest",
		"min 1, max 4 machines, max 8 CPUs", "at most 4 at once", "idle 5m0s (min age 1m0s), bootstrap 3m0s",
		"Tags         linux", "Groups       ci", "Desired      2", "suite build: 8 ready", "max_launching 4", "1 ready",
		"ID", "STATE", "TEMPLATE", "PROVIDER", "NODE", "DEPLOYMENT", "AGE", "REASON",
		"pm-aaaaaaaaaaaa", "idle since 2m ago", "pm-bbbbbbbbbbbb", "failed", "5m ago", "…",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("pool show lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, strings.Repeat("x", 200)) {
		t.Errorf("pool show printed a long reason whole:\n%s", got)
	}
}

func TestScheduleExplainTable(t *testing.T) {
	x := api.ScheduleExplanation{Policy: "fastest", Candidates: []api.ScheduleVerdict{
		{Pool: "ci", Template: "small", Provider: "docker", CPUs: 2, MemoryMB: 2048, BootP50: api.Duration(4321 * time.Millisecond),
			Feasible: true, Rank: 1, Why: "p50 4.3s"},
		{Pool: "ci", Template: "big", Provider: "aws", Price: ptr(0.1), Feasible: false, Reasons: []string{"backing off until 10:00:00", "lacks tag gpu"}},
	}}
	var out bytes.Buffer
	if err := printExplanation(&env{stdout: &out}, x); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 4 || lines[0] != "policy fastest" {
		t.Fatalf("printExplanation:\n%s\nwant the policy, a header and 2 rows", out.String())
	}
	for i, want := range [][]string{
		{"RANK", "POOL", "TEMPLATE", "PROVIDER", "PRICE", "CPUS", "MEMORY", "BOOT P50", "FEASIBLE", "WHY / REASONS"},
		{"1 ", "small", "docker", "2048 MiB", "4.3s", "yes", "p50 4.3s"},
		{"- ", "big", "aws", "$0.1/h", "no", "backing off until 10:00:00; lacks tag gpu"},
	} {
		for _, s := range want {
			if !strings.Contains(lines[i+1], s) {
				t.Errorf("row %q lacks %q", lines[i+1], s)
			}
		}
	}
}

// followEvents prints each event once, in order, moves to the next page
// when the one it is in fills up, waits out an unreachable server, and
// ends cleanly when interrupted.
func TestFollowEvents(t *testing.T) {
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := func(id int64) api.PoolEvent {
		return api.PoolEvent{ID: id, Pool: "ci", Machine: "pm-aaaaaaaaaaaa", At: time.Now(), Kind: "scale-up", Message: "event " + string(rune('a'+id-1))}
	}
	unavailable := &client.Error{Status: http.StatusServiceUnavailable, Message: "server restarting"}
	steps := []struct {
		evs  []api.PoolEvent
		next string
		err  error
	}{
		{[]api.PoolEvent{ev(1), ev(2)}, "c2", nil},        // a full page
		{[]api.PoolEvent{ev(3)}, "", nil},                 // the last page
		{[]api.PoolEvent{ev(3)}, "", nil},                 // nothing new
		{nil, "", unavailable},                            // the server went
		{nil, "", unavailable},                            // said once
		{[]api.PoolEvent{ev(3), ev(4), ev(5)}, "c5", nil}, // new ones, and the page is full
		{nil, "", nil},                                    // the next page is empty
	}
	var afters []string
	read := func(_ context.Context, p client.Page) ([]api.PoolEvent, string, error) {
		afters = append(afters, p.After)
		if len(afters) > len(steps) {
			cancel() // Ctrl-C
			return nil, "", context.Canceled
		}
		s := steps[len(afters)-1]
		return s.evs, s.next, s.err
	}
	defer func(d time.Duration) { eventsPoll = d }(eventsPoll)
	eventsPoll = time.Millisecond
	if err := followEvents(ctx, e, client.Page{Limit: 2}, read); err != nil {
		t.Fatalf("followEvents = %v, want nil once interrupted", err)
	}
	got := stdout.String()
	for _, m := range []string{"event a", "event b", "event c", "event d", "event e"} {
		if n := strings.Count(got, m); n != 1 {
			t.Errorf("printed %q %d times, want once:\n%s", m, n, got)
		}
	}
	if n := strings.Count(got, "MESSAGE"); n != 1 {
		t.Errorf("printed the header %d times, want once:\n%s", n, got)
	}
	if want := []string{"", "c2", "c2", "c2", "c2", "c2", "c5", "c5"}; !slices.Equal(afters, want) {
		t.Errorf("read after %q, want %q", afters, want)
	}
	if n := strings.Count(stderr.String(), "waiting"); n != 1 {
		t.Errorf("stderr %q: want one note that it waits", stderr.String())
	}
	// Columns stay put from one batch to the next.
	var cols []int
	for line := range strings.Lines(got) {
		col := strings.Index(line, "MESSAGE")
		if col < 0 {
			col = strings.Index(line, "event ")
		}
		cols = append(cols, col)
	}
	for i := range cols {
		if cols[i] != cols[0] {
			t.Errorf("the message column moved between lines:\n%s", got)
			break
		}
	}
}

// node show names a pool machine's deployment and a cgroup's CPU quota;
// deployment show names the node its agent registered as.
func TestNodeAndDeploymentLinks(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out}
	printNode(e, api.Node{ID: "n-1", Name: "ci-x", Deployment: "d-1", Hardware: api.Hardware{Cores: 2, CPULimit: 1.5}})
	for _, want := range []string{"Deployment      d-1", "CPU limit       1.5 CPUs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("node show lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	printNode(e, api.Node{ID: "n-2", Hardware: api.Hardware{Cores: 2}})
	if s := out.String(); strings.Contains(s, "Deployment") || strings.Contains(s, "CPU limit") {
		t.Errorf("node show of a node of no pool, with no quota:\n%s", s)
	}
	out.Reset()
	printDeployment(e, api.Deployment{ID: "d-1", Name: "ci-x", Node: "n-1"})
	if !strings.Contains(out.String(), "Node       n-1") {
		t.Errorf("deployment show lacks its node:\n%s", out.String())
	}
	out.Reset()
	printDeployment(e, api.Deployment{ID: "d-2"})
	if strings.Contains(out.String(), "Node") {
		t.Errorf("deployment show of a machine with no node:\n%s", out.String())
	}
}

// The pool file in pool --help is one that loads.
func TestPoolHelpExampleLoads(t *testing.T) {
	var lines []string
	for line := range strings.Lines(poolFileHelp) {
		if body, ok := strings.CutPrefix(line, "  "); ok {
			lines = append(lines, body)
		}
	}
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, err := LoadPoolFile(path)
	if err != nil {
		t.Fatalf("the example of pool --help does not load: %v", err)
	}
	if spec.Name != "ci" || spec.Max != 4 || time.Duration(spec.IdleTimeout) != 5*time.Minute || spec.Labels["team"] != "build" {
		t.Errorf("the example of pool --help loads as %+v", spec)
	}
}

func ptr[T any](v T) *T { return &v }

// pool scale, pause and resume send a PATCH with only the fields they
// change, and say what the pool is now; pool ls and show say it is paused.
func TestPoolScalePauseResume(t *testing.T) {
	var got []map[string]any
	spec := api.PoolSpec{Name: "ci", Template: "worker", Provider: "docker", Min: 1, Max: 4}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/v1/pools/ci" {
			http.NotFound(w, r)
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		got = append(got, body)
		var p api.PoolPatch
		b, _ := json.Marshal(body)
		json.Unmarshal(b, &p)
		if p.Min != nil {
			spec.Min = *p.Min
		}
		if p.Max != nil {
			spec.Max = *p.Max
		}
		if p.Paused != nil {
			spec.Paused = *p.Paused
		}
		json.NewEncoder(w).Encode(api.Pool{Spec: spec, Machines: map[string]int{}})
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		body string
		out  string
	}{
		{[]string{"pool", "scale", "ci", "--max", "8"}, `{"max":8}`, "pool ci: min 1, max 8; desired 0, machines: none\n"},
		{[]string{"pool", "scale", "ci", "--min", "0", "--max", "2"}, `{"max":2,"min":0}`, "pool ci: min 0, max 2; desired 0, machines: none\n"},
		{[]string{"pool", "pause", "ci"}, `{"paused":true}`, "pool ci: min 0, max 2, paused; desired 0, machines: none\n"},
		{[]string{"pool", "resume", "ci"}, `{"paused":false}`, "pool ci: min 0, max 2; desired 0, machines: none\n"},
	} {
		got = nil
		code, stdout, stderr := runArgs(t, append(tc.args, "--addr", srv.URL)...)
		b, _ := json.Marshal(got)
		if code != 0 || stdout != tc.out || string(b) != "["+tc.body+"]" {
			t.Errorf("%v = exit %d, %q (stderr %q), sent %s; want 0, %q, sent [%s]", tc.args, code, stdout, stderr, b, tc.out, tc.body)
		}
	}
	if code, _, stderr := runArgs(t, "pool", "scale", "ci", "--addr", srv.URL); code == 0 || !strings.Contains(stderr, "--min") {
		t.Errorf("pool scale without --min or --max = exit %d, %q; want an error naming the flags", code, stderr)
	}

	var out bytes.Buffer
	if err := printPools(&env{stdout: &out}, []api.Pool{{Spec: spec}, {Spec: api.PoolSpec{Name: "gpu", Paused: true}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "gpu (paused)") || strings.Contains(out.String(), "ci (paused)") {
		t.Errorf("pool ls:\n%s\nwant gpu alone marked paused", out.String())
	}
	out.Reset()
	if err := printPool(&env{stdout: &out}, api.PoolDetail{Pool: api.Pool{Spec: api.PoolSpec{Name: "gpu", Paused: true, Priority: 3}}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^Paused +yes`).MatchString(out.String()) || !regexp.MustCompile(`(?m)^Priority +3$`).MatchString(out.String()) {
		t.Errorf("pool show:\n%s\nwant it paused, priority 3", out.String())
	}
}
