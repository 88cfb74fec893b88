package proctree

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var modes = []Mode{Cgroup2, Cgroup1, Walk}

// manager is a manager in mode, or a skip where this machine cannot have
// one (not root, no cgroups).
func manager(t *testing.T, mode Mode) *Manager {
	t.Helper()
	m, err := New(Options{Mode: mode})
	if err != nil {
		if os.Getenv("NODEMGR_REQUIRE_PROCTREE") != "" {
			t.Fatalf("New(%s): %v", mode, err)
		}
		t.Skipf("New(%s): %v", mode, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if mode != Auto && m.Mode() != mode {
		t.Fatalf("Mode() = %s, want %s", m.Mode(), mode)
	}
	return m
}

// newGroup is a new group of m.
func newGroup(t testing.TB, m *Manager) *Group {
	t.Helper()
	g, err := m.NewGroup()
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	return g
}

// start starts sh -c script in g and reaps it when the test ends.
func start(t *testing.T, g *Group, script string) int {
	t.Helper()
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Setpgid: true}}
	pid, err := g.Start(attr, func(a *syscall.ProcAttr) (int, error) {
		return syscall.ForkExec("/bin/sh", []string{"sh", "-c", script}, a)
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	})
	return pid
}

// readPID waits for a pid file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err == nil {
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after %v", pid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A group holds its task's descendants wherever they go: a child in the
// task's process group, a grandchild that started a session of its own
// (setsid) and one that double-forked out of it. Signal reaches them all;
// Kill kills them all, and the group takes the next task.
func TestGroupHoldsEscapedDescendants(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			m := manager(t, mode)
			g := newGroup(t, m)
			dir := t.TempDir()
			child, setsid, double := filepath.Join(dir, "child"), filepath.Join(dir, "setsid"), filepath.Join(dir, "double")
			// The task's process stays: its children are found through
			// it, and through the subreaper once it is gone.
			leader := start(t, g, `sh -c 'echo $$ > `+child+`; exec sleep 30' &
				setsid sh -c 'echo $$ > `+setsid+`; exec sleep 30' &
				(setsid sh -c '(echo $$ > `+double+`; exec sleep 30) &' &)
				exec sleep 30`)
			pids := []int{readPID(t, child), readPID(t, setsid), readPID(t, double)}
			n, err := g.Signal(syscall.SIGCONT)
			if err != nil || n < 4 {
				t.Errorf("Signal = %d, %v; want the task and its 3 descendants at least", n, err)
			}
			if err := g.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			for _, pid := range append(pids, leader) {
				waitGone(t, pid, 2*time.Second)
			}
			if n, _ := g.Signal(0); n != 0 {
				t.Errorf("after Kill the group has %d processes, want 0", n)
			}

			// Used again: the next task's processes are in it, and only
			// they.
			next := filepath.Join(dir, "next")
			start(t, g, `setsid sh -c 'echo $$ > `+next+`; exec sleep 30' & exec sleep 30`)
			nextPID := readPID(t, next)
			if err := g.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			waitGone(t, nextPID, 2*time.Second)
			if err := g.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if dir := g.dir; dir != "" {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("after Close, %s: %v; want it removed", g.dir, err)
				}
			}
		})
	}
}

// SIGTERM through Signal reaches a process that left the group's process
// group, and one that traps it can exit cleanly.
func TestGroupSignalTerm(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			m := manager(t, mode)
			g := newGroup(t, m)
			defer g.Close()
			dir := t.TempDir()
			pidFile, trapped := filepath.Join(dir, "pid"), filepath.Join(dir, "trapped")
			start(t, g, `setsid sh -c 'trap "echo yes > `+trapped+`; exit 0" TERM; echo $$ > `+pidFile+`; while :; do sleep 0.05; done' & exec sleep 30`)
			pid := readPID(t, pidFile)
			if _, err := g.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pid, 5*time.Second)
			if b, _ := os.ReadFile(trapped); string(b) != "yes\n" {
				t.Errorf("the escaped process did not get SIGTERM (trap file %q)", b)
			}
		})
	}
}

// The processes of other groups, and this process, are left alone.
func TestGroupsApart(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			m := manager(t, mode)
			a := newGroup(t, m)
			b := newGroup(t, m)
			defer a.Close()
			defer b.Close()
			dir := t.TempDir()
			fa, fb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			start(t, a, `setsid sh -c 'echo $$ > `+fa+`; exec sleep 30' & exec sleep 30`)
			start(t, b, `setsid sh -c 'echo $$ > `+fb+`; exec sleep 30' & exec sleep 30`)
			pa, pb := readPID(t, fa), readPID(t, fb)
			if err := a.Kill(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pa, 2*time.Second)
			if !alive(pb) {
				t.Errorf("killing group a killed group b's process")
			}
			if err := b.Kill(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pb, 2*time.Second)
		})
	}
}

// Auto takes cgroup v2 where it has cgroup.kill, else a v1 hierarchy
// (pids, else freezer), else walks; a forced mode that cannot work says
// why. Fake mount tables point the cgroup modes at plain directories: a
// v2 there has no cgroup.kill.
func TestDetection(t *testing.T) {
	tmp := t.TempDir()
	v2, pids := filepath.Join(tmp, "unified"), filepath.Join(tmp, "pids")
	for _, d := range []string{v2, pids} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	v2Line := "36 35 0:30 / " + v2 + " rw,relatime - cgroup2 cgroup2 rw\n"
	pidsLine := "37 35 0:31 / " + pids + " rw,relatime - cgroup cgroup rw,pids\n"
	cases := []struct {
		name      string
		mountinfo string
		cgroup    string
		force     Mode
		want      Mode // "" and wantErr: an error
		wantErr   string
	}{
		{"v2 without cgroup.kill falls to v1", v2Line + pidsLine, "8:pids:/\n0::/\n", Auto, Cgroup1, ""},
		{"no cgroups: walk", "20 1 0:5 / /proc rw - proc proc rw\n", "", Auto, Walk, ""},
		{"v1 without pids or freezer: walk", "37 35 0:31 / " + pids + " rw - cgroup cgroup rw,cpu\n", "8:cpu:/\n", Auto, Walk, ""},
		{"forced v2 without cgroup.kill", v2Line, "0::/\n", Cgroup2, "", "no cgroup.kill"},
		{"forced v1 not mounted", v2Line, "0::/\n", Cgroup1, "", "not mounted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mi, cg := filepath.Join(tmp, "mountinfo"), filepath.Join(tmp, "cgroup")
			os.WriteFile(mi, []byte(tc.mountinfo), 0o644)
			os.WriteFile(cg, []byte(tc.cgroup), 0o644)
			oldMI, oldCG := mountInfoFile, selfCgroupFile
			mountInfoFile, selfCgroupFile = mi, cg
			defer func() { mountInfoFile, selfCgroupFile = oldMI, oldCG }()
			m, err := New(Options{Mode: tc.force})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), EnvMode) {
					t.Errorf("New = %v, want an error saying %q and naming %s", err, tc.wantErr, EnvMode)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer m.Close()
			if m.Mode() != tc.want {
				t.Errorf("Mode() = %s, want %s", m.Mode(), tc.want)
			}
		})
	}
}

// On this machine's real tables, Auto takes cgroup v2 when it can.
func TestAutoPrefersCgroup2(t *testing.T) {
	v2, err := New(Options{Mode: Cgroup2})
	if err != nil {
		t.Skipf("no cgroup v2 with cgroup.kill here: %v", err)
	}
	v2.Close()
	m := manager(t, Auto)
	if m.Mode() != Cgroup2 {
		t.Errorf("Auto chose %s, want cgroup2", m.Mode())
	}
}

// A manager whose process died leaves its cgroup behind; the next one
// made under the same cgroup kills what was left there and removes it.
func TestSweepsDeadManagers(t *testing.T) {
	for _, mode := range []Mode{Cgroup2, Cgroup1} {
		t.Run(string(mode), func(t *testing.T) {
			m := manager(t, mode)
			parent := filepath.Dir(m.Dir())
			stale := filepath.Join(parent, "nodemgr-999999999") // no such pid
			if err := os.MkdirAll(filepath.Join(stale, "g1"), 0o755); err != nil {
				t.Fatal(err)
			}
			m2, err := New(Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			m2.Close()
			if _, err := os.Stat(stale); !os.IsNotExist(err) {
				t.Errorf("%s: %v; want it swept", stale, err)
				os.Remove(filepath.Join(stale, "g1"))
				os.Remove(stale)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Auto, "auto": Auto, "cgroup2": Cgroup2, "cgroup1": Cgroup1, "walk": Walk} {
		if got, err := ParseMode(in); got != want || err != nil {
			t.Errorf("ParseMode(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ParseMode("cgroup3"); err == nil || !strings.Contains(err.Error(), EnvMode) {
		t.Errorf("ParseMode(cgroup3) = %v, want an error naming %s", err, EnvMode)
	}
}

// BenchmarkKillEmpty is what a group costs a task that leaves nothing
// behind, on top of its fork: the check that the group is empty.
func BenchmarkKillEmpty(b *testing.B) {
	for _, mode := range []Mode{Cgroup2, Cgroup1, Walk} {
		b.Run(string(mode), func(b *testing.B) {
			m, err := New(Options{Mode: mode})
			if err != nil {
				b.Skipf("New(%s): %v", mode, err)
			}
			defer m.Close()
			g := newGroup(b, m)
			for b.Loop() {
				if err := g.Kill(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A Persistent manager's named group outlives the manager: a later manager
// (the next agent) opens it by name and kills what the first one started,
// a setsid'd descendant of a leader that died included; and the group takes
// a process again after that kill.
func TestPersistentGroupOutlivesManager(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			persistent := "test-" + strconv.Itoa(os.Getpid()) + "-" + string(mode)
			first := persistentManager(t, mode, persistent)
			g, err := first.Open("svc.a")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			escaped := filepath.Join(dir, "escaped")
			leader := start(t, g, `setsid sh -c 'echo $$ > `+escaped+`; exec sleep 30' & exec sleep 30`)
			pid := readPID(t, escaped)
			syscall.Kill(leader, syscall.SIGKILL) // the service's main process dies
			var ws syscall.WaitStatus
			syscall.Wait4(leader, &ws, 0, nil) // and its supervisor reaps it
			g.Release()
			if !alive(pid) {
				t.Fatalf("Release killed the group's process %d; want it left running", pid)
			}

			second := persistentManager(t, mode, persistent)
			g2, err := second.Open("svc.a")
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := g2.Signal(0); n != 1 {
				t.Errorf("the reopened group holds %d processes, want the escaped one", n)
			}
			if err := g2.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			waitGone(t, pid, 2*time.Second)

			again := filepath.Join(dir, "again")
			start(t, g2, `echo $$ > `+again+`; exec sleep 30`)
			againPID := readPID(t, again)
			if n, _ := g2.Signal(0); n != 1 {
				t.Errorf("after a kill the group takes a new process: holds %d, want 1", n)
			}
			if err := g2.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			waitGone(t, againPID, 2*time.Second)
		})
	}
}

func persistentManager(t *testing.T, mode Mode, name string) *Manager {
	t.Helper()
	m, err := New(Options{Mode: mode, Persistent: name})
	if err != nil {
		if os.Getenv("NODEMGR_REQUIRE_PROCTREE") != "" {
			t.Fatalf("New(%s): %v", mode, err)
		}
		t.Skipf("New(%s): %v", mode, err)
	}
	t.Cleanup(func() {
		m.Close()
		if d := m.Dir(); d != "" {
			os.Remove(d)
		}
	})
	return m
}
