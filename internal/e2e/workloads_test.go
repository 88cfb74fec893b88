package e2e

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/node/artifact"
	"github.com/nodemgr/nodemgr/internal/node/artifact/artifacttest"
)

var (
	echoOnce sync.Once
	echoBin  []byte
	echoErr  error
)

// echoService builds testdata/echosvc once: the real service binary the
// tests put in an artifact.
func echoService(t *testing.T) []byte {
	t.Helper()
	echoOnce.Do(func() {
		out := filepath.Join(filepath.Dir(binary), "echosvc")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/echosvc")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			echoErr = fmt.Errorf("build echosvc: %v\n%s", err, b)
			return
		}
		echoBin, echoErr = os.ReadFile(out)
	})
	if echoErr != nil {
		t.Fatal(echoErr)
	}
	return echoBin
}

// publishEcho puts the echo service in the depot as id, as bin/echosvc.
func publishEcho(t *testing.T, d *artifacttest.Depot, id string) {
	t.Helper()
	pid, err := artifact.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	d.Publish(pid, ".zip", artifacttest.Zip(t,
		artifacttest.Entry{Name: "bin/echosvc", Body: string(echoService(t)), Mode: 0o755},
		artifacttest.Entry{Name: "conf/default.conf", Body: "greeting=hello\n"},
	))
}

// get fetches url and returns the body, or "" with the error text.
func get(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func pidOf(t *testing.T, answer string) int {
	t.Helper()
	for _, f := range strings.Fields(answer) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("pid in %q: %v", answer, err)
			}
			return n
		}
	}
	t.Fatalf("no pid in answer %q", answer)
	return 0
}

const serviceYAML = `coordinate: 1.echo.ops.test
artifact: acme:echo:1.0
command: [bin/echosvc]
options: {mode: fast}
env: {GREETING: hi}
restart: {min_period: 1s, max_restarts: 3, delay: 100ms}
stop_grace: 2s
files:
  - {path: conf/app.conf, from: conf/default.conf}
`

// TestArtifactsAndServicesSurviveAgentRestart is issue 5 end to end: a real
// depot, a real service binary on its port; kill it → restarted; SIGKILL the
// agent → the service keeps answering and the new agent adopts it.
func TestArtifactsAndServicesSurviveAgentRestart(t *testing.T) {
	depot := artifacttest.NewDepot(t)
	publishEcho(t, depot, "acme:echo:1.0")
	s := startServer(t)
	token := "local-api-token-0123456789"
	localAddr := freeAddr(t)
	a := startAgent(t, s, "svc-node", "--depot", "acme="+depot.URL(),
		"--local-api-listen", localAddr, "--local-api-token", token)
	waitStatus(t, s, "svc-node", api.StatusOnline, 20*time.Second)

	// Install through the server; a second install is a no-op.
	out, stderr, code := s.run(t, "artifact", "install", "svc-node", "acme:echo:1.0")
	if code != 0 {
		t.Fatalf("artifact install: exit %d\n%s%s", code, out, stderr)
	}
	zipPath := artifacttest.ArchivePath(artifact.ID{Group: "acme", Artifact: "echo", Version: "1.0"}, ".zip")
	gets := depot.Gets(zipPath)
	if _, stderr, code := s.run(t, "artifact", "install", "svc-node", "acme:echo:1.0"); code != 0 {
		t.Fatalf("second install: exit %d: %s", code, stderr)
	}
	if got := depot.Gets(zipPath); got != gets {
		t.Errorf("second install fetched the archive again (%d GETs, want %d)", got, gets)
	}
	tree := filepath.Join(a.dataDir, "software", "acme", "echo", "1.0")
	if fi, err := os.Stat(filepath.Join(tree, "bin", "echosvc")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("installed binary: %v, mode %v; want it read-only", err, fi.Mode())
	}

	// Start the service through the server.
	spec := filepath.Join(t.TempDir(), "svc.yaml")
	os.WriteFile(spec, []byte(serviceYAML), 0o644)
	if out, stderr, code := s.run(t, "service", "start", "svc-node", "-f", spec); code != 0 {
		t.Fatalf("service start: exit %d\n%s%s", code, out, stderr)
	}
	c := s.client()
	ctx := context.Background()
	svc, err := c.Service(ctx, "svc-node", "1.echo.ops.test")
	if err != nil {
		t.Fatal(err)
	}
	wantDir := filepath.Join(a.dataDir, "runtime", "test", "ops", "echo", "1")
	if svc.RuntimeDir != wantDir || svc.Port == 0 {
		t.Fatalf("service runtime dir %q port %d, want %q and a port", svc.RuntimeDir, svc.Port, wantDir)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", svc.Port)
	var answer string
	waitFor(t, 10*time.Second, "service answers on its port", func() (bool, string) {
		answer, err = get(url)
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(answer, "coordinate=1.echo.ops.test") || !strings.Contains(answer, "--mode=fast") || !strings.Contains(answer, "runtime="+wantDir) {
		t.Errorf("service answer %q lacks its coordinate, option or runtime dir", answer)
	}
	if b, err := os.ReadFile(filepath.Join(wantDir, "conf", "app.conf")); err != nil || string(b) != "greeting=hello\n" {
		t.Errorf("pre-populated conf/app.conf = %q, %v", b, err)
	}

	// The presence record reaches node show.
	waitFor(t, 10*time.Second, "presence lists the service", func() (bool, string) {
		n, err := c.Node(ctx, "svc-node")
		if err != nil || n.Presence == nil {
			return false, fmt.Sprint(n.Presence, err)
		}
		for _, p := range n.Presence.Services {
			if p.Coordinate == "1.echo.ops.test" && p.State == api.ServiceRunning && p.Port == svc.Port {
				return n.Presence.LocalAPI.TCP == localAddr && slices.Contains(n.Presence.Artifacts, "acme:echo:1.0"), fmt.Sprintf("%+v", n.Presence)
			}
		}
		return false, fmt.Sprintf("%+v", n.Presence)
	})
	if out, _, _ := s.run(t, "node", "show", "svc-node"); !strings.Contains(out, "Service 1.echo.ops.test") {
		t.Errorf("node show lacks the service:\n%s", out)
	}

	// The service holds an allocation with its port.
	if as, err := c.Allocations(ctx, "svc-node"); err != nil || len(as) != 1 || as[0].ID != "service:1.echo.ops.test" || len(as[0].Ports) != 1 || as[0].Ports[0] != svc.Port {
		t.Errorf("allocations = %+v, %v; want service:1.echo.ops.test holding port %d", as, err, svc.Port)
	}

	// An artifact in use cannot be removed.
	if _, stderr, code := s.run(t, "artifact", "rm", "svc-node", "acme:echo:1.0"); code == 0 || !strings.Contains(stderr, "in use") {
		t.Errorf("artifact rm of an artifact in use: exit %d, %q; want refused", code, stderr)
	}

	// Kill the service: it is restarted with a new pid.
	firstPID := pidOf(t, answer)
	syscall.Kill(firstPID, syscall.SIGKILL)
	waitFor(t, 15*time.Second, "killed service restarted", func() (bool, string) {
		answer, err = get(url)
		if err != nil {
			return false, err.Error()
		}
		return pidOf(t, answer) != firstPID, answer
	})
	svc, err = c.Service(ctx, "svc-node", "1.echo.ops.test")
	if err != nil || svc.Restarts != 1 || svc.State != api.ServiceRunning {
		t.Fatalf("after the kill: %+v, %v; want running with 1 restart", svc, err)
	}

	// SIGKILL the agent: the service keeps answering, same pid; the new
	// agent adopts it and does not start it twice.
	secondPID := pidOf(t, answer)
	a.signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	if answer, err = get(url); err != nil || pidOf(t, answer) != secondPID {
		t.Fatalf("with the agent dead the service answered %q, %v; want pid %d", answer, err, secondPID)
	}
	a.restart(t)
	waitFor(t, 20*time.Second, "restarted agent adopts the service", func() (bool, string) {
		svc, err = c.Service(ctx, "svc-node", "1.echo.ops.test")
		return err == nil && svc.State == api.ServiceRunning && svc.PID == secondPID, fmt.Sprintf("%+v %v", svc, err)
	})
	if svc.Restarts != 1 {
		t.Errorf("adopted service has %d restarts, want 1 (not started again)", svc.Restarts)
	}
	if answer, err = get(url); err != nil || pidOf(t, answer) != secondPID {
		t.Fatalf("after adoption the service answered %q, %v; want pid %d", answer, err, secondPID)
	}

	// The local API answers on the socket without a server and on TCP only
	// with the token.
	local := client.NewAgent(filepath.Join(a.dataDir, "agent.sock"))
	st, err := local.AgentStatus(ctx)
	if err != nil || len(st.Presence.Services) != 1 {
		t.Fatalf("local status: %+v, %v", st, err)
	}
	if code := localTCPStatus(t, localAddr, ""); code != http.StatusUnauthorized {
		t.Errorf("TCP local API without a token: HTTP %d, want 401", code)
	}
	if code := localTCPStatus(t, localAddr, token); code != http.StatusOK {
		t.Errorf("TCP local API with the token: HTTP %d, want 200", code)
	}
	out, stderr, code = s.run(t, "service", "ls", "--agent-socket", filepath.Join(a.dataDir, "agent.sock"))
	if code != 0 || !strings.Contains(out, "1.echo.ops.test") || !strings.Contains(out, "running") {
		t.Errorf("service ls on the socket: exit %d\n%s%s", code, out, stderr)
	}

	// The service's allocation gives its log and restarts it.
	if logs, stderr, code := s.run(t, "allocation", "logs", "svc-node", "service:1.echo.ops.test"); code != 0 || !strings.Contains(logs, "echosvc request /") {
		t.Errorf("allocation logs: exit %d, %q %s; want the service's log", code, logs, stderr)
	}
	if out, stderr, code := s.run(t, "allocation", "restart", "svc-node", "service:1.echo.ops.test"); code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("allocation restart: exit %d\n%s%s", code, out, stderr)
	}
	waitFor(t, 10*time.Second, "restarted service answers with a new pid", func() (bool, string) {
		answer, err = get(url)
		return err == nil && pidOf(t, answer) != secondPID, fmt.Sprint(answer, err)
	})

	// logs -f, through the server, prints what the service writes while it
	// follows, and ends cleanly on Ctrl-C.
	follow := s.startCLI(t, "service", "logs", "-f", "--tail", "4096", "svc-node", "1.echo.ops.test")
	// The tail holds the earlier requests: once it is out, what comes next
	// can only come by following.
	waitFor(t, 10*time.Second, "logs -f to print the tail", func() (bool, string) {
		return strings.Contains(follow.output(), "echosvc request /"), follow.output()
	})
	for i := range 3 {
		if _, err := get(fmt.Sprintf("%sfollowed-%d", url, i)); err != nil {
			t.Fatalf("request to the service: %v", err)
		}
	}
	waitFor(t, 10*time.Second, "logs -f to print the requests made while it follows", func() (bool, string) {
		out := follow.output()
		return strings.Contains(out, "echosvc request /followed-0") && strings.Contains(out, "echosvc request /followed-2"), out
	})
	follow.signal(syscall.SIGINT)
	if code := follow.wait(10 * time.Second); code != 0 {
		t.Errorf("logs -f after Ctrl-C: exit %d, want a clean exit\n%s", code, follow.output())
	}
	if n := strings.Count(follow.output(), "echosvc request /followed-1"); n != 1 {
		t.Errorf("logs -f printed a line %d times, want once:\n%s", n, follow.output())
	}

	// Stop: the log holds what it printed; then the artifact can go.
	if out, stderr, code := s.run(t, "service", "stop", "svc-node", "1.echo.ops.test"); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("service stop: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := get(url); err == nil {
		t.Errorf("stopped service still answers")
	}
	if as, err := c.Allocations(ctx, "svc-node"); err != nil || len(as) != 0 {
		t.Errorf("a stopped service still holds %+v, %v", as, err)
	}
	logs, _, _ := s.run(t, "service", "logs", "svc-node", "1.echo.ops.test")
	if !strings.Contains(logs, "echosvc request /") || !strings.Contains(logs, "stopping on SIGTERM") {
		t.Errorf("service logs lack its output:\n%s", logs)
	}
	if _, stderr, code := s.run(t, "service", "rm", "svc-node", "1.echo.ops.test"); code != 0 {
		t.Fatalf("service rm: exit %d: %s", code, stderr)
	}
	if _, stderr, code := s.run(t, "artifact", "rm", "svc-node", "acme:echo:1.0"); code != 0 {
		t.Fatalf("artifact rm: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("removed artifact tree still there: %v", err)
	}
}

func localTCPStatus(t *testing.T, addr, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("local API on TCP: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestBadArtifactsAndServicesAreRefused: hostile and corrupt archives,
// malformed coordinates and unknown artifacts fail with clear errors and
// leave nothing behind.
func TestBadArtifactsAndServicesAreRefused(t *testing.T) {
	depot := artifacttest.NewDepot(t)
	depot.Publish(artifact.ID{Group: "acme", Artifact: "slip", Version: "1"}, ".zip",
		artifacttest.Zip(t, artifacttest.Entry{Name: "../../evil", Body: "x"}))
	corrupt := depot.Publish(artifact.ID{Group: "acme", Artifact: "corrupt", Version: "1"}, ".zip",
		artifacttest.Zip(t, artifacttest.Entry{Name: "ok", Body: "fine"}))
	depot.Put(corrupt+".sha256", []byte(strings.Repeat("0", 64)+"\n"))
	s := startServer(t)
	a, _ := startOnline(t, s, "bad-node", "--depot", "acme="+depot.URL())

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"zip slip", []string{"artifact", "install", "bad-node", "acme:slip:1"}, ".."},
		{"checksum mismatch", []string{"artifact", "install", "bad-node", "acme:corrupt:1"}, "checksum"},
		{"unknown artifact", []string{"artifact", "install", "bad-node", "acme:nothere:1"}, "not in depot"},
		{"no depot for group", []string{"artifact", "install", "bad-node", "other:x:1"}, "depot"},
		{"malformed id", []string{"artifact", "install", "bad-node", "acme:x"}, "id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := s.run(t, tc.args...)
			if code == 0 || !strings.Contains(strings.ToLower(stderr), tc.want) {
				t.Errorf("%v: exit %d, %q; want a failure mentioning %q", tc.args, code, stderr, tc.want)
			}
		})
	}
	entries, _ := os.ReadDir(filepath.Join(a.dataDir, "software"))
	for _, e := range entries {
		if e.Name() != ".tmp" {
			t.Errorf("failed installs left %s in software/", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "evil")); !os.IsNotExist(err) {
		t.Errorf("zip slip wrote outside the tree: %v", err)
	}

	// A port another process holds cannot be given to a service.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := held.Addr().(*net.TCPAddr).Port
	publishEcho(t, depot, "acme:echo:1")
	if _, stderr, code := s.run(t, "artifact", "install", "bad-node", "acme:echo:1"); code != 0 {
		t.Fatalf("install acme:echo:1: %s", stderr)
	}

	spec := filepath.Join(t.TempDir(), "svc.yaml")
	for _, tc := range []struct{ name, yaml, want string }{
		{"port taken", fmt.Sprintf("coordinate: 1.a.b.c\nartifact: acme:echo:1\ncommand: [bin/echosvc]\nport: %d\n", heldPort), "port"},
		{"port out of range", "coordinate: 1.a.b.c\nartifact: acme:echo:1\ncommand: [bin/echosvc]\nport: 70000\n", "port"},
		{"command leaves the artifact", "coordinate: 1.a.b.c\nartifact: acme:echo:1\ncommand: [../../../bin/sh]\n", "command"},
		{"malformed coordinate", "coordinate: a.b.c\nartifact: acme:echo:1\ncommand: [x]\n", "coordinate"},
		{"artifact not installed", "coordinate: 1.a.b.c\nartifact: acme:echo:9\ncommand: [x]\n", "install it"},
		{"no command", "coordinate: 1.a.b.c\nartifact: acme:echo:1\n", "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(spec, []byte(tc.yaml), 0o644)
			_, stderr, code := s.run(t, "service", "start", "bad-node", "-f", spec)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("service start %s: exit %d, %q; want a failure mentioning %q", tc.name, code, stderr, tc.want)
			}
		})
	}
	var svcs api.ServiceList
	out, _, _ := s.run(t, "service", "ls", "bad-node", "--json")
	if err := json.Unmarshal([]byte(out), &svcs); err != nil || svcs.Services == nil || len(svcs.Services) != 0 {
		t.Errorf("refused services left records: %s (%v)", out, err)
	}
}
