package container_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mobycontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

// httpdJob serves "hello-$GREETING" on container port 8080.
func (e *env) httpdJob(name string) api.ContainerJob {
	j := e.job(name, "sh", "-c", `mkdir -p /www && echo "hello-$GREETING" > /www/index.html && exec httpd -f -p 8080 -h /www`)
	j.Env = map[string]string{"GREETING": "world"}
	j.Ports = []api.ContainerPort{{Container: 8080}}
	return j
}

// get fetches http://127.0.0.1:port/, retrying until the server answers.
func get(t *testing.T, port int) string {
	t.Helper()
	var body string
	waitFor(t, fmt.Sprintf("an answer on port %d", port), func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	return body
}

func TestDeployRunsAndDeleteUndeploys(t *testing.T) {
	e := setup(t)
	ports := newMemPorts()
	m, _ := e.manager(ports, nil)
	ctx := ctxFor(t)

	job := e.httpdJob("web")
	job.CPUs, job.MemoryMB = 0.5, 64
	c, err := m.Deploy(ctx, job)
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	if c.Status != api.ContainerRunning || c.ContainerID == "" || c.Node != "node-1" || c.StartedAt == nil {
		t.Fatalf("Deploy = %+v, want RUNNING on node-1 with a container ID and a start time", c)
	}
	if c.Job.Technology != api.TechnologyDocker || c.Job.Ports[0].Protocol != "tcp" {
		t.Errorf("Deploy job = %+v, want the defaults filled in (docker, tcp)", c.Job)
	}
	owner := "container:" + job.ID
	held := ports.owned(owner)
	if len(c.Ports) != 1 || c.Ports[0].Container != 8080 || len(held) != 1 || c.Ports[0].Host != held[0] {
		t.Fatalf("Deploy ports = %+v, allocator holds %v for %s; want container 8080 on the allocated host port", c.Ports, held, owner)
	}
	if cpus, mem := m.Committed(); cpus != 0.5 || mem != 64 {
		t.Errorf("Committed() = %v, %v, want 0.5, 64", cpus, mem)
	}
	if fi, err := os.Stat(filepath.Join(e.dir, job.ID+".json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file: %v, want mode 0600", err)
	}

	res, err := e.engine.ContainerInspect(ctx, c.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	insp := res.Container
	checks := []struct {
		what      string
		got, want any
	}{
		{"NanoCPUs", insp.HostConfig.NanoCPUs, int64(5e8)},
		{"Memory", insp.HostConfig.Memory, int64(64 << 20)},
		{"label " + workload.LabelJob, insp.Config.Labels[workload.LabelJob], job.ID},
		{"label " + workload.LabelName, insp.Config.Labels[workload.LabelName], "web"},
		{"restart policy", string(insp.HostConfig.RestartPolicy.Name), "no"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("container %s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	if !slices.Contains(insp.Config.Env, "GREETING=world") {
		t.Errorf("container env %v lacks GREETING=world", insp.Config.Env)
	}
	if body := get(t, c.Ports[0].Host); body != "hello-world\n" {
		t.Errorf("GET / = %q, want %q", body, "hello-world\n")
	}

	d, err := m.Delete(ctx, job.ID)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if d.Status != api.ContainerUndeployed || d.FinishedAt == nil {
		t.Errorf("Delete = %+v, want UNDEPLOYED with a finish time", d)
	}
	if left := e.jobContainers(job.ID); len(left) != 0 {
		t.Errorf("containers left after Delete: %+v", left)
	}
	if held := ports.owned(owner); len(held) != 0 {
		t.Errorf("ports held after Delete: %v", held)
	}
	if cpus, mem := m.Committed(); cpus != 0 || mem != 0 {
		t.Errorf("Committed() after Delete = %v, %v, want 0, 0", cpus, mem)
	}
	if d, err := m.Delete(ctx, job.ID); err != nil || d.Status != api.ContainerUndeployed {
		t.Errorf("Delete again = %+v, %v, want UNDEPLOYED, nil", d, err)
	}
	if l := m.List(); len(l) != 1 || l[0].Status != api.ContainerUndeployed {
		t.Errorf("List() = %+v, want the UNDEPLOYED job", l)
	}
	if err := m.Forget(job.ID); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if _, err := m.Get(job.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Forget = %v, want not found", err)
	}
	if _, err := m.Delete(ctx, job.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Delete after Forget = %v, want not found", err)
	}
}

func TestExitStatusAndLogs(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		status string
		reason string
	}{
		{"exit 0", 0, api.ContainerCompleted, ""},
		{"exit 3", 3, api.ContainerFailed, "exit code 3"},
	}
	e := setup(t)
	ports := newMemPorts()
	ch := &changes{}
	m, _ := e.manager(ports, ch)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			job := e.job("batch", "sh", "-c", fmt.Sprintf("echo to-stdout; echo to-stderr >&2; sleep 1; exit %d", tc.code))
			job.Ports = []api.ContainerPort{{Container: 9000}}
			if _, err := m.Deploy(ctx, job); err != nil {
				t.Fatalf("Deploy: %v", err)
			}
			c := waitStatus(t, m, job.ID, tc.status)
			if c.ExitCode == nil || *c.ExitCode != tc.code || c.Reason != tc.reason || c.FinishedAt == nil {
				t.Errorf("job = %+v, want exit code %d, reason %q and a finish time", c, tc.code, tc.reason)
			}
			if held := ports.owned("container:" + job.ID); len(held) != 0 {
				t.Errorf("ports held after the job ended: %v", held)
			}
			logs, err := m.Logs(ctx, job.ID, 0)
			if err != nil {
				t.Fatalf("Logs: %v", err)
			}
			if got := string(logs); !strings.Contains(got, "to-stdout\n") || !strings.Contains(got, "to-stderr\n") {
				t.Errorf("Logs = %q, want both streams, demultiplexed", got)
			}
			if tail, err := m.Logs(ctx, job.ID, 1); err != nil || strings.Count(string(tail), "\n") != 1 {
				t.Errorf("Logs(tail 1) = %q, %v, want one line", tail, err)
			}
			var seen []string
			for _, x := range ch.list() {
				if x.Job.ID == job.ID && (len(seen) == 0 || seen[len(seen)-1] != x.Status) {
					seen = append(seen, x.Status)
				}
			}
			if want := []string{api.ContainerCreating, api.ContainerRunning, tc.status}; !slices.Equal(seen, want) {
				t.Errorf("OnChange statuses = %v, want %v", seen, want)
			}
			if _, err := m.Delete(ctx, job.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := m.Logs(ctx, job.ID, 0); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Logs after Delete = %v, want not found", err)
			}
		})
	}
}

func TestDeployFailuresLeaveNothing(t *testing.T) {
	e := setup(t)
	ports := newMemPorts()
	m, _ := e.manager(ports, nil)
	tests := []struct {
		name  string
		edit  func(*api.ContainerJob)
		class error
		says  []string
	}{
		{"missing image", func(j *api.ContainerJob) { j.Image = "nodemgr-test/missing:never" },
			errdefs.ErrNotFound, []string{`"nodemgr-test/missing:never"`, "docker load"}},
		{"command not found", func(j *api.ContainerJob) { j.Command = []string{"/no/such/command"} },
			nil, []string{"start container", "/no/such/command"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			job := e.job("broken")
			job.Ports = []api.ContainerPort{{Container: 80}}
			tc.edit(&job)
			_, err := m.Deploy(ctx, job)
			if err == nil || (tc.class != nil && !errors.Is(err, tc.class)) {
				t.Fatalf("Deploy = %v, want an error of class %v", err, tc.class)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Deploy = %q, want it to say %q", err, s)
				}
			}
			c, gerr := m.Get(job.ID)
			if gerr != nil || c.Status != api.ContainerFailed || c.Reason == "" {
				t.Errorf("Get = %+v, %v, want FAILED with a reason", c, gerr)
			}
			if left := e.jobContainers(job.ID); len(left) != 0 {
				t.Errorf("containers left: %+v", left)
			}
			if held := ports.owned("container:" + job.ID); len(held) != 0 {
				t.Errorf("ports held: %v", held)
			}
			if cpus, mem := m.Committed(); cpus != 0 || mem != 0 {
				t.Errorf("Committed() = %v, %v, want 0, 0", cpus, mem)
			}
		})
	}
}

func TestDeployRefusals(t *testing.T) {
	e := setup(t)
	m, _ := e.manager(nil, nil) // no port allocator
	ctx := ctxFor(t)

	bad := e.job("x")
	bad.MemoryMB = 3
	if _, err := m.Deploy(ctx, bad); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "memory_mb") {
		t.Errorf("Deploy(memory 3 MiB) = %v, want invalid memory_mb", err)
	}
	noHost := e.job("x")
	noHost.Ports = []api.ContainerPort{{Container: 80}}
	var fe *errdefs.FieldError
	if _, err := m.Deploy(ctx, noHost); !errors.As(err, &fe) || fe.Field != "ports[0].host" {
		t.Errorf("Deploy(host 0, no allocator) = %v, want a field error on ports[0].host", err)
	}
	if l := m.List(); len(l) != 0 {
		t.Errorf("List() = %+v after refused deploys, want no records", l)
	}

	job := e.job("sleeper", "sleep", "300")
	job.ID = ""
	c, err := m.Deploy(ctx, job)
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	if c.Job.ID == "" {
		t.Fatalf("Deploy gave no ID to a job without one")
	}
	job.ID = c.Job.ID
	if _, err := m.Deploy(ctx, job); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Deploy(same ID) = %v, want a conflict", err)
	}
	if err := m.Forget(job.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Forget(running) = %v, want a conflict", err)
	}
	if _, err := m.Delete(ctx, job.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	c2, err := m.Deploy(ctx, job)
	if err != nil || c2.Status != api.ContainerRunning || c2.ContainerID == c.ContainerID {
		t.Errorf("Deploy(UNDEPLOYED ID) = %+v, %v, want a new container RUNNING", c2, err)
	}
}

func TestAdoptAfterRestart(t *testing.T) {
	e := setup(t)
	ctx := ctxFor(t)
	portsA := newMemPorts()
	a, stopA := e.manager(portsA, nil)

	web := e.httpdJob("web")
	cWeb, err := a.Deploy(ctx, web)
	if err != nil {
		t.Fatalf("Deploy web: %v", err)
	}
	sleeper := e.job("sleeper", "sleep", "300")
	cSleeper, err := a.Deploy(ctx, sleeper)
	if err != nil {
		t.Fatalf("Deploy sleeper: %v", err)
	}
	stopA()

	// While no agent runs: web keeps running, sleeper is killed.
	if insp, err := e.engine.ContainerInspect(ctx, cWeb.ContainerID, client.ContainerInspectOptions{}); err != nil || !insp.Container.State.Running {
		t.Fatalf("web's container after A stopped: %v, running %v; want it left running", err, insp.Container.State != nil && insp.Container.State.Running)
	}
	zero := 0
	if _, err := e.engine.ContainerStop(ctx, cSleeper.ContainerID, client.ContainerStopOptions{Timeout: &zero}); err != nil {
		t.Fatalf("stop sleeper: %v", err)
	}
	// And a deploy was cut short after its container was created.
	cut := e.job("cut")
	created, err := e.engine.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &mobycontainer.Config{Image: e.image, Cmd: []string{"sleep", "300"},
			Labels: map[string]string{workload.LabelJob: cut.ID, "nodemgr.test": e.labels["nodemgr.test"]}},
	})
	if err != nil {
		t.Fatalf("create the cut-short deploy's container: %v", err)
	}
	writeRecord(t, e.dir, api.Container{Job: cut, Status: api.ContainerCreating, ContainerID: created.ID, CreatedAt: time.Now()})

	portsB := newMemPorts()
	ch := &changes{}
	b, _ := e.manager(portsB, ch)
	got := waitStatus(t, b, web.ID, api.ContainerRunning)
	if got.ContainerID != cWeb.ContainerID {
		t.Errorf("adopted web container = %s, want %s", got.ContainerID, cWeb.ContainerID)
	}
	host := cWeb.Ports[0].Host
	waitFor(t, "B to book web's port", func() bool { return slices.Equal(portsB.owned("container:"+web.ID), []int{host}) })
	if _, err := portsB.Allocate("someone-else", []int{host}, 0); err == nil {
		t.Errorf("port %d was handed out again while web holds it", host)
	}
	if body := get(t, host); body != "hello-world\n" {
		t.Errorf("GET / = %q after adoption", body)
	}

	s := waitStatus(t, b, sleeper.ID, api.ContainerFailed)
	if s.ExitCode == nil || *s.ExitCode != 137 {
		t.Errorf("sleeper = %+v, want FAILED with exit code 137", s)
	}
	cu := waitStatus(t, b, cut.ID, api.ContainerFailed)
	if !strings.Contains(cu.Reason, "deploy it again") {
		t.Errorf("cut-short job reason = %q", cu.Reason)
	}
	if left := e.jobContainers(cut.ID); len(left) != 0 {
		t.Errorf("the cut-short deploy's container is left: %+v", left)
	}

	// Removed behind the manager's back: FAILED (DEAD is for out of
	// memory), saying so, and its port given back.
	if _, err := e.engine.ContainerRemove(ctx, cWeb.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatalf("docker rm -f: %v", err)
	}
	removed := waitStatus(t, b, web.ID, api.ContainerFailed)
	if !strings.HasPrefix(removed.Reason, "removed outside nodemgr") {
		t.Errorf("reason = %q, want it to start %q", removed.Reason, "removed outside nodemgr")
	}
	if held := portsB.owned("container:" + web.ID); len(held) != 0 {
		t.Errorf("ports held by a removed job: %v", held)
	}
	waitFor(t, "OnChange to report FAILED", func() bool {
		return slices.ContainsFunc(ch.list(), func(c api.Container) bool { return c.Job.ID == web.ID && c.Status == api.ContainerFailed })
	})
}

func TestUsageSamples(t *testing.T) {
	e := setup(t)
	ch := &changes{}
	m, _ := e.manager(nil, ch, func(c *container.Config) { c.UsageInterval = 200 * time.Millisecond })
	job := e.job("busy", "sh", "-c", "while :; do :; done")
	job.CPUs, job.MemoryMB = 0.5, 32
	if _, err := m.Deploy(ctxFor(t), job); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	var u api.ContainerUsage
	waitFor(t, "a usage sample with CPU and memory", func() bool {
		for _, c := range ch.list() {
			if c.Job.ID == job.ID && c.Usage != nil && c.Usage.MemoryBytes > 0 && c.Usage.CPUPercent > 0 {
				u = *c.Usage
				return true
			}
		}
		return false
	})
	if u.MemoryLimitBytes != 32<<20 || u.At.IsZero() || u.CPUPercent > 80 {
		t.Errorf("usage = %+v, want a 32 MiB limit, a time, and at most about half a core", u)
	}
	if c, _ := m.Get(job.ID); c.Usage == nil {
		t.Errorf("Get: no usage on a sampled job")
	}
}

func TestOutOfMemoryIsDead(t *testing.T) {
	e := setup(t)
	m, _ := e.manager(nil, nil)
	job := e.job("hog", "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
	job.MemoryMB = 8
	if _, err := m.Deploy(ctxFor(t), job); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	c := waitStatus(t, m, job.ID, api.ContainerDead)
	if !strings.Contains(c.Reason, "out of memory") {
		t.Errorf("reason = %q, want it to say out of memory", c.Reason)
	}
}

func TestRunEndsOnCancel(t *testing.T) {
	e := setup(t)
	m, err := container.New(container.Config{Engine: e.engine, StateDir: e.dir})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := m.Run(context.Background()); err == nil {
		t.Errorf("second Run = nil, want an error")
	}
}

// A job's output is followed by cursor: the tail gives one, and each read
// after it gives the lines that came since, none twice, none missed.
func TestFollowOutput(t *testing.T) {
	e := setup(t)
	m, _ := e.manager(nil, nil)
	job := e.job("ticker", "sh", "-c", `i=0; while [ $i -lt 40 ]; do echo "tick $i"; [ $((i % 2)) = 1 ] && echo "odd $i" >&2; i=$((i+1)); sleep 0.05; done`)
	if _, err := m.Deploy(ctxFor(t), job); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	var got strings.Builder
	_, cursor, err := m.ReadLog(ctxFor(t), job.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	first := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(150 * time.Millisecond) {
		b, next, err := m.ReadLog(ctxFor(t), job.ID, 0, cursor)
		if err != nil {
			t.Fatalf("ReadLog after %q: %v", cursor, err)
		}
		got.Write(b)
		cursor = next
		if strings.Contains(got.String(), "tick 39\n") {
			break
		}
	}
	lines := strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n")
	want := 0
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "tick %d", &n); err == nil {
			if first < 0 {
				first, want = n, n
			}
			if n != want {
				t.Fatalf("tick %d after tick %d: a line missed or repeated\n%s", n, want-1, got.String())
			}
			want++
		}
	}
	if want != 40 || first > 30 {
		t.Errorf("followed ticks %d..%d, want through 39 from early on\n%s", first, want-1, got.String())
	}
	if !strings.Contains(got.String(), "odd 39\n") || strings.Count(got.String(), "odd 37\n") != 1 {
		t.Errorf("stderr lines missing or repeated:\n%s", got.String())
	}
	if _, _, err := m.ReadLog(ctxFor(t), job.ID, 0, "yesterday"); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "after") {
		t.Errorf("ReadLog with a bad cursor = %v, want an invalid-input error naming after", err)
	}
}

// A memory-limited job's container killed while no agent ran (docker
// kill) ended by SIGKILL, not for want of memory: only the engine's
// verdict makes it OOM. An OOM kill while the agent is away stays OOM.
func TestKilledWhileAwayIsNotOOM(t *testing.T) {
	e := setup(t)
	ctx := ctxFor(t)
	a, stopA := e.manager(nil, nil)
	sleeper := e.job("sleeper", "sleep", "300")
	sleeper.MemoryMB = 32
	cSleeper, err := a.Deploy(ctx, sleeper)
	if err != nil {
		t.Fatalf("Deploy sleeper: %v", err)
	}
	hog := e.job("hog", "sh", "-c", `sleep 1; x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
	hog.MemoryMB = 8
	cHog, err := a.Deploy(ctx, hog)
	if err != nil {
		t.Fatalf("Deploy hog: %v", err)
	}
	stopA()

	if _, err := e.engine.ContainerKill(ctx, cSleeper.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("docker kill: %v", err)
	}
	waitFor(t, "the hog to be OOM-killed", func() bool {
		res, err := e.engine.ContainerInspect(ctx, cHog.ContainerID, client.ContainerInspectOptions{})
		return err == nil && !res.Container.State.Running
	})

	b, _ := e.manager(nil, nil)
	s := waitStatus(t, b, sleeper.ID, api.ContainerFailed)
	if s.ExitCode == nil || *s.ExitCode != 137 || !strings.Contains(s.Reason, "SIGKILL") || strings.Contains(s.Reason, "memory") {
		t.Errorf("killed sleeper = %+v, want FAILED, exit code 137, a reason that names SIGKILL and not memory", s)
	}
	h := waitStatus(t, b, hog.ID, api.ContainerDead)
	if h.Reason != "out of memory" {
		t.Errorf("hog reason = %q, want %q", h.Reason, "out of memory")
	}
}

// TestDeployGivesTheResolver: a manager with DNS makes containers whose
// resolver it names (the agent's overlay names server); one without
// leaves the engine's default.
func TestDeployGivesTheResolver(t *testing.T) {
	e := setup(t)
	ctx := ctxFor(t)
	names := netip.MustParseAddr("100.64.3.1")
	for _, tc := range []struct {
		name string
		dns  func() []netip.Addr
		want []netip.Addr
	}{
		{"overlay", func() []netip.Addr { return []netip.Addr{names} }, []netip.Addr{names}},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := e.manager(newMemPorts(), nil, func(c *container.Config) { c.DNS = tc.dns })
			c, err := m.Deploy(ctx, e.httpdJob("dns-"+tc.name))
			if err != nil {
				t.Fatalf("Deploy: %v", err)
			}
			t.Cleanup(func() { m.Delete(context.Background(), c.Job.ID) })
			res, err := e.engine.ContainerInspect(ctx, c.ContainerID, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Container.HostConfig.DNS; !slices.Equal(got, tc.want) {
				t.Errorf("the container's resolvers = %v, want %v", got, tc.want)
			}
		})
	}
}
