package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestPoolOnEC2PullBootstrap: a pool on the aws provider, against the
// EC2 fake whose instances run as containers and run their user data as
// cloud-init would. Nothing reaches the machine over SSH: its user data
// fetches the agent from the server (bound to its machine id), checks its
// digest and starts it; the agent registers, the suite runs on it, and
// after the idle timeout the instance is terminated and its container
// gone. Its tasks run as the template's user. The machine's SSH host key is the one the orchestrator made and
// pinned on its deployment.
func TestPoolOnEC2PullBootstrap(t *testing.T) {
	fake := ec2test.New(t)
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	// The instances reach the server by a name, as real ones would: it
	// is 127.0.0.1 in their /etc/hosts.
	const serverHost = "nodemgr-server.ec2test"
	machines := fake.RunMachines(eng, image, dockertest.Labels(t, eng), map[string]string{serverHost: "127.0.0.1"})
	s := startServerWith(t, func(listen string) []string {
		_, port, _ := net.SplitHostPort(listen)
		return []string{"--agent-binary", staticNodemgr(t), "--aws-region", ec2test.Region, "--aws-endpoint", fake.URL,
			"--agent-server-url", "http://" + serverHost + ":" + port, "--agent-insecure-http",
			"--pool-tick", "200ms", "--pool-backoff", "500ms", "--pool-sweep", "500ms", "--pool-drain-timeout", "10s"}
	})
	p := &poolEnv{server: s, t: t, eng: eng, image: image}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, inst := range fake.Instances() {
			if ctr := machines.Container(inst.ID); ctr != "" {
				out, _ := exec.Command("docker", "exec", ctr, "sh", "-c", "cat /var/log/cloud-init-output.log; tail -n 20 /opt/nodemgr/agent.log").CombinedOutput()
				t.Logf("instance %s (%s): cloud-init output and agent log:\n%s", inst.ID, inst.State, out)
			}
		}
		t.Logf("running the instances: %v", machines.Err())
	})
	body := "name: ec2-small\nimage: al2023\nuser: nodemgr\ncpu: 1\nmemoryMB: 512\noverrides:\n  aws:\n    ami: " + ec2test.ImageAL2023 + "\n    instance_type: t3.nano\n"
	if _, err := s.client().PutDocument(context.Background(), "templates", "ec2-small", []byte(body)); err != nil {
		t.Fatal(err)
	}
	name := "ec2-" + strings.ToLower(dockertest.Name(t)[:6])
	p.apply(api.PoolSpec{Name: name, Template: "ec2-small", Provider: "aws", Tags: []string{"ec2"}, Max: 1,
		IdleTimeout: api.Duration(3 * time.Second), MinAge: api.Duration(time.Second), BootstrapTimeout: api.Duration(40 * time.Second)})

	createSuite(t, s, api.SuiteSpec{Name: "on-ec2", Tags: []string{"ec2"},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, s, "on-ec2", slices.Repeat([]api.TaskSpec{sh("echo ran on $(hostname) as $(id -un)")}, 4))
	s.client().CloseSuite(context.Background(), "on-ec2")
	d := p.waitMachines(name, api.MachineReady, 1, 35*time.Second)
	su := waitSuite(t, s, "on-ec2", api.SuiteComplete, 2*time.Minute)
	if su.Counts.Finished != 4 {
		t.Errorf("suite on the EC2 pool: %+v, want 4 finished", su.Counts)
	}
	if err := machines.Err(); err != nil {
		t.Errorf("running the instances: %v", err)
	}
	m := d.MachineList[0]
	dep, err := s.client().Deployment(context.Background(), m.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range allTasks(t, s, "on-ec2") {
		if tk.Result == nil || tk.Result.NodeID != m.Node {
			t.Errorf("task %s: result %+v, want one from the pool's node %s", tk.ID, tk.Result, m.Node)
		} else if !strings.Contains(tk.Result.Stdout, dep.ResourceID+" as nodemgr") {
			t.Errorf("task %s printed %q; want it to run in instance %s as the template's user nodemgr", tk.ID, tk.Result.Stdout, dep.ResourceID)
		}
	}
	pinned, _ := dep.Extra[provision.ExtraSSHHostKey].(string)
	if !strings.HasPrefix(pinned, "ssh-ed25519 ") {
		t.Errorf("deployment %s pins host key %q; want the ed25519 key made for it", dep.ID, pinned)
	}
	if ctr := machines.Container(dep.ResourceID); ctr != "" {
		out, err := exec.Command("docker", "exec", ctr, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").Output()
		if err != nil || strings.TrimSpace(string(out)) != pinned {
			t.Errorf("the machine's host key is %q (%v); want the pinned %q", out, err, pinned)
		}
	}
	evs := p.events(name)
	if len(eventsOf(evs, "fetched")) != 1 {
		t.Errorf("want one fetched event (the machine fetched its agent); events:\n%s", describeEvents(evs))
	}
	for _, e := range eventsOf(evs, "bootstrapped") {
		t.Errorf("a pull-bootstrapped machine was bootstrapped over an executor: %s", e.Message)
	}

	waitFor(t, 60*time.Second, "the pool back at 0 machines", func() (bool, string) {
		d := p.pool(name)
		live := 0
		for _, n := range d.Machines {
			live += n
		}
		return live == 0, fmt.Sprint(d.Machines, "\n", describeEvents(p.events(name)))
	})
	waitFor(t, 30*time.Second, "the instance terminated and its container removed", func() (bool, string) {
		for _, inst := range fake.Instances() {
			if inst.ID == dep.ResourceID {
				return inst.State == "terminated" && machines.Container(inst.ID) == "", inst.State
			}
		}
		return false, "instance not found"
	})
}
