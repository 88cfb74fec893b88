package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	nmclient "github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/node/artifact/artifacttest"
)

// TestEnsembles deploys an ensemble of two tiers on three agents of
// different sizes and tags: the database goes to the node with the tag,
// the web tier spreads over all three and finds the database's address in
// its environment, and every replica answers on its port. An ensemble
// whose second tier cannot start leaves no container, commitment or port
// anywhere; one that fits nowhere says what was short; shutdown frees
// every book.
func TestEnsembles(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng) // removes leftovers when the test ends
	labelJSON, _ := json.Marshal(testLabels)
	s := startServer(t)
	dir := t.TempDir()
	depot := artifacttest.NewDepot(t)
	publishEcho(t, depot, "acme:echo:1.0")
	agentWith := func(name string, share int, tags ...string) {
		cfg := filepath.Join(dir, name+".yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("onboard_share: %d\ncontainer_host_ip: 127.0.0.1\n", share)), 0o644)
		args := []string{"--config", cfg, "--depot", "acme=" + depot.URL()}
		for _, tag := range tags {
			args = append(args, "--tag", tag)
		}
		startAgent(t, s, name, args...)
	}
	agentWith("en-small", 20)
	agentWith("en-mid", 50, "ssd")
	agentWith("en-big", 90)
	names := []string{"en-small", "en-mid", "en-big"}
	for _, n := range names {
		waitStatus(t, s, n, api.StatusOnline, 20*time.Second)
	}
	c := s.client()
	ctx := context.Background()

	shop := filepath.Join(dir, "shop.yaml")
	os.WriteFile(shop, []byte(fmt.Sprintf(`name: shop
allocations:
  - name: db
    resources: {cpus: 0.5, memory_mb: 32}
    placement: {tags: [ssd]}
    container:
      image: %[1]s
      command: [sh, -c, "mkdir -p /www && echo db-up > /www/index.html && exec httpd -f -p 5432 -h /www"]
      ports: [{container: 5432}]
      labels: %[2]s
  - name: web
    count: 3
    resources: {cpus: 0.25, memory_mb: 32}
    placement: {spread: true}
    container:
      image: %[1]s
      command: [sh, -c, "mkdir -p /www && echo \"db at $NODEMGR_ALLOC_DB_ADDR\" > /www/index.html && exec httpd -f -p 8080 -h /www"]
      ports: [{container: 8080}]
      labels: %[2]s
  - name: cache
    resources: {cpus: 0.1, memory_mb: 16}
    placement: {pack: true}
    container: {image: %[1]s, command: [sleep, "3600"], stop_timeout: 1s, labels: %[2]s}
  - name: api
    count: 2
    resources: {cpus: 0.1, memory_mb: 64}
    placement: {spread: true}
    service: {artifact: "acme:echo:1.0", command: [bin/echosvc], stop_grace: 2s}
  - name: cron
    resources: {cpus: 0.05, memory_mb: 16}
    placement: {nodes: [en-big]}
    container: {image: %[1]s, command: [sleep, "3600"], stop_timeout: 1s, labels: %[2]s}
`, image, labelJSON)), 0o644)

	// The plan first: nothing is deployed.
	out, stderr, code := s.run(t, "ensemble", "deploy", "-f", shop, "--dry-run", "--json")
	var plan api.Ensemble
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan.State != "planned" || len(plan.Replicas) != 8 {
		t.Fatalf("dry run: exit %d\n%s%s; want a plan of 8 replicas", code, out, stderr)
	}
	if list, _ := c.Containers(ctx, "", false); len(list) != 0 {
		t.Errorf("a dry run deployed %d containers", len(list))
	}

	out, stderr, code = s.run(t, "ensemble", "deploy", "-f", shop, "--json")
	var en api.Ensemble
	if code != 0 || json.Unmarshal([]byte(out), &en) != nil || en.State != api.EnsembleRunning {
		t.Fatalf("ensemble deploy: exit %d\n%s%s", code, out, stderr)
	}
	nodesOf := map[string]map[string]bool{}
	var dbAddr string
	for _, r := range en.Replicas {
		running, ports := api.ContainerRunning, 1
		switch r.Allocation {
		case "api":
			running = api.ServiceRunning
		case "cache", "cron":
			ports = 0
		}
		if r.Status != running || len(r.Ports) != ports || ports > 0 && r.Ports[0].Host == 0 {
			t.Errorf("replica %s/%d on %s: %+v; want %s with %d host ports", r.Allocation, r.Replica, r.NodeName, r, running, ports)
			continue
		}
		if nodesOf[r.Allocation] == nil {
			nodesOf[r.Allocation] = map[string]bool{}
		}
		nodesOf[r.Allocation][r.NodeName] = true
		if r.Allocation == "db" {
			dbAddr = fmt.Sprintf("127.0.0.1:%d", r.Ports[0].Host)
		}
	}
	if got := nodesOf["db"]; !got["en-mid"] || len(got) != 1 {
		t.Errorf("db went to %v, want en-mid, the only node tagged ssd", got)
	}
	if got := nodesOf["cron"]; !got["en-big"] || len(got) != 1 {
		t.Errorf("cron went to %v, want en-big, the node it names", got)
	}
	if len(nodesOf["web"]) != 3 || len(nodesOf["api"]) != 2 {
		t.Errorf("web replicas went to %v, api to %v; want each replica on a node of its own (spread)", nodesOf["web"], nodesOf["api"])
	}
	for _, r := range en.Replicas {
		if len(r.Ports) == 0 {
			continue
		}
		want := "db-up"
		switch r.Allocation {
		case "web":
			want = "db at " + dbAddr
		case "api": // a service, told where the database answers too
			want = "coordinate=" + r.Service + " "
			if !strings.Contains(r.Service, ".api.ensemble.shop") {
				t.Errorf("api replica %d runs as service %q, want REPLICA.api.ensemble.shop", r.Replica, r.Service)
			}
		}
		if r.Allocation == "api" {
			waitFor(t, 15*time.Second, "api knows the db's address", func() (bool, string) {
				body, err := get(fmt.Sprintf("http://127.0.0.1:%d/", r.Ports[0].Host))
				return err == nil && strings.Contains(body, "db="+dbAddr), fmt.Sprint(body, err)
			})
		}
		waitFor(t, 15*time.Second, r.Allocation+" answers on its port", func() (bool, string) {
			body, err := get(fmt.Sprintf("http://127.0.0.1:%d/", r.Ports[0].Host))
			return err == nil && strings.Contains(body, want), fmt.Sprint(body, err)
		})
	}
	if out, _, _ := s.run(t, "ensemble", "ls"); !strings.Contains(out, "shop") || !strings.Contains(out, "running") {
		t.Errorf("ensemble ls =\n%s\nwant shop running", out)
	}
	if out, _, _ := s.run(t, "ensemble", "manifest", "shop"); !strings.Contains(out, "name: web") {
		t.Errorf("ensemble manifest =\n%s\nwant the spec", out)
	}
	if out, stderr, code := s.run(t, "ensemble", "logs", "shop", "api"); code != 0 || strings.Count(out, "echosvc listening") != 2 {
		t.Errorf("ensemble logs shop api: exit %d\n%s%s\nwant both replicas' service logs", code, out, stderr)
	}
	if out, stderr, code := s.run(t, "ensemble", "show", "shop"); code != 0 || !strings.Contains(out, "1.api.ensemble.shop") ||
		!regexp.MustCompile(`(?m)^api\s+service\s+running\s+2/2\s*$`).MatchString(out) || !regexp.MustCompile(`(?m)^web\s+container\s+running\s+3/3\s*$`).MatchString(out) {
		t.Errorf("ensemble show shop: exit %d\n%s%s\nwant the api service's coordinate and each allocation running all its replicas", code, out, stderr)
	}
	// The books hold every replica: a service's as an allocation of its
	// resources, taken from the ensemble's commitment.
	for _, n := range names {
		res, err := c.Resources(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range res.Allocations {
			if a.Kind == api.AllocationService && (a.Resources.CPUs != 0.1 || a.Resources.MemoryMB != 64) {
				t.Errorf("%s books service %s with %+v, want the allocation's 0.1 CPUs and 64 MB", n, a.Name, a.Resources)
			}
		}
		if len(res.Commitments) != 0 {
			t.Errorf("%s holds commitments %+v after the deploy; want every one used up", n, res.Commitments)
		}
	}

	// A second tier that cannot start (no such image) undoes the first.
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte(fmt.Sprintf(`name: broken
allocations:
  - name: api
    resources: {cpus: 0.1, memory_mb: 16}
    container: {image: %[1]s, command: [sleep, "60"], ports: [{container: 80}], labels: %[2]s}
  - name: worker
    resources: {cpus: 0.05, memory_mb: 16}
    container: {image: "nodemgr-test/no-such-image:none", labels: %[2]s}
`, image, labelJSON)), 0o644)
	before := books(t, s)
	if _, stderr, code := s.run(t, "ensemble", "deploy", "-f", broken); code == 0 || !strings.Contains(stderr, "worker") || !strings.Contains(stderr, "undone") {
		t.Errorf("deploy of broken: exit %d, %q; want refused naming the worker allocation, undone", code, stderr)
	}
	if after := books(t, s); after != before {
		t.Errorf("books after a failed deploy:\n%s\nwant as before:\n%s", after, before)
	}
	for _, ct := range containersNamed(t, s, "broken-") {
		t.Errorf("a failed ensemble left container %s (%s)", ct.Job.ID, ct.Status)
	}

	// One that fits nowhere says what was short, and places nothing.
	huge := filepath.Join(dir, "huge.yaml")
	os.WriteFile(huge, []byte(fmt.Sprintf("name: huge\nallocations:\n  - name: x\n    count: 4\n    resources: {cpus: 0.01, memory_mb: 6}\n    placement: {spread: true}\n    container: {image: %s, labels: %s}\n", image, labelJSON)), 0o644)
	if _, stderr, code := s.run(t, "ensemble", "deploy", "-f", huge); code == 0 || !strings.Contains(stderr, "replica 4") || !strings.Contains(stderr, "spread") {
		t.Errorf("deploy of 4 spread replicas on 3 nodes: exit %d, %q; want no fit for replica 4, naming spread", code, stderr)
	}

	// Shutdown frees every book the ensemble held.
	if out, stderr, code := s.run(t, "ensemble", "shutdown", "shop"); code != 0 || !strings.Contains(out, "shut-down") {
		t.Fatalf("ensemble shutdown: exit %d\n%s%s", code, out, stderr)
	}
	for _, n := range names {
		res, err := c.Resources(ctx, n)
		if err != nil || res.Allocated.CPUs != 0 || res.Committed.CPUs != 0 || len(res.Allocations) != 0 || len(res.Commitments) != 0 {
			t.Errorf("%s after shutdown: %+v, %v; want nothing allocated or committed", n, res, err)
		}
		if svcs, err := c.Services(ctx, n); err != nil || len(svcs) != 0 {
			t.Errorf("%s runs services %+v after shutdown (%v); want none", n, svcs, err)
		}
	}
	if left := dockertest.Containers(t, eng, testLabels); len(left) != 0 {
		t.Errorf("containers left after shutdown: %v", left)
	}
}

// books sums every node's allocated and committed CPUs and their counts.
func books(t *testing.T, s *server) string {
	t.Helper()
	nodes, err := s.client().Nodes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, n := range nodes {
		res, err := s.client().Resources(context.Background(), n.Name)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: allocated %.2f CPUs in %d, committed %.2f in %d\n", n.Name,
			res.Allocated.CPUs, len(res.Allocations), res.Committed.CPUs, len(res.Commitments))
	}
	return b.String()
}

func containersNamed(t *testing.T, s *server, prefix string) []api.Container {
	t.Helper()
	list, err := s.client().Containers(context.Background(), "", false)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Container
	for _, c := range list {
		if strings.HasPrefix(c.Job.ID, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// TestEnsembleRestoresALostNodesReplica: an agent killed under a running
// ensemble takes its replica with it; after the restore deadline the
// replica is placed again on a node left (spread still holds) and runs
// there, and when the lost node comes back its old container is deleted.
func TestEnsembleRestoresALostNodesReplica(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng)
	labelJSON, _ := json.Marshal(testLabels)
	s := startServer(t, "--ensemble-restore-deadline", "2s")
	agents := map[string]*agent{}
	for _, n := range []string{"rs-a", "rs-b", "rs-c"} {
		agents[n] = startAgent(t, s, n, "--container-host-ip", "127.0.0.1")
		waitStatus(t, s, n, api.StatusOnline, 20*time.Second)
	}
	f := filepath.Join(t.TempDir(), "web.yaml")
	os.WriteFile(f, []byte(fmt.Sprintf(`name: web
allocations:
  - name: web
    count: 2
    resources: {cpus: 0.1, memory_mb: 16}
    placement: {spread: true}
    container: {image: %s, command: [sleep, "300"], labels: %s, ports: [{container: 80}]}
`, image, labelJSON)), 0o644)
	out, stderr, code := s.run(t, "ensemble", "deploy", "-f", f, "--json")
	var en api.Ensemble
	if code != 0 || json.Unmarshal([]byte(out), &en) != nil || len(en.Replicas) != 2 {
		t.Fatalf("deploy: exit %d\n%s%s", code, out, stderr)
	}
	victim := en.Replicas[0]
	agents[victim.NodeName].signal(syscall.SIGKILL)
	// Before the deadline: degraded, one of two replicas running.
	waitFor(t, 30*time.Second, "the ensemble degraded by its lost node", func() (bool, string) {
		e, err := s.client().Ensemble(context.Background(), "web")
		ok := err == nil && e.State == api.EnsembleDegraded && len(e.Allocations) == 1 &&
			e.Allocations[0].State == api.EnsembleDegraded && e.Allocations[0].Running == 1 && e.Allocations[0].Replicas == 2
		return ok, fmt.Sprintf("%s %+v: %s (%v)", e.State, e.Allocations, e.Reason, err)
	})

	var now api.Ensemble
	waitFor(t, 60*time.Second, "the lost replica placed again and running", func() (bool, string) {
		var err error
		now, err = s.client().Ensemble(context.Background(), "web")
		if err != nil || len(now.Replicas) != 2 {
			return false, fmt.Sprint(err)
		}
		r := now.Replicas[0]
		return r.NodeName != victim.NodeName && r.Status == api.ContainerRunning && now.State == api.EnsembleRunning,
			fmt.Sprintf("%s: %+v", now.State, now.Replicas)
	})
	if r := now.Replicas; r[0].NodeName == r[1].NodeName {
		t.Errorf("both replicas on %s after the restore; want spread kept", r[0].NodeName)
	}
	if now.Replicas[0].Restores != 1 || len(now.Lost) != 1 || now.Lost[0].Container != victim.Container {
		t.Errorf("after the restore: replicas %+v, lost %+v; want one restore and the old container remembered", now.Replicas, now.Lost)
	}
	// The restore asked for the old host port, which the lost node's
	// container still holds on this one machine: it took another.
	if p := now.Replicas[0].Ports; len(p) != 1 || p[0].Host == 0 || p[0].Host == victim.Ports[0].Host {
		t.Errorf("the restored replica's ports = %+v; want a host port other than the one still held (%+v)", p, victim.Ports)
	}

	// The lost node comes back: its old container goes.
	agents[victim.NodeName].restart(t)
	waitFor(t, 60*time.Second, "the old container deleted", func() (bool, string) {
		e, err := s.client().Ensemble(context.Background(), "web")
		return err == nil && len(e.Lost) == 0, fmt.Sprint(e.Lost, err)
	})
	waitFor(t, 30*time.Second, "two containers left in the engine", func() (bool, string) {
		left := dockertest.Containers(t, eng, testLabels)
		return len(left) == 2, fmt.Sprint(left)
	})
	if _, stderr, code := s.run(t, "ensemble", "shutdown", "web"); code != 0 {
		t.Fatalf("shutdown: %s", stderr)
	}
}

// TestEnsembleWaitsForAPoolsMachines: an ensemble that fits on no node,
// with a pool whose agents carry its tags, waits; the pool starts one
// machine per replica that fits nowhere, and the ensemble is deployed on
// them as soon as it fits, each replica a service from an artifact that
// answers on its port. One that no pool serves is refused at once; one
// the pool has no room for fails at its provision deadline.
func TestEnsembleWaitsForAPoolsMachines(t *testing.T) {
	p := startPoolServer(t)
	depot := artifacttest.NewDepot(t)
	publishEcho(t, depot, "acme:echo:1.0")
	body := fmt.Sprintf("name: ens-machine\nimage: %s\ncpu: 1\nmemoryMB: 96\noverrides:\n  docker:\n    network_mode: host\n    env: {NODEMGR_DEPOTS: \"acme=%s\"}\n", p.image, depot.URL())
	if _, err := p.client().PutDocument(context.Background(), "templates", "ens-machine", []byte(body)); err != nil {
		t.Fatal(err)
	}
	pool := "ens-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: pool, Template: "ens-machine", Provider: "docker", Tags: []string{"ens-pool"}, Max: 2,
		IdleTimeout: api.Duration(time.Minute), BootstrapTimeout: api.Duration(90 * time.Second)})
	c := p.client()
	ctx := context.Background()
	spec := func(name string, count int, tag string) api.EnsembleSpec {
		return api.EnsembleSpec{Name: name, Allocations: []api.AllocationSpec{{
			Name: "api", Count: count, Resources: api.Resources{CPUs: 0.5, MemoryMB: 32},
			Placement: api.Placement{Tags: []string{tag}, Spread: true},
			Service:   &api.ServiceSpec{Artifact: "acme:echo:1.0", Command: []string{"bin/echosvc"}, StopGrace: api.Duration(2 * time.Second)},
		}}}
	}

	// No pool carries the tag: refused now, saying what was short.
	_, err := c.DeployEnsemble(ctx, spec("nowhere", 1, "no-such-tag"), "", false)
	var ce *nmclient.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || !strings.Contains(err.Error(), "no pool starts machines for allocation api (agents tagged no-such-tag") {
		t.Errorf("an ensemble no node or pool serves: %v; want a 409 saying no pool serves the tag", err)
	}

	en, err := c.DeployEnsemble(ctx, spec("shop", 2, "ens-pool"), "", false)
	if err != nil || en.State != api.EnsembleWaiting || !strings.Contains(en.Reason, pool) {
		t.Fatalf("deploy on no node: %+v, %v; want waiting for pool %s", en, err, pool)
	}
	waitFor(t, 3*time.Minute, "the ensemble to run on the pool's machines", func() (bool, string) {
		en, err = c.Ensemble(ctx, "shop")
		return err == nil && en.State == api.EnsembleRunning, fmt.Sprintf("%s: %s (%v); pool events:\n%s", en.State, en.Reason, err, describeEvents(p.events(pool)))
	})
	d := p.pool(pool)
	poolNodes := map[string]bool{}
	for _, m := range d.MachineList {
		poolNodes[m.Node] = true
	}
	onNodes := map[string]bool{}
	for _, r := range en.Replicas {
		onNodes[r.NodeID] = true
		if !poolNodes[r.NodeID] || r.Status != api.ServiceRunning || len(r.Ports) != 1 {
			t.Errorf("replica %d: %+v; want a running service on one of the pool's machines %v", r.Replica, r, poolNodes)
			continue
		}
		waitFor(t, 15*time.Second, "the replica answers on its port", func() (bool, string) {
			b, err := get(fmt.Sprintf("http://127.0.0.1:%d/", r.Ports[0].Host))
			return err == nil && strings.Contains(b, "coordinate="+r.Service), fmt.Sprint(b, err)
		})
	}
	if len(onNodes) != 2 || len(d.MachineList) != 2 {
		t.Errorf("replicas on %d nodes, pool has %d machines; want 2 and 2 (one machine per replica that fit nowhere)", len(onNodes), len(d.MachineList))
	}
	if ups := eventsOf(p.events(pool), "scale-up"); len(ups) != 2 || !strings.Contains(ups[0].Message, "ensemble shop/api") {
		t.Errorf("scale-up events:\n%s\nwant 2, for ensemble shop/api", describeEvents(ups))
	}

	// The pool is at max: one more waits, and fails at its deadline.
	late := spec("late", 1, "ens-pool")
	late.Allocations[0].Resources.CPUs = 0.6 // the pool's machines are full
	late.ProvisionDeadline = api.Duration(2 * time.Second)
	lateFile := filepath.Join(t.TempDir(), "late.json")
	b, _ := json.Marshal(late)
	os.WriteFile(lateFile, b, 0o644)
	_, stderr, code := p.run(t, "ensemble", "deploy", "-f", lateFile, "--wait")
	if code == 0 || !strings.Contains(stderr, "ensemble late waiting: ") || !strings.Contains(stderr, "failed: no machine came within its provision deadline (2s)") {
		t.Errorf("ensemble deploy --wait of one the pool has no room for: exit %d\n%s\nwant it to follow the wait, then fail at the deadline", code, stderr)
	}

	if _, err := c.ShutdownEnsemble(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	for n := range onNodes {
		if svcs, err := c.Services(ctx, n); err != nil || len(svcs) != 0 {
			t.Errorf("node %s runs %+v after shutdown (%v); want nothing", n, svcs, err)
		}
	}
}
