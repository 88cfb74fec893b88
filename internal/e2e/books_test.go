package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/workload"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/node/artifact/artifacttest"
)

// TestBooksMatchWhatRuns runs a random mix of service starts, stops,
// restarts and drains, container deploys, deletes and moves, commitments
// and agent restarts against a real engine, and after every step checks
// that each node's books equal what really runs: every running service
// and container holds exactly one allocation with the ports it really
// binds, every allocation belongs to something that runs, no port is held
// twice, and free never goes negative. NODEMGR_BOOKS_STEPS sets how many
// steps (default 30); the seed is logged so a failure can be replayed
// with NODEMGR_BOOKS_SEED.
func TestBooksMatchWhatRuns(t *testing.T) {
	steps, seed := 30, uint64(time.Now().UnixNano())
	if v, err := strconv.Atoi(os.Getenv("NODEMGR_BOOKS_STEPS")); err == nil && v > 0 {
		steps = v
	}
	if v, err := strconv.ParseUint(os.Getenv("NODEMGR_BOOKS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (NODEMGR_BOOKS_SEED=%d replays this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	labels := dockertest.Labels(t, eng)
	depot := artifacttest.NewDepot(t)
	publishEcho(t, depot, "acme:echo:1.0")
	s := startServer(t)
	agents := map[string]*agent{
		"books-a": startAgent(t, s, "books-a", "--depot", "acme="+depot.URL(), "--container-host-ip", "127.0.0.1"),
		"books-b": startAgent(t, s, "books-b", "--container-host-ip", "127.0.0.1"),
	}
	nodes := []string{"books-a", "books-b"}
	for _, n := range nodes {
		waitStatus(t, s, n, api.StatusOnline, 20*time.Second)
	}
	c, ctx := s.client(), context.Background()
	if _, err := c.InstallArtifact(ctx, "books-a", "acme:echo:1.0"); err != nil {
		t.Fatal(err)
	}

	b := &booksRun{t: t, s: s, eng: eng, labels: labels, nodes: nodes, containerOn: map[string]string{}}
	services := []string{"1.echo.ops.books", "2.echo.ops.books"}
	jobs := []string{"bk-one", "bk-two"}
	var commitments []struct{ node, id string }

	for step := 1; step <= steps; step++ {
		var did string
		switch op := rng.IntN(10); op {
		case 0, 1: // start or restart a service (a stopped one starts)
			coord := services[rng.IntN(len(services))]
			if _, err := c.Service(ctx, "books-a", coord); err == nil {
				did = "restart service " + coord
				_, err = c.ServiceAction(ctx, "books-a", coord, "restart")
				b.must(did, err)
			} else {
				did = "start service " + coord
				_, err := c.StartService(ctx, "books-a", api.ServiceSpec{Coordinate: coord, Artifact: "acme:echo:1.0",
					Command: []string{"bin/echosvc"}, ExpectedMemoryMB: 16, StopGrace: api.Duration(2 * time.Second)})
				b.must(did, err)
			}
		case 2: // stop or drain a service
			coord := services[rng.IntN(len(services))]
			action := []string{"stop", "drain"}[rng.IntN(2)]
			did = action + " service " + coord
			_, err := c.ServiceAction(ctx, "books-a", coord, action)
			b.mustOr(did, err, "not found", "no service", "not running", "stopped")
		case 3, 4: // deploy a container job
			id := jobs[rng.IntN(len(jobs))]
			node := nodes[rng.IntN(len(nodes))]
			did = "deploy " + id + " on " + node
			_, err := c.DeployContainer(ctx, node, api.ContainerJob{ID: id, Name: id, Image: image,
				Command: []string{"sh", "-c", "mkdir -p /www && echo up > /www/index.html && exec httpd -f -p 8080 -h /www"},
				CPUs:    0.1, MemoryMB: 32, Ports: []api.ContainerPort{{Container: 8080}}, Labels: labels})
			b.mustOr(did, err, "exists", "already runs")
		case 5: // delete a container job
			id := jobs[rng.IntN(len(jobs))]
			did = "delete " + id
			_, err := c.DeleteContainer(ctx, id)
			b.mustOr(did, err, "not found", "no such", "no container")
		case 6: // move a container job to the other node
			id := jobs[rng.IntN(len(jobs))]
			ct, err := c.Container(ctx, id)
			if err != nil || api.ContainerFinal(ct.Status) {
				did = "move " + id + " (not running: skipped)"
				break
			}
			to := nodes[0]
			if b.nodeName(ct.Node) == nodes[0] {
				to = nodes[1]
			}
			did = "move " + id + " to " + to
			_, err = c.ContainerCommand(ctx, api.ContainerCommand{Command: api.ContainerMove, Job: api.ContainerJob{ID: id}, Worker: []string{to}})
			b.must(did, err)
		case 7: // commit resources and a port for a while
			node := nodes[rng.IntN(len(nodes))]
			port := freePort(t)
			did = fmt.Sprintf("commit 0.1 CPU and port %d on %s", port, node)
			cm, err := c.Commit(ctx, node, api.CommitRequest{Owner: "books", Resources: api.Resources{CPUs: 0.1, MemoryMB: 8},
				Ports: []int{port}, TTL: api.Duration(time.Duration(1+rng.IntN(4)) * time.Second)})
			b.mustOr(did, err, "short")
			if err == nil {
				commitments = append(commitments, struct{ node, id string }{node, cm.ID})
			}
		case 8: // release a commitment (it may have expired)
			if len(commitments) == 0 {
				did = "release (none: skipped)"
				break
			}
			i := rng.IntN(len(commitments))
			cm := commitments[i]
			commitments = slices.Delete(commitments, i, i+1)
			did = "release " + cm.id + " on " + cm.node
			b.mustOr(did, c.Release(ctx, cm.node, cm.id), "no such commitment")
		case 9: // restart an agent (SIGKILL: the workloads outlive it)
			node := nodes[rng.IntN(len(nodes))]
			did = "restart agent " + node
			a := agents[node]
			a.signal(syscall.SIGKILL)
			a.wait(10 * time.Second)
			a.restart(t)
			waitFor(t, 30*time.Second, node+" back", func() (bool, string) {
				_, err := c.Resources(ctx, node)
				n, _ := nodeByName(t, s, node)
				return err == nil && n.Status == api.StatusOnline, fmt.Sprint(n.Status, err)
			})
		}
		t.Logf("step %d: %s", step, did)
		waitFor(t, 20*time.Second, fmt.Sprintf("step %d (%s): books equal what runs", step, did), b.check)
	}
}

// freePort is a port nothing listens on now, in the agents' default range.
func freePort(t *testing.T) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(p)
	return n
}

// booksRun holds what the books test needs to compare books with reality.
type booksRun struct {
	t           *testing.T
	s           *server
	eng         *dockerclient.Client
	labels      map[string]string
	nodes       []string
	ids         map[string]string // node ID → name
	containerOn map[string]string
}

// must fails the test on an error a step should not meet.
func (b *booksRun) must(did string, err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatalf("%s: %v", did, err)
	}
}

// mustOr is must, except that an error saying one of okay is a fine
// answer to a random step (stopping what is stopped, deploying what
// exists).
func (b *booksRun) mustOr(did string, err error, okay ...string) {
	b.t.Helper()
	if err == nil {
		return
	}
	for _, o := range okay {
		if strings.Contains(err.Error(), o) {
			return
		}
	}
	b.t.Fatalf("%s: %v", did, err)
}

func (b *booksRun) nodeName(id string) string {
	if b.ids == nil {
		b.ids = map[string]string{}
		for _, name := range b.nodes {
			n, _ := nodeByName(b.t, b.s, name)
			b.ids[n.ID] = name
		}
	}
	if name, ok := b.ids[id]; ok {
		return name
	}
	return id
}

// check compares every node's books with what runs, and says what differs.
func (b *booksRun) check() (bool, string) {
	ctx := context.Background()
	c := b.s.client()
	// What really runs: the engine's containers of this test, by job.
	running := map[string]bool{}
	for _, ct := range dockertest.Containers(b.t, b.eng, b.labels) {
		if ct.State == "running" {
			running[ct.Labels[workload.LabelJob]] = true
		}
	}
	booked := map[string]string{} // allocation id → node
	ports := map[int]string{}     // port → holder
	for _, node := range b.nodes {
		res, err := c.Resources(ctx, node)
		if err != nil {
			return false, fmt.Sprintf("resources of %s: %v", node, err)
		}
		if res.AsOf != nil {
			return false, node + " answered from the server's copy: its agent is away"
		}
		if f := res.Free; f.CPUs < -1e-9 || f.MemoryMB < 0 || f.DiskMB < 0 || f.GPUs < 0 {
			return false, fmt.Sprintf("%s: free is negative: %+v", node, f)
		}
		var sum api.Resources
		for _, a := range res.Allocations {
			if other, dup := booked[a.ID]; dup {
				return false, fmt.Sprintf("%s is booked on %s and %s", a.ID, other, node)
			}
			booked[a.ID] = node
			sum.CPUs += a.CPUs
			sum.MemoryMB += a.MemoryMB
			for _, p := range a.Ports {
				if h, dup := ports[p]; dup {
					return false, fmt.Sprintf("port %d is held by %s and %s", p, h, a.ID)
				}
				ports[p] = a.ID
			}
			switch a.Kind {
			case api.AllocationContainer:
				if !running[a.Name] {
					return false, fmt.Sprintf("%s: %s is booked but its container does not run", node, a.ID)
				}
			case api.AllocationService:
				svc, err := c.Service(ctx, node, a.Name)
				if err != nil || svc.State != api.ServiceRunning {
					return false, fmt.Sprintf("%s: %s is booked but the service is %s (%v)", node, a.ID, svc.State, err)
				}
			}
		}
		for _, cm := range res.Commitments {
			for _, p := range cm.Ports {
				if h, dup := ports[p]; dup {
					return false, fmt.Sprintf("port %d is held by %s and commitment %s", p, h, cm.ID)
				}
				ports[p] = cm.ID
			}
		}
		if d := sum.CPUs - res.Allocated.CPUs; d > 1e-6 || d < -1e-6 || sum.MemoryMB != res.Allocated.MemoryMB {
			return false, fmt.Sprintf("%s: allocated %+v is not the sum of its allocations %+v", node, res.Allocated, sum)
		}
		// Every running service is booked, with the port it really binds.
		svcs, err := c.Services(ctx, node)
		if err != nil {
			return false, fmt.Sprintf("services of %s: %v", node, err)
		}
		for _, svc := range svcs {
			if svc.State != api.ServiceRunning {
				continue
			}
			id := "service:" + svc.Spec.Coordinate
			if booked[id] != node {
				return false, fmt.Sprintf("%s: service %s runs but is not booked there", node, svc.Spec.Coordinate)
			}
			if svc.Port > 0 && ports[svc.Port] != id {
				return false, fmt.Sprintf("%s: service %s binds port %d, which the books give to %q", node, svc.Spec.Coordinate, svc.Port, ports[svc.Port])
			}
			if svc.Port > 0 {
				if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(svc.Port)), time.Second); err != nil {
					return false, fmt.Sprintf("%s: service %s does not answer on its booked port %d: %v", node, svc.Spec.Coordinate, svc.Port, err)
				} else {
					conn.Close()
				}
			}
		}
	}
	// Every running container is booked once, on the node that runs it.
	for job := range running {
		if _, ok := booked["container:"+job]; !ok {
			return false, fmt.Sprintf("container job %s runs but no node books it", job)
		}
	}
	return true, ""
}
