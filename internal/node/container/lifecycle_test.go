package container_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/container"
)

// The agent restarts a job's container by its policy: the job stays
// RUNNING (its ports and books held) until the policy gives up, and then
// ends with the status of its last exit and its restarts counted.
func TestRestartPolicy(t *testing.T) {
	tests := []struct {
		name     string
		restart  api.ContainerRestart
		code     int
		status   string
		restarts int
	}{
		{"never", api.ContainerRestart{}, 3, api.ContainerFailed, 0},
		{"on-failure, 2 retries", api.ContainerRestart{Policy: api.ContainerRestartOnFailure, MaxRetries: 2}, 3, api.ContainerFailed, 2},
		{"on-failure after success", api.ContainerRestart{Policy: api.ContainerRestartOnFailure}, 0, api.ContainerCompleted, 0},
		{"always, 1 retry", api.ContainerRestart{Policy: api.ContainerRestartAlways, MaxRetries: 1}, 0, api.ContainerCompleted, 1},
	}
	e := setup(t)
	ports := newMemPorts()
	ch := &changes{}
	m, _ := e.manager(ports, ch)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := e.job("again", "sh", "-c", fmt.Sprintf("echo run; sleep 0.3; exit %d", tc.code))
			job.Restart = tc.restart
			job.Ports = []api.ContainerPort{{Container: 80}}
			if _, err := m.Deploy(ctxFor(t), job); err != nil {
				t.Fatalf("Deploy: %v", err)
			}
			c := waitStatus(t, m, job.ID, tc.status)
			if c.Restarts != tc.restarts || c.ExitCode == nil || *c.ExitCode != tc.code {
				t.Errorf("job = %+v, want %d restarts and exit code %d", c, tc.restarts, tc.code)
			}
			// The change that reports the final status may reach the
			// listener a moment after the manager's own record shows it.
			var statuses []string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				statuses = statuses[:0]
				for _, x := range ch.list() {
					if x.Job.ID == job.ID {
						statuses = append(statuses, x.Status)
					}
				}
				if slices.ContainsFunc(statuses, api.ContainerFinal) || time.Now().After(deadline) {
					break
				}
			}
			if first := slices.IndexFunc(statuses, api.ContainerFinal); first != len(statuses)-1 {
				t.Errorf("statuses %v: a final one before the last; the books would be freed while it restarts", statuses)
			}
			logs, err := m.Logs(ctxFor(t), job.ID, 0)
			if err != nil || strings.Count(string(logs), "run\n") != tc.restarts+1 {
				t.Errorf("Logs = %q, %v; want %d runs", logs, err, tc.restarts+1)
			}
			if held := ports.owned("container:" + job.ID); len(held) != 0 {
				t.Errorf("ports held after the job ended: %v", held)
			}
		})
	}
}

// A stop sends SIGTERM and waits the job's stop_timeout before SIGKILL: a
// job that exits on SIGTERM goes at once, one that ignores it after the
// timeout.
func TestStopTimeout(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		timeout  time.Duration
		min, max time.Duration
	}{
		{"exits on SIGTERM", `trap "exit 0" TERM; while :; do sleep 0.1; done`, 20 * time.Second, 0, 5 * time.Second},
		{"ignores SIGTERM", `trap "" TERM; while :; do sleep 0.1; done`, 3 * time.Second, 3 * time.Second, 10 * time.Second},
	}
	e := setup(t)
	m, _ := e.manager(nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := e.job("stopper", "sh", "-c", tc.script)
			job.StopTimeout = api.Duration(tc.timeout)
			if _, err := m.Deploy(ctxFor(t), job); err != nil {
				t.Fatalf("Deploy: %v", err)
			}
			time.Sleep(300 * time.Millisecond) // let the trap be set
			start := time.Now()
			if _, err := m.Delete(ctxFor(t), job.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if took := time.Since(start); took < tc.min || took > tc.max {
				t.Errorf("Delete took %s, want %s-%s (stop_timeout %s)", took, tc.min, tc.max, tc.timeout)
			}
		})
	}
}

// Named volumes and paths in the job's runtime dir are mounted; a host
// path outside the runtime dir is refused with a field error.
func TestVolumes(t *testing.T) {
	e := setup(t)
	runtime := t.TempDir()
	m, _ := e.manager(nil, nil, func(c *container.Config) { c.RuntimeDir = runtime })
	ctx := ctxFor(t)
	vol := fmt.Sprintf("nodemgr-test-%x", rand.Uint64())
	t.Cleanup(func() { e.engine.VolumeRemove(ctx, vol, client.VolumeRemoveOptions{Force: true}) })

	job := e.job("vols", "sh", "-c", "echo from-job > /data/out && echo kept > /vol/file && cat /ro/in")
	job.Volumes = []api.ContainerVolume{
		{Source: "./data", Target: "/data"},
		{Source: vol, Target: "/vol"},
		{Source: filepath.Join(runtime, job.ID, "input"), Target: "/ro", ReadOnly: true},
	}
	if err := os.MkdirAll(filepath.Join(runtime, job.ID, "input"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(runtime, job.ID, "input", "in"), []byte("given\n"), 0o644)
	if _, err := m.Deploy(ctx, job); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	c := waitStatus(t, m, job.ID, api.ContainerCompleted)
	if c.RuntimeDir != filepath.Join(runtime, job.ID) {
		t.Errorf("RuntimeDir = %q, want %q", c.RuntimeDir, filepath.Join(runtime, job.ID))
	}
	if b, err := os.ReadFile(filepath.Join(runtime, job.ID, "data", "out")); err != nil || string(b) != "from-job\n" {
		t.Errorf("runtime dir data/out = %q, %v; want what the job wrote", b, err)
	}
	if logs, _ := m.Logs(ctx, job.ID, 0); string(logs) != "given\n" {
		t.Errorf("job read %q from its read-only volume, want %q", logs, "given\n")
	}
	if _, err := e.engine.VolumeInspect(ctx, vol, client.VolumeInspectOptions{}); err != nil {
		t.Errorf("named volume %s: %v, want it made by the engine", vol, err)
	}

	for _, src := range []string{"/etc", runtime + "/other-job", "/"} {
		bad := e.job("hostpath")
		bad.Volumes = []api.ContainerVolume{{Source: src, Target: "/x"}}
		var fe *errdefs.FieldError
		_, err := m.Deploy(ctx, bad)
		if !errors.As(err, &fe) || fe.Field != "volumes[0].source" || !strings.Contains(err.Error(), "runtime dir") {
			t.Errorf("Deploy(volume %s) = %v, want a field error on volumes[0].source about the runtime dir", src, err)
		}
		if _, err := m.Get(bad.ID); err == nil {
			t.Errorf("a refused job (volume %s) was recorded", src)
		}
	}
}

// The pull policy: never (the default) does not try a registry and says
// how to put the image on the node; if-not-present uses the image that is
// there; always pulls, and says so when it cannot.
func TestPullPolicy(t *testing.T) {
	e := setup(t)
	m, _ := e.manager(nil, nil)
	tests := []struct {
		name   string
		image  string
		policy string
		ok     bool
		says   []string
	}{
		{"never, missing", "nodemgr-test/missing:never", "", false, []string{`"nodemgr-test/missing:never"`, "pull_policy is never", "docker load"}},
		{"if-not-present, present", e.image, api.PullIfNotPresent, true, nil},
		{"always, unreachable registry", e.image, api.PullAlways, false, []string{"pull image", "docker load"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := e.job("pull", "true")
			job.Image, job.PullPolicy = tc.image, tc.policy
			start := time.Now()
			_, err := m.Deploy(ctxFor(t), job)
			if tc.ok {
				if err != nil {
					t.Fatalf("Deploy = %v, want it to run", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("Deploy = %v, want not found", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Deploy = %q, want it to say %q", err, s)
				}
			}
			t.Logf("%s: refused in %s", tc.name, time.Since(start))
		})
	}
}
