package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestContainersOnCommand is issue 6's containers end to end: deploy
// through the server onto a node's engine, statuses reported back, move
// and replicate across nodes, an agent SIGKILLed and restarted re-adopts
// its container, delete leaves nothing behind.
func TestContainersOnCommand(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng) // removes leftovers when the test ends
	labelJSON, _ := json.Marshal(testLabels)
	s := startServer(t)
	a1 := startAgent(t, s, "ct-one", "--container-host-ip", "127.0.0.1")
	a2 := startAgent(t, s, "ct-two", "--container-host-ip", "127.0.0.1", "--container-usage-interval", "300ms")
	waitStatus(t, s, "ct-one", api.StatusOnline, 20*time.Second)
	waitStatus(t, s, "ct-two", api.StatusOnline, 20*time.Second)
	c := s.client()
	ctx := context.Background()

	dir := t.TempDir()
	webJob := filepath.Join(dir, "web.yaml")
	os.WriteFile(webJob, []byte(fmt.Sprintf(`name: web
image: %s
command: [sh, -c, "echo hello from web; mkdir -p /www && echo web-up > /www/index.html && exec httpd -f -p 8080 -h /www"]
cpus: 0.5
memory_mb: 64
env: {MODE: test}
ports: [{container: 8080}]
labels: %s
`, image, labelJSON)), 0o644)
	out, stderr, code := s.run(t, "container", "deploy", "ct-one", "-f", webJob, "--id", "web1", "--json")
	if code != 0 {
		t.Fatalf("container deploy: exit %d\n%s%s", code, out, stderr)
	}
	var web api.Container
	if err := json.Unmarshal([]byte(out), &web); err != nil || web.Status != api.ContainerRunning || len(web.Ports) != 1 || web.Ports[0].Host == 0 {
		t.Fatalf("deployed %s: %+v, %v; want RUNNING with a host port", out, web, err)
	}
	answers := func(port int) func() (bool, string) {
		return func() (bool, string) {
			body, err := get(fmt.Sprintf("http://127.0.0.1:%d/", port))
			return err == nil && strings.Contains(body, "web-up"), fmt.Sprint(body, err)
		}
	}
	waitFor(t, 15*time.Second, "web answers on its host port", answers(web.Ports[0].Host))
	if logs, _, _ := s.run(t, "container", "logs", "web1"); !strings.Contains(logs, "hello from web") {
		t.Errorf("container logs = %q, want the job's output", logs)
	}
	followContainer(t, s, dir, image, string(labelJSON))

	// The node's books hold web1's CPUs, memory and port.
	res, err := c.Resources(ctx, "ct-one")
	if err != nil || !res.Onboarded || res.Allocated.CPUs != 0.5 || res.Allocated.MemoryMB != 64 {
		t.Fatalf("ct-one resources: %+v, %v; want onboarded, 0.5 CPUs and 64 MiB allocated", res, err)
	}
	if len(res.Allocations) != 1 || res.Allocations[0].ID != "container:web1" || len(res.Allocations[0].Ports) != 1 || res.Allocations[0].Ports[0] != web.Ports[0].Host {
		t.Errorf("ct-one allocations = %+v, want container:web1 holding port %d", res.Allocations, web.Ports[0].Host)
	}
	// A job larger than the node's offer is refused with what is short,
	// and leaves no container, no port and no booking behind.
	bigJob := filepath.Join(dir, "big.yaml")
	os.WriteFile(bigJob, []byte(fmt.Sprintf("name: big\nimage: %s\ncpus: 64\nports: [{container: 80}]\nlabels: %s\n", image, labelJSON)), 0o644)
	if _, stderr, code := s.run(t, "container", "deploy", "ct-one", "-f", bigJob, "--id", "big1"); code == 0 || !strings.Contains(stderr, "does not fit") || !strings.Contains(stderr, "short") {
		t.Errorf("deploy of 64 CPUs: exit %d, %q; want refused with what is short", code, stderr)
	}
	deployOnWorkers(t, s, dir, image, string(labelJSON))
	if as, err := c.Allocations(ctx, "ct-one"); err != nil || len(as) != 1 {
		t.Errorf("after the refused deploy ct-one holds %+v, %v; want web1 only", as, err)
	}
	if _, err := c.Container(ctx, "big1"); err == nil {
		t.Errorf("the refused job big1 is known to the server")
	}

	// A job that exits 3: its FAILED status reaches the server by report.
	failJob := filepath.Join(dir, "fail.yaml")
	os.WriteFile(failJob, []byte(fmt.Sprintf("name: fail\nimage: %s\ncommand: [sh, -c, \"sleep 1; exit 3\"]\nlabels: %s\n", image, labelJSON)), 0o644)
	if out, stderr, code := s.run(t, "container", "deploy", "ct-two", "-f", failJob, "--id", "fail1"); code != 0 {
		t.Fatalf("deploy fail1: exit %d\n%s%s", code, out, stderr)
	}
	waitFor(t, 20*time.Second, "fail1 reported FAILED with exit code 3", func() (bool, string) {
		ct, err := c.Container(ctx, "fail1")
		return err == nil && ct.Status == api.ContainerFailed && ct.ExitCode != nil && *ct.ExitCode == 3, fmt.Sprintf("%+v %v", ct, err)
	})

	// Move web1 to ct-two: it runs there, and is undeployed on ct-one.
	if out, stderr, code := s.run(t, "container", "move", "web1", "ct-two"); code != 0 {
		t.Fatalf("container move: exit %d\n%s%s", code, out, stderr)
	}
	moved, err := c.Container(ctx, "web1")
	n2, _ := nodeByName(t, s, "ct-two")
	if err != nil || moved.Node != n2.ID || moved.Status != api.ContainerRunning {
		t.Fatalf("after move: %+v, %v; want RUNNING on ct-two", moved, err)
	}
	waitFor(t, 15*time.Second, "moved web answers", answers(moved.Ports[0].Host))
	waitFor(t, 15*time.Second, "ct-two reports web1's usage to the server", func() (bool, string) {
		ct, err := c.Container(ctx, "web1")
		return err == nil && ct.Usage != nil && ct.Usage.MemoryBytes > 0 && ct.Usage.MemoryLimitBytes == 64<<20, fmt.Sprintf("%+v %v", ct.Usage, err)
	})
	if as, _ := c.Allocations(ctx, "ct-one"); len(as) != 0 {
		t.Errorf("after the move ct-one still holds %+v", as)
	}

	// Lock resources on ct-one, see them committed, and deploy a job from
	// them: the commitment becomes the job's allocation.
	out, stderr, code = s.run(t, "node", "commit", "ct-one", "--owner", "e2e", "--cpus", "0.25", "--memory-mb", "32", "--ttl", "5m", "--json")
	var cm api.Commitment
	if code != 0 || json.Unmarshal([]byte(out), &cm) != nil || cm.ID == "" {
		t.Fatalf("node commit: exit %d\n%s%s", code, out, stderr)
	}
	if res, err := c.Resources(ctx, "ct-one"); err != nil || res.Committed.CPUs != 0.25 || len(res.Commitments) != 1 || res.Commitments[0].ExpiresAt.IsZero() {
		t.Errorf("ct-one after commit: %+v, %v; want 0.25 CPUs committed, with an expiry", res, err)
	}
	committedJob := filepath.Join(dir, "committed.yaml")
	os.WriteFile(committedJob, []byte(fmt.Sprintf("name: small\nimage: %s\ncommand: [sleep, \"60\"]\ncpus: 0.25\nmemory_mb: 32\ncommitment: %s\nlabels: %s\n", image, cm.ID, labelJSON)), 0o644)
	if out, stderr, code := s.run(t, "container", "deploy", "ct-one", "-f", committedJob, "--id", "small1"); code != 0 {
		t.Fatalf("deploy from a commitment: exit %d\n%s%s", code, out, stderr)
	}
	if res, err := c.Resources(ctx, "ct-one"); err != nil || res.Committed.CPUs != 0 || len(res.Commitments) != 0 || res.Allocated.CPUs != 0.25 {
		t.Errorf("ct-one after deploying from the commitment: %+v, %v; want it allocated, nothing committed", res, err)
	}
	if out, stderr, code := s.run(t, "container", "delete", "small1"); code != 0 {
		t.Fatalf("delete small1: exit %d\n%s%s", code, out, stderr)
	}

	// Replicate it back onto ct-one under a new id.
	out, stderr, code = s.run(t, "container", "replicate", "web1", "ct-one", "--json")
	var replicated api.ContainerList
	if code != 0 || json.Unmarshal([]byte(out), &replicated) != nil || len(replicated.Containers) != 1 || replicated.Containers[0].Job.ID == "web1" {
		t.Fatalf("container replicate: exit %d\n%s%s", code, out, stderr)
	}
	copies := replicated.Containers
	waitFor(t, 15*time.Second, "replica answers", answers(copies[0].Ports[0].Host))

	// SIGKILL ct-two's agent: the container keeps running; the restarted
	// agent adopts it (same engine container) and keeps its port booked.
	a2.signal(syscall.SIGKILL)
	a2.wait(10 * time.Second)
	waitFor(t, 5*time.Second, "web answers with its agent dead", answers(moved.Ports[0].Host))
	a2.restart(t)
	waitFor(t, 20*time.Second, "ct-two's agent back", func() (bool, string) {
		_, err := c.Allocations(ctx, "ct-two")
		return err == nil, fmt.Sprint(err)
	})
	adopted, err := c.Container(ctx, "web1")
	if err != nil || adopted.ContainerID != moved.ContainerID || adopted.Status != api.ContainerRunning {
		t.Fatalf("after the agent restart: %+v, %v; want the same container RUNNING", adopted, err)
	}
	ports, _ := os.ReadFile(filepath.Join(a2.dataDir, "ports.json"))
	if !strings.Contains(string(ports), fmt.Sprint(moved.Ports[0].Host)) {
		t.Errorf("restarted agent's port allocator lost web1's port %d: %s", moved.Ports[0].Host, ports)
	}
	waitFor(t, 20*time.Second, "ct-two books web1 once after the agent restart", func() (bool, string) {
		res, err := c.Resources(ctx, "ct-two")
		return err == nil && len(res.Allocations) == 1 && res.Allocated.CPUs == 0.5, fmt.Sprintf("%+v %v", res.Allocations, err)
	})

	// An allocation's workload gives its logs and restarts, whatever its
	// kind; a container restarts as a fresh one.
	replicaAlloc := "container:" + copies[0].Job.ID
	if logs, stderr, code := s.run(t, "allocation", "logs", "ct-one", replicaAlloc); code != 0 || !strings.Contains(logs, "hello from web") {
		t.Errorf("allocation logs %s: exit %d, %q %s; want the job's output", replicaAlloc, code, logs, stderr)
	}
	if out, stderr, code := s.run(t, "allocation", "restart", "ct-one", replicaAlloc); code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("allocation restart %s: exit %d\n%s%s", replicaAlloc, code, out, stderr)
	}
	waitFor(t, 15*time.Second, "the server sees the restarted replica, a new container", func() (bool, string) {
		ct, err := c.Container(ctx, copies[0].Job.ID)
		return err == nil && ct.Status == api.ContainerRunning && ct.ContainerID != copies[0].ContainerID, fmt.Sprintf("%+v %v", ct, err)
	})

	// Stopping an allocation stops its workload, whatever its kind.
	if out, stderr, code := s.run(t, "allocation", "stop", "ct-one", replicaAlloc); code != 0 || !strings.Contains(out, "undeployed") {
		t.Fatalf("allocation stop %s: exit %d\n%s%s", replicaAlloc, code, out, stderr)
	}
	waitFor(t, 10*time.Second, "server sees the replica undeployed", func() (bool, string) {
		ct, err := c.Container(ctx, copies[0].Job.ID)
		return err == nil && ct.Status == api.ContainerUndeployed, fmt.Sprintf("%+v %v", ct, err)
	})

	// Listing spans nodes; delete leaves no container behind.
	out, _, _ = s.run(t, "container", "ls")
	if !strings.Contains(out, "web1") || strings.Contains(out, copies[0].Job.ID) || strings.Contains(out, "fail1") {
		t.Errorf("container ls (live):\n%s", out)
	}
	// web1 was moved to ct-two above: ls names that node, not its id.
	if ct, err := c.Container(ctx, "web1"); err != nil || ct.NodeName != "ct-two" || ct.Node == "" {
		t.Errorf("GET container web1 = %+v, %v; want it on the node named ct-two", ct, err)
	} else if !strings.Contains(out, " ct-two ") || strings.Contains(out, ct.Node) {
		t.Errorf("container ls names the node by its id %s, want its name ct-two:\n%s", ct.Node, out)
	}
	if out, stderr, code := s.run(t, "container", "delete", "web1"); code != 0 || strings.Count(out, "undeployed") != 1 {
		t.Fatalf("container delete: exit %d\n%s%s", code, out, stderr)
	}
	waitFor(t, 20*time.Second, "only fail1's exited container is left", func() (bool, string) {
		left := dockertest.Containers(t, eng, testLabels)
		return len(left) <= 1, fmt.Sprint(left)
	})
	_ = a1
}

// TestBadContainerCommandsAreRefused: a missing image, an unknown command,
// a bad job: clear errors, no container and no port left.
func TestBadContainerCommandsAreRefused(t *testing.T) {
	eng := dockertest.Client(t)
	dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng)
	labelJSON, _ := json.Marshal(testLabels)
	s := startServer(t)
	a, _ := startOnline(t, s, "ct-bad", "--container-host-ip", "127.0.0.1")
	dir := t.TempDir()
	cases := []struct{ name, file, want string }{
		{"missing image", fmt.Sprintf("name: x\nimage: nodemgr-test/no-such-image:1\nports: [{container: 80}]\nlabels: %s\n", labelJSON), "no-such-image"},
		{"negative cpus", "name: x\nimage: busybox\ncpus: -1\n", "cpus"},
		{"bad port", "name: x\nimage: busybox\nports: [{container: 70000}]\n", "ports[0].container"},
		{"unikernel", "name: x\nimage: busybox\ntechnology: unikernel\n", "unikernel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(dir, "job.yaml")
			os.WriteFile(f, []byte(tc.file), 0o644)
			_, stderr, code := s.run(t, "container", "deploy", "ct-bad", "-f", f)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("deploy %s: exit %d, %q; want a failure naming %q", tc.name, code, stderr, tc.want)
			}
		})
	}
	msg := filepath.Join(dir, "msg.yaml")
	os.WriteFile(msg, []byte("command: explode\njob: {name: x, image: busybox}\nworker: [ct-bad]\n"), 0o644)
	if _, stderr, code := s.run(t, "container", "send", "-f", msg); code == 0 || !strings.Contains(stderr, "command") {
		t.Errorf("unknown command: exit %d, %q; want a failure naming the command field", code, stderr)
	}
	if left := dockertest.Containers(t, eng, testLabels); len(left) != 0 {
		t.Errorf("refused deploys left containers: %v", left)
	}
	if ports, err := os.ReadFile(filepath.Join(a.dataDir, "ports.json")); err == nil && strings.Contains(string(ports), "container:") {
		t.Errorf("refused deploys left ports booked: %s", ports)
	}
}

// followContainer runs a job that ticks and follows its output with
// container logs -f through the server: the ticks come in order, none
// twice, and Ctrl-C ends it cleanly. The job is gone afterwards.
func followContainer(t *testing.T, s *server, dir, image, labelJSON string) {
	t.Helper()
	tickJob := filepath.Join(dir, "tick.yaml")
	os.WriteFile(tickJob, []byte(fmt.Sprintf(`name: tick
image: %s
command: [sh, -c, "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"]
labels: %s
`, image, labelJSON)), 0o644)
	if out, stderr, code := s.run(t, "container", "deploy", "ct-two", "-f", tickJob, "--id", "tick1"); code != 0 {
		t.Fatalf("deploy the ticker: exit %d\n%s%s", code, out, stderr)
	}
	defer s.run(t, "container", "delete", "tick1")
	follow := s.startCLI(t, "container", "logs", "-f", "--tail", "1", "tick1")
	waitFor(t, 20*time.Second, "logs -f to follow the ticks", func() (bool, string) {
		return strings.Count(follow.output(), "tick ") >= 20, follow.output()
	})
	follow.signal(syscall.SIGINT)
	if code := follow.wait(10 * time.Second); code != 0 {
		t.Errorf("container logs -f after Ctrl-C: exit %d, want a clean exit\n%s", code, follow.output())
	}
	prev := -1
	for _, l := range strings.Split(strings.TrimSpace(follow.output()), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "tick %d", &n); err != nil {
			t.Fatalf("unexpected line %q in\n%s", l, follow.output())
		}
		if prev >= 0 && n != prev+1 {
			t.Fatalf("tick %d after tick %d: a line missed or repeated\n%s", n, prev, follow.output())
		}
		prev = n
	}
}

// deployOnWorkers sends the seed's deploy message naming two workers: the
// job runs on both. When one of them cannot take it (its CPUs are
// committed elsewhere), nothing is left on the other: all or nothing.
func deployOnWorkers(t *testing.T, s *server, dir, image, labelJSON string) {
	t.Helper()
	msg := filepath.Join(dir, "multi.yaml")
	os.WriteFile(msg, []byte(fmt.Sprintf("command: deploy\ncluster: [here]\nworker: [ct-one, ct-two]\njob: {id: multi, name: multi, image: %s, command: [sleep, \"60\"], cpus: 0.1, memory_mb: 16, labels: %s}\n", image, labelJSON)), 0o644)
	out, stderr, code := s.run(t, "container", "send", "-f", msg)
	var got api.ContainerList
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Containers) != 2 {
		t.Fatalf("deploy on two workers: exit %d\n%s%s; want two containers", code, out, stderr)
	}
	for _, want := range []string{"multi-ct-one", "multi-ct-two"} {
		if _, stderr, code := s.run(t, "container", "delete", want); code != 0 {
			t.Errorf("delete %s: exit %d: %s", want, code, stderr)
		}
	}

	out, stderr, code = s.run(t, "node", "commit", "ct-two", "--owner", "e2e", "--cpus", "1.5", "--ttl", "5m", "--json")
	var cm api.Commitment
	if code != 0 || json.Unmarshal([]byte(out), &cm) != nil {
		t.Fatalf("node commit ct-two: exit %d\n%s%s", code, out, stderr)
	}
	os.WriteFile(msg, []byte(fmt.Sprintf("command: deploy\nworker: [ct-one, ct-two]\njob: {id: half, name: half, image: %s, command: [sleep, \"60\"], cpus: 1, memory_mb: 16, labels: %s}\n", image, labelJSON)), 0o644)
	if _, stderr, code := s.run(t, "container", "send", "-f", msg); code == 0 || !strings.Contains(stderr, "ct-two") || !strings.Contains(stderr, "deleted again") {
		t.Errorf("deploy that ct-two cannot take: exit %d, %q; want refused naming ct-two, the other undone", code, stderr)
	}
	if out, _, _ := s.run(t, "container", "ls"); strings.Contains(out, "half") {
		t.Errorf("a refused two-worker deploy left a container:\n%s", out)
	}
	if _, stderr, code := s.run(t, "node", "release", "ct-two", cm.ID); code != 0 {
		t.Fatalf("release the commitment: %s", stderr)
	}
}
