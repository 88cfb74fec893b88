package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestPoolFailsOverWhileEC2IsDown: a pool of max 1 whose cheapest
// candidate is on an EC2 endpoint that is down. The launch tries the
// provider again (its retry event and the pool's WAITING name the
// provider's error), then fails the machine with that error, which stops
// counting against max, and the next candidate, local docker machines,
// serves the suite. No machine is left in provisioning and none is said
// to have been cut off by a stopping server.
//
// It logs (never asserts) how long the suite waited after the failure,
// in pool ticks: issue 28 item 3 wants the next candidate's first task
// result within 2 ticks of the failure. A docker machine's own boot
// (container, agent copy, registration) is most of it and is logged
// apart.
func TestPoolFailsOverWhileEC2IsDown(t *testing.T) {
	ec2test.Env(t)
	down := "http://" + freeAddr(t) // nothing listens there: connection refused
	const tick = 200 * time.Millisecond
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	s := startServerWith(t, func(listen string) []string {
		// EC2 machines could not reach a server on loopback (the pool's
		// apply says so), so machines are given an address beyond it.
		return []string{"--agent-binary", staticNodemgr(t), "--agent-server-url", "http://" + exposed(t, listen), "--agent-insecure-http",
			"--aws-region", ec2test.Region, "--aws-endpoint", down,
			"--pool-tick", tick.String(), "--pool-backoff", "500ms", "--pool-sweep", "500ms", "--pool-drain-timeout", "10s",
			// The pause between the tries spans several rounds, each of
			// which shows the provider's error in the pool's WAITING.
			"--pool-launch-tries", "2", "--pool-launch-retry", "1s"}
	})
	p := &poolEnv{server: s, t: t, eng: eng, image: image}
	body := "name: ec2-down\nimage: al2023\ncpu: 1\nmemoryMB: 96\noverrides:\n  aws:\n    ami: " + ec2test.ImageAL2023 + "\n    instance_type: t3.nano\n"
	if _, err := p.client().PutDocument(context.Background(), "templates", "ec2-down", []byte(body)); err != nil {
		t.Fatal(err)
	}
	p.template("pool-local", "")
	name := "outage-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Tags: []string{"outage"}, Max: 1,
		IdleTimeout: api.Duration(5 * time.Second), MinAge: api.Duration(time.Second), BootstrapTimeout: api.Duration(60 * time.Second),
		Candidates: []api.PoolCandidate{
			{Template: "ec2-down", Provider: "aws", Price: ptr(0.01)},
			{Template: "pool-local", Provider: "docker", Price: ptr(0.05)},
		}})

	createSuite(t, p.server, api.SuiteSpec{Name: "through-outage", Tags: []string{"outage"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, p.server, "through-outage", slices.Repeat([]api.TaskSpec{sh("echo ran on $(hostname)")}, 3))
	p.client().CloseSuite(context.Background(), "through-outage")
	waitFor(t, 60*time.Second, "the pool's WAITING to name the provider's error", func() (bool, string) {
		d := p.pool(name)
		return strings.Contains(d.Waiting, "connection refused"), d.Waiting
	})
	su := waitSuite(t, p.server, "through-outage", api.SuiteComplete, 3*time.Minute)
	if su.Counts.Finished != 3 {
		t.Errorf("suite through the outage: %+v, want 3 finished", su.Counts)
	}

	d := p.pool(name)
	evs := p.events(name)
	var ec2, local api.PoolMachine
	for _, m := range d.MachineList {
		switch m.Template {
		case "ec2-down":
			if ec2.ID != "" {
				t.Errorf("two machines of the aws candidate (%s, %s): want it backing off after the first failed; events:\n%s", ec2.ID, m.ID, describeEvents(evs))
			}
			ec2 = m
		case "pool-local":
			local = m
		}
	}
	if ec2.ID == "" || local.ID == "" {
		t.Fatalf("machines %+v: want one of each candidate; events:\n%s", d.MachineList, describeEvents(evs))
	}
	if ec2.State != api.MachineFailed || !strings.Contains(ec2.StateReason, "connection refused") {
		t.Errorf("the aws machine is %s (%q), want failed with the provider's error", ec2.State, ec2.StateReason)
	}
	if d.Machines[api.MachineProvisioning] != 0 || d.Machines[api.MachineRequested] != 0 {
		t.Errorf("machines %v: want none left on its way", d.Machines)
	}
	for _, tk := range allTasks(t, p.server, "through-outage") {
		if tk.Result == nil || tk.Result.NodeID != local.Node {
			t.Errorf("task %s: result %+v, want one from the docker machine's node %s", tk.ID, tk.Result, local.Node)
		}
	}

	of := func(kind, machine string) []api.PoolEvent {
		var out []api.PoolEvent
		for _, e := range eventsOf(evs, kind) {
			if e.Machine == machine {
				out = append(out, e)
			}
		}
		return out
	}
	retries, failed := of("retry", ec2.ID), of("failed", ec2.ID)
	if len(retries) != 1 || !strings.Contains(retries[0].Message, "connection refused") || !strings.Contains(retries[0].Message, "try 1 of 2") {
		t.Errorf("retry events of the aws machine: want one (try 1 of 2) naming the provider's error; events:\n%s", describeEvents(evs))
	}
	if len(failed) != 1 || !strings.Contains(failed[0].Message, "connection refused") {
		t.Fatalf("failed events of the aws machine: want one naming the provider's error; events:\n%s", describeEvents(evs))
	}
	if !slices.ContainsFunc(eventsOf(evs, "waiting"), func(e api.PoolEvent) bool { return strings.Contains(e.Message, "connection refused") }) {
		t.Errorf("no waiting event names the provider's error; events:\n%s", describeEvents(evs))
	}
	for _, e := range evs {
		if strings.Contains(e.Message, "the server stopped while launching it") {
			t.Errorf("event %s %q: the server did not stop", e.Kind, e.Message)
		}
	}
	ups, ready := of("scale-up", local.ID), of("ready", local.ID)
	if len(ups) != 1 || len(ready) != 1 {
		t.Fatalf("the docker machine: %d scale-up and %d ready events, want 1 each; events:\n%s", len(ups), len(ready), describeEvents(evs))
	}
	if ups[0].At.Before(failed[0].At) {
		t.Errorf("the docker machine was asked for at %s, before the aws one failed (%s): with max 1 it stops counting only then",
			ups[0].At.Format(time.StampMilli), failed[0].At.Format(time.StampMilli))
	}

	// The measure. The failure is final when the last try returns: the
	// deployment is marked failed then (its later cleanup, which the
	// down endpoint refuses too, does not touch it).
	dep, err := p.client().Deployment(context.Background(), ec2.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	var result time.Time
	for _, tk := range allTasks(t, p.server, "through-outage") {
		if tk.Result != nil && (result.IsZero() || tk.Result.FinishedAt.Before(result)) {
			result = tk.Result.FinishedAt
		}
	}
	ticks := func(from, to time.Time) string {
		return fmt.Sprintf("%s (%.1f ticks)", to.Sub(from).Round(time.Millisecond), float64(to.Sub(from))/float64(tick))
	}
	t.Logf("pool tick %s; the aws machine's first failure (retry event) %s, final (deployment failed) %s, machine failed %s",
		tick, retries[0].At.Format(time.StampMilli), dep.UpdatedAt.Format(time.StampMilli), failed[0].At.Format(time.StampMilli))
	t.Logf("final failure -> machine failed: %s", ticks(dep.UpdatedAt, failed[0].At))
	t.Logf("machine failed -> docker machine asked for: %s", ticks(failed[0].At, ups[0].At))
	t.Logf("docker machine asked for -> ready: %s", ticks(ups[0].At, ready[0].At))
	t.Logf("docker machine ready -> first task result: %s", ticks(ready[0].At, result))
	t.Logf("MEASURE final failure -> first task result: %s; machine failed -> first task result: %s; first failure -> first task result: %s",
		ticks(dep.UpdatedAt, result), ticks(failed[0].At, result), ticks(retries[0].At, result))
	t.Logf("events:\n%s", describeEvents(evs))
}

// exposed forwards a port on one of the host's addresses beyond loopback
// to addr, and returns that address: a server listening on loopback, as
// machines on the host's network reach it by an address that is not.
func exposed(t *testing.T, addr string) string {
	t.Helper()
	var ip net.IP
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && ip == nil && n.IP.To4() != nil && !n.IP.IsLoopback() && ifc.Flags&net.FlagUp != 0 {
				ip = n.IP
			}
		}
	}
	if ip == nil {
		t.Skip("no address beyond loopback to give pool machines")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	proxy(t, ln, addr)
	return ln.Addr().String()
}

// proxy carries each connection ln accepts to addr, until the test ends.
func proxy(t *testing.T, ln net.Listener, addr string) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done // either side ended: end both
			}()
		}
	}()
}
