package workload_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/workload"
)

func TestCheckContainer(t *testing.T) {
	good := api.ContainerJob{Name: "web", Image: "busybox:1.36"}
	tests := []struct {
		name  string
		edit  func(*api.ContainerJob)
		field string // "" for a valid job
		says  string // part of the reason
	}{
		{"minimal", func(j *api.ContainerJob) {}, "", ""},
		{"full", func(j *api.ContainerJob) {
			*j = api.ContainerJob{
				ID: "42", Name: "web-1", Image: "registry.example.com:5000/team/web@sha256:" + strings.Repeat("a", 64),
				Technology: "docker", Command: []string{"httpd", "-f"}, Env: map[string]string{"A": "1", "B_2": ""},
				CPUs: 0.5, MemoryMB: 6, Labels: map[string]string{"team": "infra", "nodemgr.test": "x"},
				Ports: []api.ContainerPort{{Container: 80}, {Container: 53, Host: 5353, Protocol: "udp"}, {Container: 53, Host: 5353}},
			}
		}, "", ""},
		{"bad id", func(j *api.ContainerJob) { j.ID = "Web_1" }, "id", "lowercase"},
		{"id too long", func(j *api.ContainerJob) { j.ID = strings.Repeat("a", 64) }, "id", "1-63"},
		{"no name", func(j *api.ContainerJob) { j.Name = "" }, "name", "needs a name"},
		{"bad name", func(j *api.ContainerJob) { j.Name = "-web" }, "name", "not a valid name"},
		{"upper-case name", func(j *api.ContainerJob) { j.Name = "Web" }, "name", "lowercase"},
		{"no image", func(j *api.ContainerJob) { j.Image = "" }, "image", "needs an image"},
		{"bad image", func(j *api.ContainerJob) { j.Image = "Busy Box" }, "image", "not an image reference"},
		{"unikernel", func(j *api.ContainerJob) { j.Technology = "unikernel" }, "technology", "not supported"},
		{"unknown technology", func(j *api.ContainerJob) { j.Technology = "podman" }, "technology", `"podman"`},
		{"negative cpus", func(j *api.ContainerJob) { j.CPUs = -1 }, "cpus", "non-negative"},
		{"NaN cpus", func(j *api.ContainerJob) { j.CPUs = math.NaN() }, "cpus", "non-negative"},
		{"tiny cpus", func(j *api.ContainerJob) { j.CPUs = 0.001 }, "cpus", "minimum"},
		{"negative memory", func(j *api.ContainerJob) { j.MemoryMB = -1 }, "memory_mb", "negative"},
		{"memory below minimum", func(j *api.ContainerJob) { j.MemoryMB = 5 }, "memory_mb", "6 MiB"},
		{"container port 0", func(j *api.ContainerJob) { j.Ports = []api.ContainerPort{{Container: 80}, {Container: 0}} }, "ports[1].container", "1-65535"},
		{"container port too big", func(j *api.ContainerJob) { j.Ports = []api.ContainerPort{{Container: 65536}} }, "ports[0].container", "1-65535"},
		{"host port negative", func(j *api.ContainerJob) { j.Ports = []api.ContainerPort{{Container: 80, Host: -1}} }, "ports[0].host", "port number"},
		{"host port too big", func(j *api.ContainerJob) { j.Ports = []api.ContainerPort{{Container: 80, Host: 70000}} }, "ports[0].host", "port number"},
		{"bad protocol", func(j *api.ContainerJob) { j.Ports = []api.ContainerPort{{Container: 80, Protocol: "sctp"}} }, "ports[0].protocol", "tcp or udp"},
		{"container port twice", func(j *api.ContainerJob) {
			j.Ports = []api.ContainerPort{{Container: 80}, {Container: 80, Protocol: "tcp"}}
		}, "ports[1].container", "twice"},
		{"host port twice", func(j *api.ContainerJob) {
			j.Ports = []api.ContainerPort{{Container: 80, Host: 8080}, {Container: 81, Host: 8080}}
		}, "ports[1].host", "twice"},
		{"empty env key", func(j *api.ContainerJob) { j.Env = map[string]string{"": "x"} }, "env", "empty"},
		{"env key with =", func(j *api.ContainerJob) { j.Env = map[string]string{"A=B": "x"} }, "env", `"A=B"`},
		{"env value with NUL", func(j *api.ContainerJob) { j.Env = map[string]string{"A": "x\x00"} }, "env.A", "NUL"},
		{"reserved label", func(j *api.ContainerJob) { j.Labels = map[string]string{"nodemgr.job": "x"} }, "labels.nodemgr.job", "set by nodemgr"},
		{"empty label key", func(j *api.ContainerJob) { j.Labels = map[string]string{"": "x"} }, "labels", "empty"},
		{"lifecycle fields", func(j *api.ContainerJob) {
			j.Restart = api.ContainerRestart{Policy: "on-failure", MaxRetries: 5}
			j.StopTimeout = api.Duration(30 * time.Second)
			j.PullPolicy = "if-not-present"
			j.Volumes = []api.ContainerVolume{{Source: "cache", Target: "/cache"}, {Source: "./data", Target: "/data", ReadOnly: true}, {Source: "/abs/checked/by/the/manager", Target: "/x"}}
		}, "", ""},
		{"bad restart policy", func(j *api.ContainerJob) { j.Restart.Policy = "sometimes" }, "restart.policy", "never, on-failure or always"},
		{"negative retries", func(j *api.ContainerJob) { j.Restart = api.ContainerRestart{Policy: "always", MaxRetries: -1} }, "restart.max_retries", "out of range"},
		{"retries but never", func(j *api.ContainerJob) { j.Restart.MaxRetries = 2 }, "restart.max_retries", "never restarted"},
		{"negative stop timeout", func(j *api.ContainerJob) { j.StopTimeout = api.Duration(-time.Second) }, "stop_timeout", "out of range"},
		{"huge stop timeout", func(j *api.ContainerJob) { j.StopTimeout = api.Duration(2 * time.Hour) }, "stop_timeout", "1s-1h"},
		{"sub-second stop timeout", func(j *api.ContainerJob) { j.StopTimeout = api.Duration(time.Millisecond) }, "stop_timeout", "resolution"},
		{"bad pull policy", func(j *api.ContainerJob) { j.PullPolicy = "sometimes" }, "pull_policy", "never"},
		{"volume without source", func(j *api.ContainerJob) { j.Volumes = []api.ContainerVolume{{Target: "/x"}} }, "volumes[0].source", "needs a source"},
		{"volume leaving the runtime dir", func(j *api.ContainerJob) { j.Volumes = []api.ContainerVolume{{Source: "../etc", Target: "/x"}} }, "volumes[0].source", "leaves the job's runtime dir"},
		{"volume with a colon", func(j *api.ContainerJob) { j.Volumes = []api.ContainerVolume{{Source: "a:b", Target: "/x"}} }, "volumes[0].source", "':'"},
		{"relative target", func(j *api.ContainerJob) { j.Volumes = []api.ContainerVolume{{Source: "v", Target: "x"}} }, "volumes[0].target", "absolute"},
		{"root target", func(j *api.ContainerJob) { j.Volumes = []api.ContainerVolume{{Source: "v", Target: "/"}} }, "volumes[0].target", "root"},
		{"target twice", func(j *api.ContainerJob) {
			j.Volumes = []api.ContainerVolume{{Source: "v", Target: "/x"}, {Source: "w", Target: "/x/"}}
		}, "volumes[1].target", "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := good
			tc.edit(&job)
			err := workload.CheckContainer(job)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("workload.CheckContainer(%+v) = %v, want nil", job, err)
				}
				return
			}
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("workload.CheckContainer(%+v) = %v, want a field error on %s", job, err, tc.field)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.says) {
				t.Errorf("workload.CheckContainer(%+v) = %q, want field %s saying %q", job, err, tc.field, tc.says)
			}
		})
	}
}
