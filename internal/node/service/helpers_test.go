//go:build linux

package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/proctree"
)

// svcMain is the service the tests run: it answers HTTP on $PORT with who
// it is, and is told how to behave by environment variables.
const svcMain = `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	fmt.Printf("svc started pid=%d\n", os.Getpid())
	fmt.Fprintf(os.Stderr, "svc stderr pid=%d\n", os.Getpid())
	if os.Getenv("SVC_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	if os.Getenv("SVC_DRAIN_EXIT") == "1" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGUSR1)
		go func() {
			<-c
			fmt.Println("svc draining")
			time.Sleep(100 * time.Millisecond)
			os.Exit(0)
		}()
	}
	if name := os.Getenv("SVC_EXIT_ON_FILE"); name != "" {
		go func() {
			for {
				if _, err := os.Stat(name); err == nil {
					fmt.Println("svc saw " + name)
					os.Exit(0)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	if os.Getenv("SVC_SPAM") == "1" {
		go func() {
			line := strings.Repeat("x", 199) + "\n"
			for {
				os.Stdout.WriteString(line)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	if mb := os.Getenv("SVC_ALLOC_MB"); mb != "" {
		n, _ := strconv.Atoi(mb)
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page, so it is resident
		}
		fmt.Printf("svc allocated %d MiB\n", n)
	}
	if code := os.Getenv("SVC_EXIT"); code != "" {
		n, _ := strconv.Atoi(code)
		os.Exit(n)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		cwd, _ := os.Getwd()
		json.NewEncoder(w).Encode(map[string]any{
			"coordinate": os.Getenv("NODEMGR_COORDINATE"),
			"pid":        os.Getpid(),
			"args":       os.Args[1:],
			"env":        env,
			"cwd":        cwd,
		})
	})
	http.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(http.StatusOK)
		go func() { time.Sleep(10 * time.Millisecond); os.Exit(n) }()
	})
	port := os.Getenv("PORT")
	if port == "" {
		select {}
	}
	if err := http.ListenAndServe("127.0.0.1:"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
`

var svcBinary string // built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "service-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(svcMain), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module svc\n\ngo 1.26\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		svcBinary = filepath.Join(dir, "svc")
		build := exec.Command("go", "build", "-o", svcBinary, ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build test service: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

const artID = "com.example:svc:1.0"

// fakeArtifacts is an artifact store over a map of installed trees.
type fakeArtifacts struct {
	mu    sync.Mutex
	trees map[string]string
}

func (f *fakeArtifacts) Tree(id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.trees[id]; ok {
		return t, nil
	}
	return "", errdefs.NotFound("artifact %s is not installed", id)
}

// memPorts is an in-memory port allocator handing out ports the OS says
// are free. Like portalloc, it refuses a port held by anyone, and keeps a
// released port in quarantine (here for the rest of the test).
type memPorts struct {
	mu      sync.Mutex
	held    map[int]string
	resting map[int]bool
}

func newMemPorts() *memPorts { return &memPorts{held: map[int]string{}, resting: map[int]bool{}} }

func (m *memPorts) Allocate(owner string, port int) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if port > 0 {
		if o, ok := m.held[port]; ok {
			return 0, errdefs.Conflict("port %d is held by %s", port, o)
		}
		if m.resting[port] {
			return 0, errdefs.Conflict("port %d rests in quarantine", port)
		}
		m.held[port] = owner
		return port, nil
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, ok := m.held[p]; !ok && !m.resting[p] {
			m.held[p] = owner
			return p, nil
		}
	}
	return 0, errdefs.Conflict("no free port")
}

func (m *memPorts) Release(owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, o := range m.held {
		if o == owner {
			delete(m.held, p)
			m.resting[p] = true
		}
	}
}

func (m *memPorts) Holds(owner string, port int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[port] == owner
}

func (m *memPorts) count(owner string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, o := range m.held {
		if o == owner {
			n++
		}
	}
	return n
}

// harness is one node: a prefix, a state dir, an installed artifact, a
// port allocator, and the supervisors started over them.
type harness struct {
	t        *testing.T
	prefix   string
	stateDir string
	tree     string
	arts     *fakeArtifacts
	ports    *memPorts

	mu      sync.Mutex
	stops   []func()
	changes int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	root := t.TempDir()
	h := &harness{
		t:        t,
		prefix:   filepath.Join(root, "prefix"),
		stateDir: filepath.Join(root, "state"),
		tree:     filepath.Join(root, "software", "com.example", "svc", "1.0"),
		ports:    newMemPorts(),
	}
	h.arts = &fakeArtifacts{trees: map[string]string{artID: h.tree}}
	if err := os.MkdirAll(filepath.Join(h.tree, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(svcBinary, filepath.Join(h.tree, "bin", "svc")); err != nil {
		copyTestFile(t, svcBinary, filepath.Join(h.tree, "bin", "svc"), 0o755)
	}
	t.Cleanup(h.cleanup)
	return h
}

func copyTestFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// cleanup stops the supervisors and kills every service process group a
// record names, then waits for them to be gone.
func (h *harness) cleanup() {
	h.mu.Lock()
	stops := h.stops
	h.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	recs, _, _ := loadRecords(h.stateDir)
	for _, r := range recs {
		if r.PID > 0 && alive(r.PID, r.StartTime) {
			syscall.Kill(-r.PID, syscall.SIGKILL)
			syscall.Kill(r.PID, syscall.SIGKILL)
			deadline := time.Now().Add(5 * time.Second)
			for alive(r.PID, r.StartTime) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	removeCgroups(treeName(h.stateDir))
}

// removeCgroups kills what is left in the harness's process tree and limit
// groups and removes them, so tests leave no cgroups behind.
func removeCgroups(name string) {
	for _, ctrl := range []string{"", "memory", "cpu", "pids", "freezer"} {
		home, err := proctree.OwnCgroupDir(ctrl)
		if err != nil {
			continue
		}
		dir := filepath.Join(home, "nodemgr-"+name)
		groups, _ := os.ReadDir(dir)
		for _, g := range groups {
			if !g.IsDir() {
				continue
			}
			gdir := filepath.Join(dir, g.Name())
			if ctrl == "" {
				os.WriteFile(filepath.Join(gdir, "cgroup.kill"), []byte("1"), 0)
			}
			for range 100 {
				if os.Remove(gdir) == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		os.Remove(dir)
	}
}

// supervisor starts a Supervisor over the harness's node and runs it. The
// returned stop cancels Run and waits for it to return.
func (h *harness) supervisor(mods ...func(*Config)) (*Supervisor, func()) {
	h.t.Helper()
	cfg := Config{
		Prefix:           h.prefix,
		StateDir:         h.stateDir,
		Artifacts:        h.arts,
		Ports:            h.ports,
		LogCheckInterval: 20 * time.Millisecond,
		OnChange: func() {
			h.mu.Lock()
			h.changes++
			h.mu.Unlock()
		},
	}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run = %v, want nil", err)
			}
		})
	}
	h.mu.Lock()
	h.stops = append(h.stops, stop)
	h.mu.Unlock()
	return s, stop
}

// spec is a spec for the test service with quick restarts.
func (h *harness) spec(coord string) api.ServiceSpec {
	return api.ServiceSpec{
		Coordinate: coord,
		Artifact:   artID,
		Command:    []string{"bin/svc"},
		Restart:    api.RestartPolicy{Delay: api.Duration(20 * time.Millisecond), MinPeriod: api.Duration(200 * time.Millisecond)},
		StopGrace:  api.Duration(5 * time.Second),
	}
}

// reply is what the test service answers.
type reply struct {
	Coordinate string            `json:"coordinate"`
	PID        int               `json:"pid"`
	Args       []string          `json:"args"`
	Env        map[string]string `json:"env"`
	Cwd        string            `json:"cwd"`
}

var httpc = &http.Client{Timeout: 2 * time.Second}

func query(port int) (reply, error) {
	var r reply
	resp, err := httpc.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return r, fmt.Errorf("status %s: %s", resp.Status, b)
	}
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

// waitAnswer polls the service on port until it answers.
func waitAnswer(t *testing.T, port int) reply {
	t.Helper()
	var r reply
	waitFor(t, 10*time.Second, fmt.Sprintf("service on port %d to answer", port), func() error {
		var err error
		r, err = query(port)
		return err
	})
	return r
}

// waitFor polls cond until it returns nil, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState polls until the service is in state and returns it.
func waitState(t *testing.T, s *Supervisor, coord, state string) api.Service {
	t.Helper()
	var v api.Service
	waitFor(t, 10*time.Second, coord+" to be "+state, func() error {
		var err error
		v, err = s.Get(coord)
		if err != nil {
			return err
		}
		if v.State != state {
			return fmt.Errorf("state %s (restarts %d, last exit %q, reason %q)", v.State, v.Restarts, v.LastExit, v.Reason)
		}
		return nil
	})
	return v
}

func mustStart(t *testing.T, s *Supervisor, spec api.ServiceSpec) api.Service {
	t.Helper()
	v, err := s.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start(%s): %v", spec.Coordinate, err)
	}
	return v
}

// waitRestarts waits until the service runs again after restarts
// restarts, and returns it; what says what is waited for.
func waitRestarts(t *testing.T, s *Supervisor, coord string, restarts int, what string) api.Service {
	t.Helper()
	var v api.Service
	waitFor(t, 10*time.Second, what, func() error {
		var err error
		if v, err = s.Get(coord); err != nil {
			return err
		}
		if v.State != api.ServiceRunning || v.Restarts != restarts {
			return fmt.Errorf("state %s restarts %d", v.State, v.Restarts)
		}
		return nil
	})
	return v
}

// startAnswering starts a service and waits until it answers on its port.
func startAnswering(t *testing.T, s *Supervisor, spec api.ServiceSpec) api.Service {
	t.Helper()
	v := mustStart(t, s, spec)
	waitAnswer(t, v.Port)
	return v
}

// gone waits until pid no longer runs (or is a zombie).
func gone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("pid %d to be gone", pid), func() error {
		st, err := readProcStat(pid)
		if err != nil || st.state == 'Z' {
			return nil
		}
		return fmt.Errorf("pid %d is in state %c", pid, st.state)
	})
}

func logOf(t *testing.T, s *Supervisor, coord string) string {
	t.Helper()
	b, err := s.Logs(coord, 0)
	if err != nil {
		t.Fatalf("Logs(%s): %v", coord, err)
	}
	return string(b)
}

// errContains says what is wrong with err if it is nil or leaves out a part.
func errContains(err error, parts ...string) error {
	if err == nil {
		return fmt.Errorf("no error")
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return fmt.Errorf("error %q does not mention %q", err, p)
		}
	}
	return nil
}
