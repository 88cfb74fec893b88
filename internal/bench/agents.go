package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/base/tick"
)

// AgentsConfig sets up one run of the agents harness.
type AgentsConfig struct {
	Binary       string        // nodemgr binary that runs the server
	Agents       int           // simulated agents
	Heartbeat    time.Duration // interval the server asks for
	OfflineAfter time.Duration // server's offline threshold (default 3 × Heartbeat)
	Measure      time.Duration // measured window after all agents are connected
	Connect      int           // agents registering and connecting at once
	// DB, when set, is a PostgreSQL server URL: each run gets a fresh
	// database there, and Replicas servers share it, the agents spread
	// over them in turn. Empty: one server on SQLite.
	DB       string
	Replicas int
	// OpenSuites are suites with Ready tasks that no simulated agent may
	// run (a tag none has): every idle agent's ask for a suite looks at
	// them, as at a busy cluster's suites for other machines.
	OpenSuites int
	IdlePoll   time.Duration // the server's --idle-poll; 0: its default
}

// AgentsResult is what one run measured.
type AgentsResult struct {
	Agents        int           `json:"agents"`
	Store         string        `json:"store"` // sqlite, or postgres×N
	Replicas      int           `json:"replicas"`
	Connected     int           `json:"connected"`
	ConnectTime   time.Duration `json:"connect_time"`
	Heartbeats    int           `json:"heartbeats"`
	Failed        int           `json:"failed_heartbeats"`
	PerSecond     float64       `json:"heartbeats_per_second"`
	Expected      float64       `json:"expected_per_second"`
	P50           time.Duration `json:"p50"`
	P99           time.Duration `json:"p99"`
	Max           time.Duration `json:"max"`
	ServerRSS     uint64        `json:"server_rss_bytes"`      // the largest replica's
	ServerPeakRSS uint64        `json:"server_peak_rss_bytes"` // the largest replica's

	FalseOffline   int     `json:"false_offline"`
	Disconnects    int64   `json:"disconnects"`
	ServerCPUSecs  float64 `json:"server_cpu_seconds"`
	MeasureSeconds float64 `json:"measure_seconds"`
	// IdleAsks are the suite.next calls the idle agents made while
	// measured: on their own every IdlePoll (the welcome's), and when
	// woken. They cost the server more CPU the more suites are open.
	IdleAsks   int           `json:"idle_asks"`
	IdlePoll   time.Duration `json:"idle_poll"`
	OpenSuites int           `json:"open_suites"`
}

// Holds reports whether the run had every agent connected, no failed
// heartbeat and no node wrongly declared offline.
func (r AgentsResult) Holds() bool {
	return r.Connected == r.Agents && r.Failed == 0 && r.FalseOffline == 0 && r.Disconnects == 0
}

// RunAgents starts a server process, connects cfg.Agents simulated agents to
// it over loopback with the real protocol, lets them heartbeat for
// cfg.Measure and reports what happened. Progress goes to progress.
func RunAgents(ctx context.Context, cfg AgentsConfig, progress io.Writer) (AgentsResult, error) {
	if cfg.OfflineAfter == 0 {
		cfg.OfflineAfter = 3 * cfg.Heartbeat
	}
	if cfg.Connect == 0 {
		cfg.Connect = 64
	}
	raiseFileLimit()
	args := []string{"--heartbeat-interval", cfg.Heartbeat.String(), "--offline-after", cfg.OfflineAfter.String()}
	if cfg.IdlePoll > 0 {
		args = append(args, "--idle-poll", cfg.IdlePoll.String())
	}
	srvs, err := startServers(ctx, cfg, args...)
	if err != nil {
		return AgentsResult{}, err
	}
	defer stopServers(srvs)
	srv := srvs[0]

	c := client.New(srv.addr, srv.token)
	jt, err := c.CreateJoinToken(ctx, api.CreateTokenRequest{Name: "bench", TTL: "24h"})
	if err != nil {
		return AgentsResult{}, fmt.Errorf("join token: %w", err)
	}

	if err := openSuites(ctx, c, cfg.OpenSuites); err != nil {
		return AgentsResult{}, err
	}
	res := AgentsResult{Agents: cfg.Agents, Store: "sqlite", Replicas: len(srvs), OpenSuites: cfg.OpenSuites}
	if cfg.DB != "" {
		res.Store = "postgres"
	}
	// The agents run in child processes (simproc.go): one process may not
	// hold a socket for each. Each heartbeats from the moment it is
	// connected, as a real agent does.
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.addr
	}
	start := time.Now()
	sims, err := startSimProcs(ctx, cfg.Binary, cfg.Agents, addrs, jt.Secret, cfg.Connect, func(n int64) {
		fmt.Fprintf(progress, "\r  connected %d/%d agents (%.0fs)", n, cfg.Agents, time.Since(start).Seconds())
	})
	if err != nil {
		return res, err
	}
	defer stopSimProcs(sims)
	fmt.Fprintln(progress)
	res.ConnectTime = time.Since(start)

	// One interval to settle, then measure.
	sleep(ctx, cfg.Heartbeat)
	cpu0 := serversCPU(srvs)
	tellAll(sims, "measure")
	mstart := time.Now()
	for elapsed := time.Duration(0); elapsed < cfg.Measure; elapsed = time.Since(mstart) {
		fmt.Fprintf(progress, "\r  measuring %.0fs/%.0fs", elapsed.Seconds(), cfg.Measure.Seconds())
		if !sleep(ctx, min(time.Second, cfg.Measure-elapsed)) {
			break
		}
	}
	// Read the servers before the simulators stop: their agents then
	// disconnect, and nodes may rightly go offline.
	for _, s := range srvs {
		rss, peak := procRSS(s.pid())
		res.ServerRSS, res.ServerPeakRSS = max(res.ServerRSS, rss), max(res.ServerPeakRSS, peak)
	}

	// A node that is connected and beating must never have been declared
	// offline, by whichever replica leads.
	for _, s := range srvs {
		res.FalseOffline += max(s.offlineMarks(ctx), 0)
	}
	nodes, err := c.Nodes(ctx, "")
	if err == nil {
		for _, n := range nodes {
			if n.Status != api.StatusOnline {
				res.FalseOffline++
			}
		}
	}
	parts, err := collectSims(sims)
	res.MeasureSeconds = time.Since(mstart).Seconds()
	res.ServerCPUSecs = serversCPU(srvs) - cpu0
	fmt.Fprintln(progress)
	if err != nil {
		return res, err
	}

	var lat []time.Duration
	for _, p := range parts {
		res.Connected += p.Connected
		for _, l := range p.Latencies {
			lat = append(lat, time.Duration(l))
		}
		res.Failed += p.Failed
		res.Disconnects += p.Disconnects
		res.IdleAsks += p.IdleAsks
		res.IdlePoll = max(res.IdlePoll, time.Duration(p.IdlePoll))
		if p.FirstError != "" {
			fmt.Fprintf(progress, "  first connect error: %s\n", p.FirstError)
		}
	}
	res.Heartbeats = len(lat)
	res.PerSecond = float64(len(lat)) / res.MeasureSeconds
	res.Expected = float64(res.Connected) / cfg.Heartbeat.Seconds()
	slices.Sort(lat)
	if len(lat) > 0 {
		res.P50, res.P99, res.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res, nil
}

// openSuites creates n suites of one Ready task that no simulated agent
// may run: their tag is on no node.
func openSuites(ctx context.Context, c *client.Client, n int) error {
	for i := range n {
		su, err := c.CreateSuite(ctx, api.SuiteSpec{Name: fmt.Sprintf("bench-open-%d", i), Tags: []string{"bench-elsewhere"}})
		if err != nil {
			return fmt.Errorf("open suite %d: %w", i, err)
		}
		if _, err := c.SubmitTasks(ctx, su.ID, []api.TaskSpec{{Argv: []string{"true"}}}); err != nil {
			return fmt.Errorf("open suite %d: %w", i, err)
		}
	}
	return nil
}

// startServers starts the server, or cfg.Replicas of them on a fresh
// PostgreSQL database, the replicas sharing the first one's data dir (and
// so its admin token).
func startServers(ctx context.Context, cfg AgentsConfig, args ...string) ([]*benchServer, error) {
	if cfg.DB == "" {
		s, err := startServer(ctx, cfg.Binary, args...)
		if err != nil {
			return nil, err
		}
		return []*benchServer{s}, nil
	}
	dbURL, drop, err := freshDatabase(ctx, cfg.DB, "agents")
	if err != nil {
		return nil, err
	}
	args = append(args, "--db", dbURL)
	first, err := startServer(ctx, cfg.Binary, args...)
	if err != nil {
		drop()
		return nil, err
	}
	first.drop = drop
	srvs := []*benchServer{first}
	for range max(cfg.Replicas, 1) - 1 {
		r, err := startServerIn(ctx, cfg.Binary, first.dataDir, args...)
		if err != nil {
			stopServers(srvs)
			return nil, err
		}
		r.token, r.shared = first.token, true
		srvs = append(srvs, r)
	}
	return srvs, nil
}

// stopServers stops them, the replicas first.
func stopServers(srvs []*benchServer) {
	for i := len(srvs) - 1; i >= 0; i-- {
		srvs[i].stop()
	}
}

// serversCPU is the CPU seconds the servers used so far, together.
func serversCPU(srvs []*benchServer) float64 {
	var sum float64
	for _, s := range srvs {
		sum += procCPU(s.pid())
	}
	return sum
}

// simAgent is one simulated agent: the real protocol, no real work.
type simAgent struct {
	idx         int
	peer        *proto.Peer
	conn        proto.Conn
	interval    time.Duration
	idlePoll    time.Duration
	mu          sync.Mutex
	latencies   []time.Duration
	failed      int
	disconnects atomic.Int64
	asks        atomic.Int64 // suite.next calls while measured
	measuring   *atomic.Bool
}

func (a *simAgent) connect(ctx context.Context, addr, joinToken string) error {
	name := fmt.Sprintf("sim-%05d", a.idx)
	body, _ := json.Marshal(api.RegisterRequest{
		MachineID: "bench-machine", DataDir: "/bench/" + name, Name: name,
		Hardware: api.Hardware{Cores: 2, MemoryBytes: 1 << 30, OS: "linux", Arch: "amd64"},
	})
	var reg api.RegisterResponse
	if err := postJSON(ctx, "http://"+addr+"/v1/agent/register", joinToken, body, &reg); err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/agent/connect", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + reg.Credential}},
	})
	if err != nil {
		return fmt.Errorf("connect %s: %w", name, err)
	}
	a.conn = proto.NewWebSocketConn(c, 1<<20)
	a.peer = proto.NewPeer(a.conn, a, proto.Options{})
	go func() {
		a.peer.Run(ctx)
		if ctx.Err() == nil {
			a.disconnects.Add(1)
		}
	}()
	var w api.Welcome
	if err := a.peer.Call(ctx, api.MethodHello, api.Hello{AgentVersion: "bench", Name: name, State: api.AgentIdle}, &w); err != nil {
		return fmt.Errorf("hello %s: %w", name, err)
	}
	a.interval = time.Duration(w.HeartbeatInterval)
	// An older server says nothing: its agents asked every 5s.
	a.idlePoll = cmp.Or(time.Duration(w.IdlePoll), 5*time.Second)
	return nil
}

// idle asks for a suite as an idle agent does: every idlePoll, spread over
// the agents, and when woken (HandleRequest).
func (a *simAgent) idle(ctx context.Context) {
	tick.From(ctx, time.Duration(rand.Int64N(int64(a.idlePoll))), a.idlePoll, func() { a.askNext(ctx, true) })
}

func (a *simAgent) askNext(ctx context.Context, poll bool) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var next api.SuiteNext
	if a.peer.Call(cctx, api.MethodSuiteNext, api.SuiteNextRequest{Poll: poll}, &next) == nil && a.measuring.Load() {
		a.asks.Add(1)
	}
}

func (a *simAgent) beat(ctx context.Context, measuring *atomic.Bool) {
	// Spread the agents' beats over the interval, as agents that
	// connected together do.
	tick.From(ctx, time.Duration(rand.Int64N(int64(a.interval))), a.interval, func() {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, a.interval)
		err := a.peer.Call(cctx, api.MethodHeartbeat, api.Heartbeat{State: api.AgentIdle}, nil)
		cancel()
		if !measuring.Load() || ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		if err != nil {
			a.failed++
		} else {
			a.latencies = append(a.latencies, time.Since(start))
		}
		a.mu.Unlock()
	})
}

func (a *simAgent) HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error) {
	switch method {
	case api.MethodPing:
		return struct{}{}, nil
	case api.MethodWake:
		go a.askNext(context.WithoutCancel(ctx), false)
		return struct{}{}, nil
	}
	return nil, proto.UnknownMethod(method)
}

func (a *simAgent) HandleNotify(ctx context.Context, seq uint64, method string, body json.RawMessage) error {
	return nil
}

var sharedHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 60 * time.Second}

func postJSON(ctx context.Context, url, token string, body []byte, out any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := sharedHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// benchServer is the server process under test.
type benchServer struct {
	cmd     *exec.Cmd
	addr    string
	token   string
	dataDir string
	shared  bool   // a replica on another's data dir: not removed by stop
	drop    func() // drops the run's database, when it has one
}

func startServer(ctx context.Context, binary string, args ...string) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "nodemgr-bench-")
	if err != nil {
		return nil, err
	}
	return startServerIn(ctx, binary, dir, args...)
}

// startServerIn starts a server on data dir dir.
func startServerIn(ctx context.Context, binary, dir string, args ...string) (*benchServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &benchServer{addr: addr, dataDir: dir}
	s.cmd = exec.Command(binary, append([]string{"server", "--listen", addr, "--data-dir", dir, "--log-level", "warn"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := client.New(addr, "").Health(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server did not become healthy at %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		s.stop()
		return nil, err
	}
	s.token = strings.TrimSpace(string(b))
	return s, nil
}

func (s *benchServer) pid() int { return s.cmd.Process.Pid }

func (s *benchServer) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	if !s.shared {
		os.RemoveAll(s.dataDir)
	}
	if s.drop != nil {
		s.drop()
	}
}

// offlineMarks reads the server's count of nodes it declared offline.
func (s *benchServer) offlineMarks(ctx context.Context) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "nodemgr_nodes_marked_offline_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int(f)
		}
	}
	return -1
}

// procRSS returns a process's resident and peak resident memory.
func procRSS(pid int) (rss, peak uint64) {
	st, _ := procStatus(pid)
	return st["VmRSS"], st["VmHWM"]
}

// procStatus reads the sizes /proc/PID/status gives in kB (VmRSS,
// RssAnon, ...), in bytes by name.
func procStatus(pid int) (map[string]uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	sizes := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			sizes[strings.TrimSuffix(f[0], ":")] = kb << 10
		}
	}
	return sizes, nil
}

// procCPU returns a process's user+system CPU seconds.
func procCPU(pid int) float64 { return statTicks(pid, 11, 12) / 100 } // USER_HZ

// procTreeCPU is procCPU plus the CPU of the children it has reaped.
func procTreeCPU(pid int) float64 { return statTicks(pid, 11, 12, 13, 14) / 100 }

// statTicks sums fields of /proc/PID/stat, counted from the one after the
// state.
func statTicks(pid int, fields ...int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	sum := 0.0
	for _, i := range fields {
		if i < len(f) {
			v, _ := strconv.ParseFloat(f[i], 64)
			sum += v
		}
	}
	return sum
}

// raiseFileLimit lifts the soft open-files limit to the hard one: every
// simulated agent holds a socket, and so does the server for each.
// raiseFileLimit lets this process, and the servers it starts, hold a
// socket per simulated agent: the hard limit too where it may (root), up
// to what the kernel allows, else the soft limit up to the hard one.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > l.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return
			}
		}
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
