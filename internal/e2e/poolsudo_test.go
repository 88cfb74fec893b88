package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
)

// Pools of machines whose template names a user other than root, as
// cloud images do (user: ubuntu): the agent still needs root, which
// bootstrap reaches through the image's sudo, and tasks run as the
// template's user.

// passwordSudo is a sudo whose rule for the user wants a password: what
// real sudo -n answers then.
const passwordSudo = "#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n"

// TestPoolTemplateUserNotRoot: with passwordless sudo the machine's agent
// runs as root and a suite's tasks run as the template's user; without
// sudo, or with a sudo that wants a password, bootstrap fails with what
// to do.
func TestPoolTemplateUserNotRoot(t *testing.T) {
	p := startPoolServer(t)
	unique := dockertest.Name(t)
	suffix := unique[len(unique)-8:] // its random part
	sudoer := p.imageWithSudo("sudo", fakeSudo(t))
	asking := p.imageWithSudo("sudo-password", []byte(passwordSudo))

	p.userTemplate("as-user", sudoer, "nodemgr")
	name := "sudoer-" + suffix
	p.apply(api.PoolSpec{Name: name, Template: "as-user", Provider: "docker", Tags: []string{"as-user-" + suffix}, Min: 1, Max: 1,
		BootstrapTimeout: api.Duration(60 * time.Second)})
	createSuite(t, p.server, api.SuiteSpec{Name: "who-" + suffix, Tags: []string{"as-user-" + suffix},
		WorkerSchedule: api.WorkerSchedule{WorkerCount: 1, TaskPrefetchCount: prefetch(0)}})
	submit(t, p.server, "who-"+suffix, []api.TaskSpec{sh("id -un; stat -c '%U %a' /opt/nodemgr")})
	p.client().CloseSuite(context.Background(), "who-"+suffix)
	p.waitMachines(name, api.MachineReady, 1, 90*time.Second)
	waitSuite(t, p.server, "who-"+suffix, api.SuiteComplete, time.Minute)
	tasks := allTasks(t, p.server, "who-"+suffix)
	want := "nodemgr\nroot 700\n"
	if len(tasks) != 1 || tasks[0].Result == nil || tasks[0].Result.Stdout != want {
		t.Errorf("task on a machine of user nodemgr: %+v; want stdout %q (it runs as the template's user, the agent's files are root's)", tasks, want)
	}

	for _, tc := range []struct{ pool, image, why string }{
		{"nosudo-" + suffix, p.image, "has no sudo"},
		{"asks-" + suffix, asking, "a password is required"},
	} {
		p.userTemplate(tc.pool, tc.image, "nodemgr")
		p.apply(api.PoolSpec{Name: tc.pool, Template: tc.pool, Provider: "docker", Min: 1, Max: 1})
		var failed []api.PoolEvent
		waitFor(t, 60*time.Second, "a failed bootstrap in pool "+tc.pool, func() (bool, string) {
			failed = eventsOf(p.events(tc.pool), "failed")
			return len(failed) > 0, describeEvents(p.events(tc.pool))
		})
		msg := failed[0].Message
		for _, part := range []string{"user nodemgr is not root", tc.why, "passwordless sudo", "set user: root"} {
			if !strings.Contains(msg, part) {
				t.Errorf("pool %s: failure %q does not say %q", tc.pool, msg, part)
			}
		}
		p.client().DeletePool(context.Background(), tc.pool)
	}
}

// userTemplate stores a template of machines from image whose commands
// run as user, on the host's network.
func (p *poolEnv) userTemplate(name, image, user string) {
	p.t.Helper()
	body := fmt.Sprintf("name: %s\nimage: %s\nuser: %s\ncpu: 1\nmemoryMB: 96\noverrides:\n  docker:\n    network_mode: host\n", name, image, user)
	if _, err := p.client().PutDocument(context.Background(), "templates", name, []byte(body)); err != nil {
		p.t.Fatalf("put template %s: %v", name, err)
	}
}

// fakeSudo builds testdata/sudo, a static stand-in for a passwordless
// sudo (no registry or package manager gives the test image a real one).
func fakeSudo(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sudo")
	build := exec.Command("go", "build", "-o", out, "./testdata/sudo")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in sudo: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// imageWithSudo commits the test image with sudo at /usr/bin/sudo,
// setuid root, as an image of this test's own, removed when it ends.
func (p *poolEnv) imageWithSudo(kind string, sudo []byte) string {
	p.t.Helper()
	ctx := context.Background()
	ref := "nodemgr-test/busybox-" + kind + ":" + strings.ToLower(dockertest.Name(p.t))
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "sudo", Mode: 0o4755, Size: int64(len(sudo)), ModTime: time.Unix(0, 0)})
	tw.Write(sudo)
	tw.Close()
	c, err := p.eng.ContainerCreate(ctx, client.ContainerCreateOptions{Image: p.image, Name: dockertest.Name(p.t)})
	if err != nil {
		p.t.Fatalf("create a container to make %s: %v", ref, err)
	}
	defer p.eng.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := p.eng.CopyToContainer(ctx, c.ID, client.CopyToContainerOptions{DestinationPath: "/usr/bin", Content: &layer}); err != nil {
		p.t.Fatalf("copy sudo into %s: %v", ref, err)
	}
	if _, err := p.eng.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Reference: ref}); err != nil {
		p.t.Fatalf("commit %s: %v", ref, err)
	}
	// Registered before the pools' containers are, so it runs after
	// their removal.
	p.t.Cleanup(func() { p.eng.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}) })
	return ref
}
