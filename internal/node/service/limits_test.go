//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// needRoot skips a test that needs root (cgroups, another user), or fails
// it where CI says the machine has what it needs.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("NODEMGR_REQUIRE_DOCKER") != "" {
		t.Fatal("this test needs root (cgroups, running as another user); NODEMGR_REQUIRE_DOCKER is set")
	}
	t.Skip("needs root: cgroups and running as another user")
}

// Item 8 of issue 13: a memory limit is enforced, and an OOM kill is
// recorded as such.
func TestMemoryLimitOOM(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	s, _ := h.supervisor()
	spec := h.spec("a.oom.u.c")
	spec.Env = map[string]string{"SVC_ALLOC_MB": "200"}
	spec.Limits = &api.ServiceLimits{MemoryMB: 64}
	spec.Restart.Policy = api.RestartNever
	mustStart(t, s, spec)
	v := waitState(t, s, "a.oom.u.c", api.ServiceExited)
	if !strings.Contains(v.LastExit, "signal: killed") || !strings.Contains(v.LastExit, "OOM") {
		t.Errorf("last exit %q, want killed and marked OOM", v.LastExit)
	}
	if strings.Contains(logOf(t, s, "a.oom.u.c"), "svc allocated") {
		t.Errorf("the service allocated 200 MiB under a 64 MiB limit")
	}
}

const spinMain = "#!/bin/sh\nwhile :; do :; done\n"

// A CPU limit throttles a busy loop to about its quota.
func TestCPULimit(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	os.WriteFile(filepath.Join(h.tree, "bin", "spin"), []byte(spinMain), 0o755)
	s, _ := h.supervisor()
	spec := h.spec("a.spin.u.c")
	spec.Command = []string{"bin/spin"}
	spec.Port = -1
	spec.Limits = &api.ServiceLimits{CPUs: 0.2}
	v := mustStart(t, s, spec)
	t.Cleanup(func() { s.Stop(context.Background(), "a.spin.u.c") })
	time.Sleep(200 * time.Millisecond) // past the start
	before, t0 := cpuTicks(t, v.PID), time.Now()
	time.Sleep(1500 * time.Millisecond)
	used := float64(cpuTicks(t, v.PID)-before) / 100 // USER_HZ
	share := used / time.Since(t0).Seconds()
	t.Logf("busy loop limited to 0.2 CPUs used %.3f CPUs", share)
	if share > 0.35 {
		t.Errorf("a busy loop limited to 0.2 CPUs used %.2f CPUs", share)
	}
}

// cpuTicks is utime+stime of pid, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

const writerMain = `#!/bin/sh
if touch "$NODEMGR_SOFTWARE_DIR/planted" 2>/dev/null; then echo wrote-software; else echo software-read-only; fi
touch "$NODEMGR_RUNTIME_DIR/state" && echo wrote-runtime
echo "uid=$(id -u)"
exec sleep 300
`

// installLikeTheStore makes the harness's tree as artifact.Store leaves
// an install (dirs 0555, files 0444/0555, root's), with a writer program,
// and lets anyone pass through its parents (t.TempDir's are 0700).
func installLikeTheStore(t *testing.T, h *harness) {
	t.Helper()
	os.WriteFile(filepath.Join(h.tree, "bin", "writer"), []byte(writerMain), 0o555)
	os.Chmod(filepath.Join(h.tree, "bin"), 0o555)
	os.Chmod(h.tree, 0o555)
	for d := filepath.Dir(h.tree); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(d, fi.Mode().Perm()|0o005)
		}
	}
	os.MkdirAll(h.prefix, 0o755)
}

// A service run as another user cannot write into its software tree
// (read-only and root's, as an install leaves it), but can into its
// runtime dir: one that names its user, and one that names none under an
// agent's policy, which runs it as the unprivileged default, never as
// the agent. (Issue 26: a service without user: ran as root and could
// write into the "read-only" software tree.)
func TestRunAsAnotherUser(t *testing.T) {
	needRoot(t)
	nobody := runas.User{Name: "nobody", UID: 65534, GID: 65534}
	policy := &runas.Policy{Self: runas.User{Name: "root"}, Switch: true, Default: nobody}
	for _, tc := range []struct {
		name  string
		user  string
		users *runas.Policy
	}{
		{"named user", "nobody", nil},
		{"named user, policy", "nobody", policy},
		{"no user, policy's default", "", policy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			installLikeTheStore(t, h)
			s, _ := h.supervisor(func(c *Config) { c.Users = tc.users })
			spec := h.spec("a.writer.u.c")
			spec.Command = []string{"bin/writer"}
			spec.Port = -1
			spec.User = tc.user
			mustStart(t, s, spec)
			t.Cleanup(func() { s.Stop(context.Background(), "a.writer.u.c") })
			waitFor(t, 10*time.Second, "the writer's report", func() error {
				if !strings.Contains(logOf(t, s, "a.writer.u.c"), "uid=") {
					return os.ErrNotExist
				}
				return nil
			})
			log := logOf(t, s, "a.writer.u.c")
			if !strings.Contains(log, "software-read-only") || !strings.Contains(log, "wrote-runtime") || !strings.Contains(log, "uid=65534") {
				t.Errorf("service reported:\n%s\nwant uid 65534, its software tree read-only, its runtime dir writable", log)
			}
			if _, err := os.Stat(filepath.Join(h.tree, "planted")); err == nil {
				t.Errorf("a service run as nobody wrote into its software tree")
			}
		})
	}
}

// A service run as another user that turns its log into a link to a file
// of root's gets nothing of it: the supervisor's log reads, rotation and
// the next run's log stay in the runtime dir (the restart fails instead).
func TestLogLinksStayInTheRuntimeDir(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	installLikeTheStore(t, h)
	secret := filepath.Join(t.TempDir(), "agent.json")
	const credential = `{"credential":"nmn_secret"}`
	os.WriteFile(secret, []byte(credential), 0o600)
	s, _ := h.supervisor(func(c *Config) { c.LogUnit = 1 })
	const coord = "a.linker.u.c"
	spec := h.spec(coord)
	spec.Port = -1
	spec.User = "nobody"
	spec.Logs = api.LogSpec{MaxSizeMB: 1, Keep: 1} // 1 byte: rotated at every check
	v := mustStart(t, s, spec)
	t.Cleanup(func() { s.Stop(context.Background(), coord) })
	log := logFile(v.RuntimeDir)
	// What the service could do as its user: its log is in its dir.
	os.Remove(log)
	if err := os.Symlink(secret, log); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a few rotation checks
	if b, _ := s.Logs(coord, 0); strings.Contains(string(b), "nmn_secret") {
		t.Errorf("the service's log read gave the linked file: %q", b)
	}
	if _, err := s.Restart(context.Background(), coord); err == nil {
		t.Errorf("restart with the log a link out of the runtime dir = nil, want an error")
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != credential {
		t.Errorf("the file the log linked to is now %q, %v; want it untouched", b, err)
	}
}

// A service's drain command runs as the service's user, not the agent's.
func TestDrainCommandRunsAsTheService(t *testing.T) {
	needRoot(t)
	h := newHarness(t)
	installLikeTheStore(t, h)
	s, _ := h.supervisor()
	const coord = "a.drainer.u.c"
	spec := h.spec(coord)
	spec.Port = -1
	spec.User = "nobody"
	spec.Env = map[string]string{"SVC_EXIT_ON_FILE": "drained-by"}
	spec.Drain = api.DrainSpec{Command: []string{"/bin/sh", "-c", `id -u > .by && mv .by drained-by`}, Timeout: api.Duration(10 * time.Second)}
	v := mustStart(t, s, spec)
	got, err := s.Drain(context.Background(), coord)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(v.RuntimeDir, "drained-by")); strings.TrimSpace(string(b)) != "65534" {
		t.Errorf("the drain command ran as uid %q, want the service's, 65534 (drain: %+v; log:\n%s)", b, got, logOf(t, s, coord))
	}
}

// A user the node lacks, and limits out of range, are field errors.
func TestUserAndLimitsRefused(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	tests := []struct {
		name  string
		mod   func(*api.ServiceSpec)
		field string
	}{
		{"unknown user", func(sp *api.ServiceSpec) { sp.User = "no-such-user-xyz" }, "user"},
		{"bad user name", func(sp *api.ServiceSpec) { sp.User = "a b" }, "user"},
		{"negative memory", func(sp *api.ServiceSpec) { sp.Limits = &api.ServiceLimits{MemoryMB: -1} }, "limits.memory_mb"},
		{"tiny memory", func(sp *api.ServiceSpec) { sp.Limits = &api.ServiceLimits{MemoryMB: 1} }, "limits.memory_mb"},
		{"negative cpus", func(sp *api.ServiceSpec) { sp.Limits = &api.ServiceLimits{CPUs: -0.5} }, "limits.cpus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := h.spec("a.refused.u.c")
			tc.mod(&spec)
			_, err := s.Start(context.Background(), spec)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("Start(%s) = %v, want a field error on %s", tc.name, err, tc.field)
			}
		})
	}
}

// A service whose program another user cannot reach (a prefix under a
// directory only root may enter) is refused saying which directory and
// what to do, not with exec's "permission denied".
func TestUnreachableProgramIsAClearError(t *testing.T) {
	needRoot(t)
	h := newHarness(t) // t.TempDir: 0700, root's
	s, _ := h.supervisor()
	spec := h.spec("a.far.u.c")
	spec.Port = -1
	spec.User = "nobody"
	_, err := s.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "chmod o+x") {
		t.Errorf("Start as nobody under a 0700 dir = %v; want an error saying it cannot reach the program and what to do", err)
	}
}
