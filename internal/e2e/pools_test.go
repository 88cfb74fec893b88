package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	dockerprov "github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// Pools on the docker provider: machines appear for demand, take an agent,
// run the work and go away. The agent binary delivered onto them is a
// static build of the same source.

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// staticNodemgr builds nodemgr without cgo, once: the binary the
// orchestrator copies into busybox containers.
func staticNodemgr(t testing.TB) string {
	t.Helper()
	staticOnce.Do(func() {
		staticBin = filepath.Join(filepath.Dir(binary), "nodemgr-static")
		build := exec.Command("go", "build", "-o", staticBin, "github.com/nodemgr/nodemgr/cmd/nodemgr")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			staticErr = fmt.Errorf("build a static nodemgr: %v\n%s", err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticBin
}

// poolEnv is a server whose pools make busybox containers on the engine.
type poolEnv struct {
	*server
	t     *testing.T
	eng   *client.Client
	image string
}

func startPoolServer(t *testing.T, extra ...string) *poolEnv {
	t.Helper()
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	args := append([]string{"--agent-binary", staticNodemgr(t), "--pool-tick", "200ms", "--pool-backoff", "500ms",
		"--pool-sweep", "500ms", "--pool-drain-timeout", "10s"}, extra...)
	s := startServer(t, args...)
	return &poolEnv{server: s, t: t, eng: eng, image: image}
}

// template stores a template of busybox machines that share the host's
// network (the server listens on loopback) with 1 CPU and 96 MiB.
func (p *poolEnv) template(name, image string) {
	p.t.Helper()
	if image == "" {
		image = p.image
	}
	body := fmt.Sprintf("name: %s\nimage: %s\ncpu: 1\nmemoryMB: 96\noverrides:\n  docker:\n    network_mode: host\n", name, image)
	if _, err := p.client().PutDocument(context.Background(), "templates", name, []byte(body)); err != nil {
		p.t.Fatalf("put template %s: %v", name, err)
	}
}

// apply creates or replaces a pool; its containers are removed when the
// test ends, whatever happened.
func (p *poolEnv) apply(spec api.PoolSpec) api.Pool {
	p.t.Helper()
	pool, err := p.client().ApplyPool(context.Background(), spec)
	if err != nil {
		p.t.Fatalf("apply pool %s: %v", spec.Name, err)
	}
	p.t.Cleanup(func() {
		for _, c := range p.containers(spec.Name) {
			p.eng.ContainerRemove(context.Background(), c, client.ContainerRemoveOptions{Force: true})
		}
	})
	return pool
}

// containers lists the engine's containers of a pool, in any state.
func (p *poolEnv) containers(pool string) []string {
	p.t.Helper()
	f := client.Filters{}
	f.Add("label", "nodemgr.pool="+pool)
	res, err := p.eng.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		p.t.Fatalf("list containers: %v", err)
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

func (p *poolEnv) pool(name string) api.PoolDetail {
	p.t.Helper()
	d, err := p.client().Pool(context.Background(), name)
	if err != nil {
		p.t.Fatalf("pool %s: %v", name, err)
	}
	return d
}

func (p *poolEnv) events(name string) []api.PoolEvent {
	p.t.Helper()
	evs, err := p.client().PoolEvents(context.Background(), name)
	if err != nil {
		p.t.Fatalf("pool events %s: %v", name, err)
	}
	return evs
}

func eventsOf(evs []api.PoolEvent, kind string) []api.PoolEvent {
	var out []api.PoolEvent
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func describeEvents(evs []api.PoolEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  %s %-10s %s %s\n", e.At.Format("15:04:05.000"), e.Kind, e.Machine, e.Message)
	}
	return b.String()
}

// waitMachines waits until a pool has n live machines in state.
func (p *poolEnv) waitMachines(name, state string, n int, timeout time.Duration) api.PoolDetail {
	p.t.Helper()
	var d api.PoolDetail
	waitFor(p.t, timeout, fmt.Sprintf("pool %s to have %d %s machines", name, n, state), func() (bool, string) {
		d = p.pool(name)
		return d.Machines[state] == n, fmt.Sprintf("%v; events:\n%s", d.Machines, describeEvents(p.events(name)))
	})
	return d
}

// TestPoolScalesToDemandAndBack: a pool at 0 machines scales up when a
// suite with its tags arrives, its agents register with the deployment
// and the container's limits, the suite runs to completion, and after the
// idle timeout the pool is back at 0 with no container left.
func TestPoolScalesToDemandAndBack(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-small", "")
	name := "builders-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-small", Provider: "docker", Tags: []string{"pooled"},
		Labels: map[string]string{"team": "build"}, Max: 2,
		IdleTimeout: api.Duration(3 * time.Second), MinAge: api.Duration(time.Second), BootstrapTimeout: api.Duration(60 * time.Second)})
	if d := p.pool(name); len(d.MachineList) != 0 || d.Desired != 0 {
		t.Fatalf("a new pool with min 0 and no demand has %d machines, desired %d; want none", len(d.MachineList), d.Desired)
	}

	createSuite(t, p.server, api.SuiteSpec{Name: "on-demand", Tags: []string{"pooled"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, p.server, "on-demand", slices.Repeat([]api.TaskSpec{sh("sleep 1")}, 6))
	p.client().CloseSuite(context.Background(), "on-demand")
	d := p.waitMachines(name, api.MachineReady, 2, 90*time.Second)
	su := waitSuite(t, p.server, "on-demand", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != 6 {
		t.Errorf("suite on pool machines: %+v, want 6 finished", su.Counts)
	}

	for _, m := range d.MachineList {
		n, err := p.client().Node(context.Background(), m.Node)
		if err != nil {
			t.Fatalf("node of machine %s: %v", m.ID, err)
		}
		if n.Deployment != m.Deployment {
			t.Errorf("node %s names deployment %q, want %q", n.Name, n.Deployment, m.Deployment)
		}
		dep, err := p.client().Deployment(context.Background(), m.Deployment)
		if err != nil || dep.Node != n.ID {
			t.Errorf("deployment %s names node %q (%v), want %q", m.Deployment, dep.Node, err, n.ID)
		}
		if !slices.Contains(n.Tags, "pooled") || n.Labels["team"] != "build" || n.Labels["nodemgr.pool"] != name {
			t.Errorf("node %s has tags %v, labels %v; want the pool's", n.Name, n.Tags, n.Labels)
		}
		// The agent in a 1-CPU, 96 MiB container reports those, not the host's.
		if n.Hardware.Cores != 1 || n.Hardware.MemoryBytes != 96<<20 {
			t.Errorf("node %s reports %d cores and %d MiB, want the container's 1 and 96", n.Name, n.Hardware.Cores, n.Hardware.MemoryBytes>>20)
		}
	}
	finishedOnPool := 0
	for _, tk := range allTasks(t, p.server, "on-demand") {
		if tk.Result != nil && slices.ContainsFunc(d.MachineList, func(m api.PoolMachine) bool { return m.Node == tk.Result.NodeID }) {
			finishedOnPool++
		}
	}
	if finishedOnPool != 6 {
		t.Errorf("%d of 6 tasks finished on the pool's nodes", finishedOnPool)
	}

	// Idle for 3s: drained, destroyed, forgotten.
	waitFor(t, 60*time.Second, "the pool back at 0 machines", func() (bool, string) {
		d := p.pool(name)
		live := 0
		for _, n := range d.Machines {
			live += n
		}
		return live == 0, fmt.Sprint(d.Machines)
	})
	if left := p.containers(name); len(left) != 0 {
		t.Errorf("%d containers left after scale-down: %v", len(left), left)
	}
	for _, m := range d.MachineList {
		if _, err := p.client().Node(context.Background(), m.Node); err == nil {
			t.Errorf("node %s of a destroyed machine is still listed", m.Node)
		}
	}
	evs := p.events(name)
	for _, kind := range []string{"applied", "scale-up", "launched", "ready", "scale-down", "gone"} {
		if len(eventsOf(evs, kind)) == 0 {
			t.Errorf("no %s event; events:\n%s", kind, describeEvents(evs))
		}
	}
	if ups := eventsOf(evs, "scale-up"); len(ups) != 2 {
		t.Errorf("%d scale-up events, want 2 (max 2):\n%s", len(ups), describeEvents(evs))
	}
}

// TestPoolReplacesFailedBootstrap: a machine whose agent cannot be
// delivered is destroyed and replaced, with backoff, and pool events say
// why.
func TestPoolReplacesFailedBootstrap(t *testing.T) {
	p := startPoolServer(t, "--agent-binary", "/nonexistent/nodemgr")
	p.template("pool-broken", "")
	name := "broken-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-broken", Provider: "docker", Min: 1, Max: 1})
	var failed []api.PoolEvent
	waitFor(t, 60*time.Second, "three failed bootstraps", func() (bool, string) {
		failed = eventsOf(p.events(name), "failed")
		return len(failed) >= 3, describeEvents(p.events(name))
	})
	for _, e := range failed {
		if !strings.Contains(e.Message, "/nonexistent/nodemgr") || !strings.Contains(e.Message, "backs off until") {
			t.Errorf("failure event %q does not name the binary and the backoff", e.Message)
		}
	}
	// The pause doubles: 0.5s, 1s, 2s between the failures.
	if gap1, gap2 := failed[1].At.Sub(failed[0].At), failed[2].At.Sub(failed[1].At); gap1 < 400*time.Millisecond || gap2 < gap1 {
		t.Errorf("gaps between failures %s and %s: want at least the backoff, growing", gap1, gap2)
	}
	p.client().DeletePool(context.Background(), name)
	waitFor(t, 30*time.Second, "no container of the broken pool", func() (bool, string) {
		left := p.containers(name)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// TestPoolFallsBackToTheNextCandidate: a candidate whose machines cannot
// be made backs off, and the next candidate serves at the next round.
func TestPoolFallsBackToTheNextCandidate(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-noimage", "nodemgr-test/no-such-image:1")
	p.template("pool-good", "")
	name := "fallback-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Min: 1, Max: 1, Candidates: []api.PoolCandidate{
		{Template: "pool-noimage", Provider: "docker", Price: ptr(0.01)},
		{Template: "pool-good", Provider: "docker", Price: ptr(0.05)},
	}})
	d := p.waitMachines(name, api.MachineReady, 1, 90*time.Second)
	if got := d.MachineList[len(d.MachineList)-1]; got.Template != "pool-good" {
		t.Errorf("ready machine is of %s, want pool-good", got.Template)
	}
	evs := p.events(name)
	ups := eventsOf(evs, "scale-up")
	if len(ups) < 2 || !strings.Contains(ups[0].Message, "pool-noimage") || !strings.Contains(ups[1].Message, "pool-good") {
		t.Fatalf("scale-ups: want the cheap candidate first, then the next one at once:\n%s", describeEvents(evs))
	}
	// Within one round: the good candidate was asked for right after the
	// failure, not after the failed one's backoff (500ms).
	failure := eventsOf(evs, "failed")[0]
	if gap := ups[1].At.Sub(failure.At); gap > 450*time.Millisecond {
		t.Errorf("the next candidate was asked for %s after the failure, want within a round", gap)
	}
}

// TestPoolShortDemandGapsTerminateNothing: demand that comes back within
// the idle timeout finds the machine still there.
func TestPoolShortDemandGapsTerminateNothing(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-keep", "")
	name := "keep-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-keep", Provider: "docker", Tags: []string{"keep"}, Max: 3,
		IdleTimeout: api.Duration(8 * time.Second), MinAge: api.Duration(time.Second)})
	for round := range 4 {
		suite := fmt.Sprintf("burst-%d", round)
		createSuite(t, p.server, api.SuiteSpec{Name: suite, Tags: []string{"keep"},
			WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
		submit(t, p.server, suite, []api.TaskSpec{sh("true")})
		p.client().CloseSuite(context.Background(), suite)
		waitSuite(t, p.server, suite, api.SuiteComplete, 90*time.Second)
		time.Sleep(2 * time.Second) // a gap shorter than the idle timeout
	}
	evs := p.events(name)
	if downs := eventsOf(evs, "scale-down"); len(downs) > 0 {
		t.Errorf("a machine was scaled down between bursts 2s apart (idle timeout 8s):\n%s", describeEvents(evs))
	}
	if ups := eventsOf(evs, "scale-up"); len(ups) != 1 {
		t.Errorf("%d machines requested for four one-task bursts, want 1:\n%s", len(ups), describeEvents(evs))
	}
}

// TestPoolBurstsStayWithinLimits: 50 suites arriving at once never make
// the pool exceed max or its CPU limit.
func TestPoolBurstsStayWithinLimits(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-burst", "")
	name := "burst-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-burst", Provider: "docker", Tags: []string{"burst"}, Max: 4, MaxCPUs: 3,
		IdleTimeout: api.Duration(2 * time.Second), MinAge: api.Duration(time.Second)})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			suite := fmt.Sprintf("b%02d", i)
			if _, err := p.client().CreateSuite(context.Background(), api.SuiteSpec{Name: suite, Tags: []string{"burst"},
				WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}}); err != nil {
				t.Errorf("create suite %s: %v", suite, err)
				return
			}
			p.client().SubmitTasks(context.Background(), suite, []api.TaskSpec{sh("true")})
			p.client().CloseSuite(context.Background(), suite)
		}()
	}
	most := 0
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		most = max(most, len(p.containers(name)))
		complete := 0
		for i := range 50 {
			if su, err := p.client().Suite(context.Background(), fmt.Sprintf("b%02d", i)); err == nil && su.State == api.SuiteComplete {
				complete++
			}
		}
		if complete == 50 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	<-done
	if most > 3 {
		t.Errorf("the pool had %d containers at once, over max_cpus 3 (1 CPU each) and max 4", most)
	}
	if most == 0 {
		t.Errorf("the pool never made a machine for 50 suites")
	}
	for i := range 50 {
		su, err := p.client().Suite(context.Background(), fmt.Sprintf("b%02d", i))
		if err != nil || su.State != api.SuiteComplete {
			t.Errorf("suite b%02d: %s %v, want Complete", i, su.State, err)
		}
	}
	if ups := eventsOf(p.events(name), "scale-up"); len(ups) > 3 {
		t.Errorf("%d machines requested, more than the CPU limit allows at once (3); events:\n%s", len(ups), describeEvents(p.events(name)))
	}
}

// TestPoolServerKilledMidScaleUp: a server killed while machines are being
// made converges after its restart: every container belongs to a live
// machine, the work completes, and nothing is left once the pool idles.
func TestPoolServerKilledMidScaleUp(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-crash", "")
	name := "crash-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-crash", Provider: "docker", Tags: []string{"crash"}, Max: 3,
		IdleTimeout: api.Duration(3 * time.Second), MinAge: api.Duration(time.Second), BootstrapTimeout: api.Duration(20 * time.Second)})
	createSuite(t, p.server, api.SuiteSpec{Name: "crashy", Tags: []string{"crash"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, p.server, "crashy", slices.Repeat([]api.TaskSpec{sh("sleep 1")}, 6))
	p.client().CloseSuite(context.Background(), "crashy")
	waitFor(t, 30*time.Second, "machines being made", func() (bool, string) {
		return len(eventsOf(p.events(name), "scale-up")) > 0, ""
	})
	p.signal(syscall.SIGKILL)
	p.proc.wait(10 * time.Second)
	p.restart(t)

	su := waitSuite(t, p.server, "crashy", api.SuiteComplete, 3*time.Minute)
	if su.Counts.Finished != 6 {
		t.Errorf("after a server kill mid scale-up: %+v, want 6 finished", su.Counts)
	}
	waitFor(t, 90*time.Second, "the pool idle at 0 machines with no container left", func() (bool, string) {
		d := p.pool(name)
		live := 0
		for _, n := range d.Machines {
			live += n
		}
		left := p.containers(name)
		return live == 0 && len(left) == 0, fmt.Sprintf("machines %v, containers %d; events:\n%s", d.Machines, len(left), describeEvents(p.events(name)))
	})
	t.Logf("events across the kill:\n%s", describeEvents(p.events(name)))
}

// TestPoolSweepsLeakedMachines: a machine of this server's that no stored
// machine accounts for (what a crash between the provider's answer and the
// store's write leaves) is destroyed by the sweep, and the event says so;
// another owner's machine is left alone.
func TestPoolSweepsLeakedMachines(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-sweep", "")
	name := "sweep-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-sweep", Provider: "docker", Min: 1, Max: 1})
	d := p.waitMachines(name, api.MachineReady, 1, 60*time.Second)
	dep, err := p.client().Deployment(context.Background(), d.MachineList[0].Deployment)
	if err != nil {
		t.Fatal(err)
	}
	owner := dep.Labels[orchestrate.LabelOwner]
	if owner == "" {
		t.Fatalf("pool machine's deployment has no owner label: %v", dep.Labels)
	}
	pr, err := dockerprov.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	stray := func(machine, owner string) provision.Deployment {
		made, err := pr.Provision(context.Background(), provision.Spec{Name: name + "-" + machine, Template: "pool-sweep",
			Extra: map[string]any{"image": p.image},
			Labels: map[string]string{orchestrate.LabelOwner: owner, orchestrate.LabelPool: name,
				orchestrate.LabelMachine: machine, orchestrate.LabelDeploymentID: "d-" + machine}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pr.Destroy(context.Background(), made) })
		return made
	}
	leaked := stray("leaked", owner)
	foreign := stray("foreign", "c-someoneelse")
	waitFor(t, 30*time.Second, "the leaked container swept", func() (bool, string) {
		st, err := pr.State(context.Background(), leaked)
		return err == nil && st == provision.StateTerminated, st
	})
	if swept := eventsOf(p.events(name), "swept"); len(swept) != 1 || !strings.Contains(swept[0].Message, "d-leaked") {
		t.Errorf("swept events %v, want one naming d-leaked", swept)
	}
	if st, err := pr.State(context.Background(), foreign); err != nil || st != provision.StateRunning {
		t.Errorf("another owner's container is %s (%v), want running: not ours to sweep", st, err)
	}
	if d := p.pool(name); d.Machines[api.MachineReady] != 1 {
		t.Errorf("the pool's own machine: %v, want 1 ready: the sweep must not touch it", d.Machines)
	}
}

// TestPoolMachineDestroyedByHand: destroying a pool machine's deployment
// by hand removes its node at once (no node left "online" for minutes),
// and the pool replaces the machine to keep its min.
func TestPoolMachineDestroyedByHand(t *testing.T) {
	p := startPoolServer(t)
	p.template("pool-byhand", "")
	name := "byhand-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-byhand", Provider: "docker", Min: 1, Max: 1})
	d := p.waitMachines(name, api.MachineReady, 1, 60*time.Second)
	first := d.MachineList[0]
	if _, err := p.client().DestroyDeployment(context.Background(), first.Deployment); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client().Node(context.Background(), first.Node); err == nil {
		t.Errorf("node %s of a destroyed deployment is still listed right after the destroy", first.Node)
	}
	waitFor(t, 60*time.Second, "a replacement machine ready", func() (bool, string) {
		d := p.pool(name)
		for _, m := range d.MachineList {
			if m.ID != first.ID && m.State == api.MachineReady {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v; events:\n%s", d.Machines, describeEvents(p.events(name)))
	})
	for _, m := range p.pool(name).MachineList {
		if m.ID == first.ID && m.State != api.MachineGone {
			t.Errorf("the destroyed machine is %s, want gone", m.State)
		}
	}
}

// TestPoolSaysWhyASuiteWaits: while a pool cannot make machines, the
// suite waiting for them says which pool and why, and schedule explain
// says why its candidate is out.
func TestPoolSaysWhyASuiteWaits(t *testing.T) {
	p := startPoolServer(t, "--pool-backoff", "1m")
	p.template("pool-missing", "nodemgr-test/no-such-image:2")
	name := "why-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "pool-missing", Provider: "docker", Tags: []string{"why"}, Max: 2})
	createSuite(t, p.server, api.SuiteSpec{Name: "waits", Tags: []string{"why"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, p.server, "waits", []api.TaskSpec{sh("true")})
	waitFor(t, 30*time.Second, "the suite to name the pool that cannot make its machines", func() (bool, string) {
		su, err := p.client().Suite(context.Background(), "waits")
		return err == nil && strings.Contains(su.WaitingReason, "pool "+name) && strings.Contains(su.WaitingReason, "backing off"), su.WaitingReason
	})
	ex, err := p.client().ExplainSchedule(context.Background(), api.ScheduleRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ex.Candidates) != 1 || ex.Candidates[0].Feasible || !strings.Contains(strings.Join(ex.Candidates[0].Reasons, " "), "backing off") {
		t.Errorf("schedule explain = %+v, want the pool's one candidate infeasible, backing off", ex)
	}
	if ex, err := p.client().ExplainSchedule(context.Background(), api.ScheduleRequest{Policy: "random"}); err == nil {
		t.Errorf("schedule explain with policy random = %+v, want a field error", ex)
	}
}

func ptr[T any](v T) *T { return &v }
