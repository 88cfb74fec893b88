package docker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/docker/dockertest"
	"github.com/nodemgr/nodemgr/internal/drivers/provision/provisiontest"
)

// setup returns the provider, a raw client to check its work with, the
// test image, and labels that tie containers to this test.
func setup(t *testing.T) (*docker.Docker, *client.Client, string, map[string]string) {
	t.Helper()
	c := dockertest.Client(t)
	img := dockertest.EnsureImage(t, c)
	d, err := docker.New(nil)
	if err != nil {
		t.Fatalf("docker.New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, c, img, dockertest.Labels(t, c)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func inspect(t *testing.T, c *client.Client, id string) container.InspectResponse {
	t.Helper()
	res, err := c.ContainerInspect(ctxFor(t), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return res.Container
}

func TestProvisionApplies(t *testing.T) {
	d, c, img, labels := setup(t)
	ctx := ctxFor(t)
	spec := provision.Spec{
		Name:     dockertest.Name(t),
		Template: "busybox-small",
		Labels:   labels,
		Extra: map[string]any{
			"image": img, "user": "nodemgr", "cpu": 1, "memoryMB": 64,
			"env": []any{"FOO=bar", "EMPTY="}, "hostname": "node-1",
			"labels": map[string]any{"team": "infra"}, "diskMB": 512, "ami": "ignored",
		},
	}
	dep, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { d.Destroy(context.Background(), dep) })

	if dep.Provider != "docker" || dep.Name != spec.Name || dep.Template != spec.Template || dep.State != provision.StateRunning {
		t.Errorf("Provision = %+v, want provider docker, name %s, template %s, running", dep, spec.Name, spec.Template)
	}
	if want := []string{"exec:docker", "copy:docker"}; !slices.Equal(dep.Executors, want) {
		t.Errorf("Executors = %v, want %v", dep.Executors, want)
	}
	if dep.Address == "" {
		t.Errorf("Address is empty, want the container's bridge IP")
	}
	if dep.CreatedAt.IsZero() {
		t.Errorf("CreatedAt is zero")
	}

	got := inspect(t, c, dep.ResourceID)
	checks := []struct {
		what      string
		got, want any
	}{
		{"user", got.Config.User, "nodemgr"},
		{"NanoCPUs", got.HostConfig.NanoCPUs, int64(1e9)},
		{"Memory", got.HostConfig.Memory, int64(64 << 20)},
		{"hostname", got.Config.Hostname, "node-1"},
		{"privileged", got.HostConfig.Privileged, false},
		{"label team", got.Config.Labels["team"], "infra"},
		{"label nodemgr.deployment", got.Config.Labels[docker.LabelDeployment], spec.Name},
		{"label nodemgr.template", got.Config.Labels[docker.LabelTemplate], "busybox-small"},
		{"label " + dockertest.LabelTest, got.Config.Labels[dockertest.LabelTest], labels[dockertest.LabelTest]},
		{"address", got.NetworkSettings.Networks["bridge"].IPAddress.String(), dep.Address},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("container %s = %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	for _, kv := range []string{"FOO=bar", "EMPTY="} {
		if !slices.Contains(got.Config.Env, kv) {
			t.Errorf("container env %v lacks %s", got.Config.Env, kv)
		}
	}

	// The default command keeps it alive: it must not stop within a while.
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	w := c.ContainerWait(wctx, dep.ResourceID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		t.Fatalf("container stopped with %d, want it kept alive", r.StatusCode)
	case err := <-w.Error:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait: %v", err)
		}
	}
	if st, err := d.State(ctx, dep); err != nil || st != provision.StateRunning {
		t.Errorf("State = %q, %v, want running", st, err)
	}
}

func TestLifecycle(t *testing.T) {
	d, _, img, labels := setup(t)
	ctx := ctxFor(t)
	dep, err := d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if want := provision.Verbs; !slices.Equal(d.Verbs(), want) {
		t.Errorf("Verbs() = %v, want %v", d.Verbs(), want)
	}
	// Each step is quick: the keep-alive command exits on SIGTERM, so no
	// grace period is waited out.
	provisiontest.Steps(ctx, t, d, dep, 5*time.Second, [][2]string{
		{provision.VerbStop, provision.StateStopped},
		{provision.VerbStop, provision.StateStopped}, // again: no error
		{provision.VerbStart, provision.StateRunning},
		{provision.VerbStart, provision.StateRunning}, // again: no error
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbStart, provision.StateRunning}, // unpauses
		{provision.VerbReboot, provision.StateRunning},
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbReboot, provision.StateRunning}, // from paused
		{provision.VerbHibernate, provision.StateHibernated},
		{provision.VerbStop, provision.StateStopped}, // from paused
		{provision.VerbTerminate, provision.StateTerminated},
		{provision.VerbTerminate, provision.StateTerminated}, // gone already: no error
	})
}

func TestLifecycleRefused(t *testing.T) {
	d, _, img, labels := setup(t)
	ctx := ctxFor(t)
	dep, err := d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if err := d.Stop(ctx, dep); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := d.Hibernate(ctx, dep); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Hibernate(stopped) = %v, want a conflict", err)
	}
	// EC2 refuses to reboot a stopped instance (IncorrectInstanceState):
	// so do we, and the machine stays stopped.
	want := "reboot " + dep.Name + ": it is stopped, and only a running machine reboots; start it with `nodemgr lifecycle start " + dep.Name + "`"
	if err := provision.Do(ctx, d, provision.VerbReboot, dep); !errors.Is(err, errdefs.ErrConflict) || errdefs.Message(err) != want {
		t.Errorf("Do(reboot) of a stopped machine = %v, want a conflict %q", err, want)
	}
	if st, err := d.State(ctx, dep); err != nil || st != provision.StateStopped {
		t.Errorf("State after a refused reboot = %q, %v, want stopped", st, err)
	}
	if err := provision.Do(ctx, d, "suspend", dep); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf(`Do("suspend") = %v, want invalid`, err)
	}
	if err := d.Start(ctx, provision.Deployment{Name: "x"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Start(no resource ID) = %v, want invalid", err)
	}
	gone := provision.Deployment{Name: "gone", ResourceID: "0123456789ab0123456789ab"}
	if err := d.Start(ctx, gone); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start(gone) = %v, want not found", err)
	}
	if st, err := d.State(ctx, gone); err != nil || st != provision.StateTerminated {
		t.Errorf("State(gone) = %q, %v, want terminated", st, err)
	}
}

func TestProvisionFailuresLeaveNothing(t *testing.T) {
	d, c, img, _ := setup(t)
	tests := []struct {
		name  string
		extra map[string]any
		class error
		msg   []string // the error must say these
	}{
		{
			name:  "missing image",
			extra: map[string]any{"image": "nodemgr-test/no-such-image:1"},
			class: errdefs.ErrNotFound,
			msg:   []string{"nodemgr-test/no-such-image:1", "did not try to pull"},
		},
		{
			name:  "missing image, pull fails",
			extra: map[string]any{"image": "nodemgr-no-such.invalid/image:1", "pull": "missing"},
			class: errdefs.ErrNotFound,
			msg:   []string{"nodemgr-no-such.invalid/image:1", "pulling it failed"},
		},
		{
			name:  "command not found",
			extra: map[string]any{"image": img, "entrypoint": []any{"/no/such/program"}},
			msg:   []string{"start container", "/no/such/program"},
		},
		{
			name:  "unknown user",
			extra: map[string]any{"image": img, "user": "nosuchuser"},
			msg:   []string{"start container", "nosuchuser"},
		},
		{
			name:  "1 MB of memory",
			extra: map[string]any{"image": img, "memoryMB": 1},
			class: errdefs.ErrInvalid,
			msg:   []string{"memory"},
		},
		{
			name:  "unknown network",
			extra: map[string]any{"image": img, "network_mode": "nodemgr-no-such-net"},
			class: errdefs.ErrNotFound,
			msg:   []string{"nodemgr-no-such-net"},
		},
		{
			name:  "bad extra",
			extra: map[string]any{"image": img, "cpu": "lots"},
			class: errdefs.ErrInvalid,
			msg:   []string{"extra.cpu"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			labels := dockertest.Labels(t, c)
			_, err := d.Provision(ctxFor(t), provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: tc.extra})
			if err == nil {
				t.Fatalf("Provision(%v) succeeded, want an error", tc.extra)
			}
			t.Logf("Provision: %v", err)
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("Provision(%v) = %v, want class %v", tc.extra, err, tc.class)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Provision(%v) = %q, want it to say %q", tc.extra, err, m)
				}
			}
			if left := dockertest.Containers(t, c, labels); len(left) != 0 {
				t.Errorf("Provision(%v) left containers behind: %v", tc.extra, left)
			}
		})
	}
}

func TestProvisionNameTaken(t *testing.T) {
	d, _, img, labels := setup(t)
	ctx := ctxFor(t)
	spec := provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}}
	first, err := d.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if _, err := d.Provision(ctx, spec); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Provision(same name) = %v, want a conflict", err)
	}
	if st, err := d.State(ctx, first); err != nil || st != provision.StateRunning {
		t.Errorf("first container after the conflict: State = %q, %v, want running", st, err)
	}
	if _, err := d.Provision(ctx, provision.Spec{Name: "/bad name", Extra: map[string]any{"image": img}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Provision(bad name) = %v, want invalid", err)
	}
}

func TestDestroyTwice(t *testing.T) {
	d, c, img, labels := setup(t)
	ctx := ctxFor(t)
	dep, err := d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	for i := range 2 {
		if err := d.Destroy(ctx, dep); err != nil {
			t.Fatalf("Destroy #%d = %v, want nil", i+1, err)
		}
	}
	if left := dockertest.Containers(t, c, labels); len(left) != 0 {
		t.Errorf("after Destroy: %v", left)
	}
}

func TestProvisionCancelled(t *testing.T) {
	d, c, img, labels := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Labels: labels, Extra: map[string]any{"image": img}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Provision(cancelled) = %v, want context.Canceled", err)
	}
	if left := dockertest.Containers(t, c, labels); len(left) != 0 {
		t.Errorf("Provision(cancelled) left %v", left)
	}
}

func TestFind(t *testing.T) {
	d, _, img, labels := setup(t)
	ctx := ctxFor(t)
	var deps []provision.Deployment
	for _, role := range []string{"a", "b"} {
		l := map[string]string{"role": role}
		for k, v := range labels {
			l[k] = v
		}
		dep, err := d.Provision(ctx, provision.Spec{Name: dockertest.Name(t), Template: "tpl-" + role, Labels: l, Extra: map[string]any{"image": img}})
		if err != nil {
			t.Fatalf("Provision: %v", err)
		}
		deps = append(deps, dep)
	}
	if err := d.Stop(ctx, deps[1]); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	all, err := d.Find(ctx, labels)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if len(all) != 2 {
		t.Fatalf("Find(%v) = %d deployments, want 2: %+v", labels, len(all), all)
	}
	byID := map[string]provision.Deployment{}
	for _, f := range all {
		byID[f.ResourceID] = f
	}
	for i, want := range deps {
		got, ok := byID[want.ResourceID]
		if !ok {
			t.Errorf("Find lacks %s", want.Name)
			continue
		}
		wantState := provision.StateRunning
		if i == 1 {
			wantState = provision.StateStopped
		}
		if got.Name != want.Name || got.Template != want.Template || got.State != wantState || got.Provider != "docker" {
			t.Errorf("Find: %+v, want name %s template %s state %s", got, want.Name, want.Template, wantState)
		}
	}

	one, err := d.Find(ctx, map[string]string{dockertest.LabelTest: labels[dockertest.LabelTest], "role": "a"})
	if err != nil || len(one) != 1 || one[0].ResourceID != deps[0].ResourceID {
		t.Errorf("Find(role=a) = %+v, %v, want just %s", one, err, deps[0].Name)
	}
	if one[0].Address != deps[0].Address {
		t.Errorf("Find(role=a) address %q, want %q", one[0].Address, deps[0].Address)
	}

	for _, dep := range deps {
		if err := d.Destroy(ctx, dep); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	}
	if none, err := d.Find(ctx, labels); err != nil || len(none) != 0 {
		t.Errorf("Find after Destroy = %+v, %v, want none", none, err)
	}
}
