package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/aws/ec2test"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/libvirt/libvirttest"
)

// Machines of the libvirt and aws providers, driven through the server
// and the CLI as a user would: template and mapping, provision, exec and
// cp over ssh, lifecycle.

// waitDeployment waits until a deployment is in state.
func waitDeployment(t *testing.T, s *server, id, state string, timeout time.Duration) api.Deployment {
	t.Helper()
	var d api.Deployment
	waitFor(t, timeout, "deployment "+id+" "+state, func() (bool, string) {
		var err error
		d, err = s.client().Deployment(context.Background(), id)
		return err == nil && d.State == state, fmt.Sprintf("%s %s %v", d.State, d.StateReason, err)
	})
	return d
}

// runOK runs a CLI command that must succeed and returns its output.
func runOK(t *testing.T, s *server, args ...string) string {
	t.Helper()
	out, errOut, code := s.run(t, args...)
	if code != 0 {
		t.Fatalf("nodemgr %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// TestTCGMachineThroughTheServer provisions a real virtual machine (QEMU,
// TCG) from a template and a mapping, runs a command and copies files
// through ssh, sftp and rsync, and drives its lifecycle — all with the CLI.
func TestTCGMachineThroughTheServer(t *testing.T) {
	h := libvirttest.QEMU(t)
	g := libvirttest.NewGuest(t, h.Dir)
	dir := t.TempDir()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	key, known := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, g.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + port)}, g.HostKey)
	if err := os.WriteFile(known, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--libvirt-uri", h.URI, "--libvirt-pool", h.Pool, "--libvirt-domain-type", "qemu",
		"--ssh-identity-file", key, "--ssh-known-hosts", known)

	// The template names an image; the mapping says what that is on libvirt.
	tmpl := filepath.Join(dir, "tiny.yaml")
	os.WriteFile(tmpl, []byte(fmt.Sprintf("name: tiny\nimage: \"debian-tiny\"\nuser: %s\ncpu: 1\nmemoryMB: 256\n"+
		"overrides:\n  libvirt:\n    ssh_port: %s\n    console_log: %q\n", g.User, port, filepath.Join(h.Dir, "tiny.console"))), 0o644)
	mapping := filepath.Join(dir, "tiny.mapping.yaml")
	os.WriteFile(mapping, []byte(fmt.Sprintf("mapping:\n  - match:\n      image: \"debian-tiny\"\n    overrides:\n      libvirt:\n"+
		"        image_type: kernel\n        kernel: %q\n        initrd: %q\n        cmdline: %q\n", g.Kernel, g.Initrd, g.Cmdline)), 0o644)
	runOK(t, s, "template", "apply", "-f", tmpl)
	runOK(t, s, "mapping", "apply", "-f", mapping, "--name", "tiny")

	ds, err := s.client().Provision(context.Background(), api.ProvisionRequest{Template: "tiny", Provider: "libvirt", Name: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	id := ds[0].ID
	t.Cleanup(func() { s.client().DestroyDeployment(context.Background(), id) })
	d := waitDeployment(t, s, id, "running", 3*time.Minute)
	for _, c := range []string{"exec:ssh", "copy:sftp", "copy:rsync"} {
		if !strings.Contains(strings.Join(d.Executors, ","), c) {
			t.Errorf("libvirt machine offers %v, want %s", d.Executors, c)
		}
	}

	if out := runOK(t, s, "exec", id, "--", "uname", "-r"); !strings.Contains(out, "6.1.0") {
		t.Errorf("exec uname -r on the VM = %q, want the Debian 6.1 kernel", out)
	}
	src := filepath.Join(dir, "payload")
	os.WriteFile(src, []byte("through the server\n"), 0o640)
	for _, via := range []string{"sftp", "rsync", "ssh"} {
		remote := "/root/payload-" + via
		runOK(t, s, "cp", "--via", via, src, id+":"+remote)
		if out := runOK(t, s, "exec", id, "--", "cat", remote); out != "through the server\n" {
			t.Errorf("cp --via %s: the VM's copy holds %q", via, out)
		}
		back := filepath.Join(dir, "back-"+via)
		runOK(t, s, "cp", "--via", via, id+":"+remote, back)
		if b, _ := os.ReadFile(back); string(b) != "through the server\n" {
			t.Errorf("cp --via %s back: %q", via, b)
		}
	}

	runOK(t, s, "lifecycle", "stop", id)
	waitDeployment(t, s, id, "stopped", time.Minute)
	runOK(t, s, "lifecycle", "start", id)
	waitDeployment(t, s, id, "running", time.Minute)
	waitFor(t, 2*time.Minute, "ssh after a start", func() (bool, string) {
		out, errOut, code := s.run(t, "exec", id, "--", "true")
		return code == 0, out + errOut
	})
	runOK(t, s, "lifecycle", "hibernate", id)
	waitDeployment(t, s, id, "hibernated", time.Minute)
	runOK(t, s, "lifecycle", "start", id)
	waitDeployment(t, s, id, "running", time.Minute)
	runOK(t, s, "lifecycle", "terminate", id)
	waitDeployment(t, s, id, "terminated", time.Minute)
	if doms := libvirttest.Domains(t, h.Conn, map[string]string{"nodemgr.deployment-id": id}); len(doms) != 0 {
		t.Errorf("domains left after terminate: %v", doms)
	}
}

// TestEC2MachinesThroughTheServer provisions on-demand and spot instances
// against moto through the server and drives their lifecycle; EC2's rule
// that a one-time spot instance cannot be stopped is refused up front.
func TestEC2MachinesThroughTheServer(t *testing.T) {
	m := ec2test.StartMoto(t)
	st := m.Settings()
	s := startServer(t, "--aws-region", st["region"], "--aws-endpoint", st["endpoint"])
	dir := t.TempDir()
	for name, market := range map[string]string{"ondemand": "", "spot": "    spot: true\n    max_price: \"0.05\"\n"} {
		f := filepath.Join(dir, name+".yaml")
		os.WriteFile(f, []byte("name: "+name+"\nimage: al2023\ncpu: 2\nmemoryMB: 4096\noverrides:\n  aws:\n"+
			"    ami_lookup: {name: \"al2023-ami-2023.*-x86_64\", owner: amazon}\n"+market), 0o644)
		runOK(t, s, "template", "apply", "-f", f)
	}
	provision := func(template string) string {
		ds, err := s.client().Provision(context.Background(), api.ProvisionRequest{Template: template, Provider: "aws"})
		if err != nil {
			t.Fatal(err)
		}
		waitDeployment(t, s, ds[0].ID, "running", time.Minute)
		return ds[0].ID
	}
	od := provision("ondemand")
	d, _ := s.client().Deployment(context.Background(), od)
	if !strings.HasPrefix(d.ResourceID, "i-") || d.Extra["instance_type"] == nil {
		t.Errorf("on-demand deployment %+v: want an instance ID and the chosen instance type", d)
	}
	for _, step := range []struct{ verb, state string }{{"stop", "stopped"}, {"start", "running"}, {"reboot", "running"}, {"terminate", "terminated"}} {
		runOK(t, s, "lifecycle", step.verb, od)
		waitDeployment(t, s, od, step.state, time.Minute)
	}

	spot := provision("spot")
	_, errOut, code := s.run(t, "lifecycle", "stop", spot)
	if code == 0 || !strings.Contains(errOut, "spot") {
		t.Errorf("lifecycle stop of a one-time spot instance: exit %d, %q; want refused naming the rule", code, errOut)
	}
	if d, _ := s.client().Deployment(context.Background(), spot); d.State != "running" {
		t.Errorf("the spot instance is %s after a refused stop, want running (nothing touched)", d.State)
	}
	runOK(t, s, "lifecycle", "terminate", spot)
	waitDeployment(t, s, spot, "terminated", time.Minute)
}
