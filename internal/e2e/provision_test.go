package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	nmclient "github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// TestProvisionDockerFromTemplate drives seed 000 end to end on a real
// engine: a provider-independent template, a mapping that turns its generic
// image into the locally built one (no registry here: the mapping is the
// point), machines provisioned, controlled, drifted and destroyed.
func TestProvisionDockerFromTemplate(t *testing.T) {
	eng := dockertest.Client(t)
	image := dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng) // removes leftovers when the test ends
	var labelKey, labelValue string
	for k, v := range testLabels {
		labelKey, labelValue = k, v
	}
	s := startServer(t, "--drift-interval", "200ms")
	ctx := context.Background()
	dir := t.TempDir()
	prefix := "e2e-" + labelValue[len(labelValue)-8:]

	tmpl := filepath.Join(dir, "tiny.yaml")
	os.WriteFile(tmpl, []byte(fmt.Sprintf(`name: tiny
cpu: 1
memoryMB: 64
image: busybox:stable
overrides:
  docker:
    env: ["HELLO=world"]
    labels: {%q: %q}
`, labelKey, labelValue)), 0o600)
	mapFile := filepath.Join(dir, "busybox.yaml")
	os.WriteFile(mapFile, []byte(fmt.Sprintf(`mapping:
  - match:
      image: "busybox:*"
      match_type: glob
    overrides:
      docker:
        image: %q
`, image)), 0o600)
	for _, args := range [][]string{{"template", "apply", "-f", tmpl}, {"mapping", "apply", "-f", mapFile}} {
		if out, errOut, code := s.run(t, args...); code != 0 {
			t.Fatalf("%v: %s%s", args, out, errOut)
		}
	}

	out, errOut, code := s.run(t, "provision", "--template", "tiny", "--provider", "docker", "--count", "3", "--name", prefix, "--json")
	if code != 0 {
		t.Fatalf("provision: exit %d: %s%s", code, out, errOut)
	}
	deps, err := s.client().Deployments(ctx, "running")
	if err != nil || len(deps) != 3 {
		t.Fatalf("running deployments = %d (%v), want 3; provision said:\n%s%s", len(deps), err, out, errOut)
	}
	d := deps[0]
	info, err := eng.ContainerInspect(ctx, d.ResourceID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := info.Container
	if c.Config.Image != image || !slices.Contains(c.Config.Env, "HELLO=world") || c.HostConfig.Memory != 64<<20 || c.HostConfig.NanoCPUs != 1e9 {
		t.Errorf("container %s: image %s env %v memory %d cpus %d; want the mapped image, HELLO=world, 64 MiB, 1 CPU",
			d.Name, c.Config.Image, c.Config.Env, c.HostConfig.Memory, c.HostConfig.NanoCPUs)
	}

	// Lifecycle through the provider's own API, EC2 states after each verb.
	for _, step := range []struct{ verb, want string }{
		{"stop", "stopped"}, {"start", "running"}, {"hibernate", "hibernated"}, {"start", "running"}, {"reboot", "running"},
	} {
		out, errOut, code := s.run(t, "lifecycle", step.verb, d.Name)
		if code != 0 || !strings.Contains(out, step.want) {
			t.Errorf("lifecycle %s: exit %d: %s%s; want %s", step.verb, code, out, errOut, step.want)
		}
	}
	// A stopped machine does not reboot (EC2's IncorrectInstanceState):
	// the API answers 409 and the machine stays stopped.
	if _, errOut, code := s.run(t, "lifecycle", "stop", d.Name); code != 0 {
		t.Fatalf("lifecycle stop: exit %d: %s", code, errOut)
	}
	_, errOut, code = s.run(t, "lifecycle", "reboot", d.Name)
	wantErr := "error: reboot " + d.Name + ": it is stopped, and only a running machine reboots; start it with `nodemgr lifecycle start " + d.Name + "`\n"
	if code != 1 || errOut != wantErr {
		t.Errorf("lifecycle reboot of a stopped machine: exit %d, %q; want exit 1, %q", code, errOut, wantErr)
	}
	var ce *nmclient.Error
	if _, err := s.client().Lifecycle(ctx, d.Name, "reboot"); !errors.As(err, &ce) || ce.Status != 409 {
		t.Errorf("POST reboot of a stopped machine = %v; want a 409", err)
	}
	if cur, _ := s.client().Deployment(ctx, d.ID); cur.State != "stopped" {
		t.Errorf("after a refused reboot the machine is %s, want stopped", cur.State)
	}
	if _, errOut, code := s.run(t, "lifecycle", "start", d.Name); code != 0 {
		t.Fatalf("lifecycle start: exit %d: %s", code, errOut)
	}

	// Removed behind nodemgr's back: recorded as drifted, not forgotten.
	gone := deps[1]
	if _, err := eng.ContainerRemove(ctx, gone.ResourceID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "drift to be noticed", func() (bool, string) {
		cur, _ := s.client().Deployment(ctx, gone.ID)
		return cur.State == "terminated" && strings.Contains(cur.StateReason, "drifted"), cur.State + " " + cur.StateReason
	})

	// A server restart keeps tracking the rest.
	s.signal(15)
	s.wait(10 * time.Second)
	s.restart(t)
	if still, _ := s.client().Deployments(ctx, "running"); len(still) != 2 {
		t.Errorf("after a server restart %d running deployments, want 2", len(still))
	}

	// Destroy: machines gone, records kept as terminated.
	for _, dd := range deps {
		if dd.ID == gone.ID {
			continue
		}
		if out, errOut, code := s.run(t, "deployment", "destroy", dd.ID); code != 0 {
			t.Errorf("destroy %s: %s%s", dd.Name, out, errOut)
		}
	}
	if left := dockertest.Containers(t, eng, testLabels); len(left) != 0 {
		t.Errorf("%d containers left after destroy", len(left))
	}
	all, _ := s.client().Deployments(ctx, "")
	for _, dd := range all {
		if dd.State != "terminated" {
			t.Errorf("deployment %s is %s after destroy, want terminated", dd.Name, dd.State)
		}
	}
}

func TestProvisionFailuresLeaveNothing(t *testing.T) {
	eng := dockertest.Client(t)
	dockertest.EnsureImage(t, eng)
	testLabels := dockertest.Labels(t, eng)
	var labelKey, labelValue string
	for k, v := range testLabels {
		labelKey, labelValue = k, v
	}
	s := startServer(t)
	dir := t.TempDir()
	// No mapping: the generic image is not on this engine, and nothing is pulled.
	tmpl := filepath.Join(dir, "orphan.yaml")
	os.WriteFile(tmpl, []byte(fmt.Sprintf("name: orphan\nimage: no-such-image:1\noverrides:\n  docker:\n    labels: {%q: %q}\n", labelKey, labelValue)), 0o600)
	s.run(t, "template", "apply", "-f", tmpl)
	out, errOut, code := s.run(t, "provision", "--template", "orphan", "--provider", "docker", "--name", "orphan-"+labelValue[len(labelValue)-6:])
	if code == 0 || !strings.Contains(out, "failed") || !strings.Contains(out, "no-such-image") {
		t.Errorf("provision with a missing image: exit %d:\n%s%s; want failed, naming the image", code, out, errOut)
	}
	if left := dockertest.Containers(t, eng, testLabels); len(left) != 0 {
		t.Errorf("%d containers left after a failed provision, want none", len(left))
	}

	// A verb the provider cannot do is refused before anything is touched.
	if _, _, code := s.run(t, "template", "apply", "-f", "../coordinator/template/testdata/ubuntu-worker-small.yaml"); code != 0 {
		t.Fatal("apply seed template")
	}
	if out, errOut, code := s.run(t, "provision", "--template", "ubuntu-worker-small", "--provider", "local"); code != 0 || !strings.Contains(errOut, "insecure") {
		t.Fatalf("provision local: exit %d: %s%s; want it to succeed and say it is insecure", code, out, errOut)
	}
	_, errOut, code = s.run(t, "lifecycle", "stop", "ubuntu-worker-small")
	if code == 0 || !strings.Contains(errOut, "local") || !strings.Contains(errOut, "stop") {
		t.Errorf("lifecycle stop on the local provider: exit %d, %q; want a refusal naming provider and verb", code, errOut)
	}
	if _, errOut, code := s.run(t, "provision", "--template", "ubuntu-worker-small", "--provider", "vmware"); code == 0 || !strings.Contains(errOut, "provider") {
		t.Errorf("unknown provider: exit %d, %q", code, errOut)
	}
}
