//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"golang.org/x/sys/unix"
)

func TestStartServes(t *testing.T) {
	t.Setenv("NODEMGR_SECRET_TOKEN", "do-not-leak")
	t.Setenv("SERVICE_TEST_INHERITED", "no")
	h := newHarness(t)
	s, _ := h.supervisor()
	const coord = "i1.web.alice.c1"
	spec := h.spec(coord)
	spec.Command = []string{"bin/svc", "first"}
	spec.Options = map[string]string{"threads": "4", "log-level": "debug"}
	spec.Env = map[string]string{"GREETING": "hello"}
	v := mustStart(t, s, spec)

	wantDir := filepath.Join(h.prefix, "runtime", "c1", "alice", "web", "i1")
	if v.State != api.ServiceRunning || v.PID == 0 || v.Port == 0 || v.RuntimeDir != wantDir || v.StartedAt == nil {
		t.Fatalf("Start = %+v, want running with pid, port, started_at and runtime dir %s", v, wantDir)
	}
	r := waitAnswer(t, v.Port)
	if r.Coordinate != coord || r.PID != v.PID {
		t.Errorf("service answers coordinate %q pid %d, want %q pid %d", r.Coordinate, r.PID, coord, v.PID)
	}
	if want := []string{"first", "--log-level=debug", "--threads=4"}; !slices.Equal(r.Args, want) {
		t.Errorf("args = %q, want %q", r.Args, want)
	}
	if r.Cwd != wantDir {
		t.Errorf("cwd = %q, want %q", r.Cwd, wantDir)
	}
	port := fmt.Sprint(v.Port)
	for k, want := range map[string]string{
		"NODEMGR_RUNTIME_DIR":      wantDir,
		"NODEMGR_SOFTWARE_DIR":     h.tree,
		"NODEMGR_COORDINATE":       coord,
		"NODEMGR_SERVICE_INSTANCE": "i1",
		"NODEMGR_SERVICE_SERVICE":  "web",
		"NODEMGR_SERVICE_USER":     "alice",
		"NODEMGR_SERVICE_CELL":     "c1",
		"NODEMGR_OPT_THREADS":      "4",
		"NODEMGR_OPT_LOG_LEVEL":    "debug",
		"PORT":                     port,
		"NODEMGR_PORT":             port,
		"GREETING":                 "hello",
	} {
		if got := r.Env[k]; got != want {
			t.Errorf("env %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"NODEMGR_SECRET_TOKEN", "SERVICE_TEST_INHERITED"} {
		if _, ok := r.Env[k]; ok {
			t.Errorf("the agent's %s leaked into the service's environment", k)
		}
	}
	if _, ok := r.Env["PATH"]; !ok {
		t.Errorf("PATH was not inherited")
	}

	// Its own session and process group, so agent signals miss it.
	st, err := readProcStat(v.PID)
	if err != nil || st.pgrp != v.PID {
		t.Errorf("pgrp of service = %d (%v), want its own pid %d", st.pgrp, err, v.PID)
	}
	if sid, _ := unix.Getsid(v.PID); sid != v.PID {
		t.Errorf("session of service = %d, want its own pid %d", sid, v.PID)
	}
	if !h.ports.Holds("service:"+coord, v.Port) {
		t.Errorf("port %d is not held by service:%s", v.Port, coord)
	}

	waitFor(t, 5*time.Second, "stdout and stderr in the log", func() error {
		l := logOf(t, s, coord)
		if !strings.Contains(l, fmt.Sprintf("svc started pid=%d", v.PID)) || !strings.Contains(l, "svc stderr") {
			return fmt.Errorf("log is %q", l)
		}
		return nil
	})
	if got, _ := s.Logs(coord, 5); len(got) != 5 {
		t.Errorf("Logs(tail 5) = %q, want 5 bytes", got)
	}

	fi, err := os.Stat(recordPath(h.stateDir, coord))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record %v mode %v, want 0600", err, fi.Mode().Perm())
	}
	rec, err := readRecord(recordPath(h.stateDir, coord))
	if err != nil || rec.PID != v.PID || rec.StartTime == 0 || rec.State != api.ServiceRunning || rec.Port != v.Port {
		t.Errorf("record = %+v, %v; want running pid %d port %d with a start time", rec, err, v.PID, v.Port)
	}

	g, err := s.Get(coord)
	if err != nil || g.RSSBytes == 0 {
		t.Errorf("Get = %+v, %v; want RSS measured", g, err)
	}
	if l := s.List(); len(l) != 1 || l[0].Spec.Coordinate != coord || l[0].RSSBytes == 0 {
		t.Errorf("List = %+v, want the one service with RSS", l)
	}
	want := []api.ServiceSummary{{Coordinate: coord, Artifact: artID, State: api.ServiceRunning, PID: v.PID, Port: v.Port}}
	if got := s.Summaries(); !slices.Equal(got, want) {
		t.Errorf("Summaries = %+v, want %+v", got, want)
	}
	h.mu.Lock()
	changes := h.changes
	h.mu.Unlock()
	if changes == 0 {
		t.Errorf("OnChange was never called")
	}
}

func TestStartErrors(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()

	t.Run("twice", func(t *testing.T) {
		mustStart(t, s, h.spec("a.twice.u.c"))
		_, err := s.Start(ctx, h.spec("a.twice.u.c"))
		if !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("second Start = %v, want conflict", err)
		}
		if err := errContains(err, "start service a.twice.u.c", "stop it first", "restart"); err != nil {
			t.Error(err)
		}
	})
	t.Run("artifact not installed", func(t *testing.T) {
		spec := h.spec("a.noart.u.c")
		spec.Artifact = "com.example:other:2.0"
		_, err := s.Start(ctx, spec)
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Start = %v, want not found", err)
		}
		if err := errContains(err, "nodemgr artifact install NODE com.example:other:2.0"); err != nil {
			t.Error(err)
		}
		if _, err := s.Get("a.noart.u.c"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get after failed Start = %v, want not found", err)
		}
	})
	t.Run("port taken", func(t *testing.T) {
		h.ports.Allocate("someone-else", 40123)
		spec := h.spec("a.porttaken.u.c")
		spec.Port = 40123
		_, err := s.Start(ctx, spec)
		if !errors.Is(err, errdefs.ErrConflict) {
			t.Fatalf("Start = %v, want the allocator's conflict", err)
		}
		if _, err := s.Get("a.porttaken.u.c"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get after failed Start = %v, want not found", err)
		}
		if _, err := os.Stat(recordPath(h.stateDir, "a.porttaken.u.c")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record left behind: %v", err)
		}
	})
	t.Run("program missing releases port", func(t *testing.T) {
		spec := h.spec("a.noprog.u.c")
		spec.Command = []string{"bin/nothing"}
		_, err := s.Start(ctx, spec)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != "command[0]" {
			t.Fatalf("Start of a missing program = %v, want a field error on command[0]", err)
		}
		if n := h.ports.count("service:a.noprog.u.c"); n != 0 {
			t.Errorf("failed Start left %d ports held", n)
		}
		if _, err := s.Get("a.noprog.u.c"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get after failed Start = %v, want not found", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		spec := h.spec("a.invalid.u.c")
		spec.Port = 70000
		_, err := s.Start(ctx, spec)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != "port" {
			t.Errorf("Start = %v, want a field error on port", err)
		}
	})
	t.Run("failed restart of a stopped one keeps its record", func(t *testing.T) {
		mustStart(t, s, h.spec("a.keep.u.c"))
		if _, err := s.Stop(ctx, "a.keep.u.c"); err != nil {
			t.Fatal(err)
		}
		spec := h.spec("a.keep.u.c")
		spec.Artifact = "com.example:gone:1.0"
		if _, err := s.Start(ctx, spec); err == nil {
			t.Fatal("Start with a missing artifact succeeded")
		}
		v, err := s.Get("a.keep.u.c")
		if err != nil || v.State != api.ServiceStopped || v.Spec.Artifact != artID {
			t.Errorf("Get = %+v, %v; want the old stopped service", v, err)
		}
	})
	t.Run("unknown coordinate", func(t *testing.T) {
		_, err := s.Get("x.nope.u.c")
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Get = %v, want not found", err)
		}
		if err := errContains(err, "x.nope.u.c", "nodemgr service ls"); err != nil {
			t.Error(err)
		}
		if _, err := s.Stop(ctx, "x.nope.u.c"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Stop = %v, want not found", err)
		}
	})
}

func TestNoPortAllocator(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor(func(c *Config) { c.Ports = nil })
	spec := h.spec("a.noports.u.c")
	v := mustStart(t, s, spec)
	if v.Port != 0 {
		t.Errorf("port = %d, want none", v.Port)
	}
	spec.Coordinate, spec.Port = "b.noports.u.c", 8080
	_, err := s.Start(context.Background(), spec)
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != "port" {
		t.Errorf("Start with a port and no allocator = %v, want a field error on port", err)
	}
}

func TestFiles(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()
	os.MkdirAll(filepath.Join(h.tree, "conf"), 0o755)
	os.WriteFile(filepath.Join(h.tree, "conf", "default.yaml"), []byte("from: artifact\n"), 0o444)
	os.Symlink("default.yaml", filepath.Join(h.tree, "conf", "link.yaml"))
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o644)
	os.Symlink(secret, filepath.Join(h.tree, "conf", "escape"))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/data.bin":
			fmt.Fprint(w, "downloaded")
		case "/big":
			w.Write(make([]byte, 2048))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	const coord = "a.files.u.c"
	spec := h.spec(coord)
	spec.Files = []api.ServiceFile{
		{Path: "conf/app.yaml", From: "conf/default.yaml"},
		{Path: "conf/linked.yaml", From: "conf/link.yaml", Mode: "0600"},
		{Path: "data/data.bin", URL: srv.URL + "/data.bin", Mode: "0640"},
	}
	v := mustStart(t, s, spec)
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{"conf/app.yaml", "from: artifact\n", 0o644},
		{"conf/linked.yaml", "from: artifact\n", 0o600},
		{"data/data.bin", "downloaded", 0o640},
	} {
		p := filepath.Join(v.RuntimeDir, f.path)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != f.content {
			t.Errorf("%s = %q, %v; want %q", f.path, b, err, f.content)
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode() != f.mode {
			t.Errorf("%s mode = %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	if _, err := s.Stop(ctx, coord); err != nil {
		t.Fatal(err)
	}

	// The service changed its files; a new start keeps them unless told.
	os.WriteFile(filepath.Join(v.RuntimeDir, "conf/app.yaml"), []byte("edited"), 0o644)
	os.WriteFile(filepath.Join(v.RuntimeDir, "data/data.bin"), []byte("edited"), 0o644)
	spec.Files[2].Overwrite = true
	mustStart(t, s, spec)
	if b, _ := os.ReadFile(filepath.Join(v.RuntimeDir, "conf/app.yaml")); string(b) != "edited" {
		t.Errorf("conf/app.yaml = %q, want the service's edit kept", b)
	}
	if b, _ := os.ReadFile(filepath.Join(v.RuntimeDir, "data/data.bin")); string(b) != "downloaded" {
		t.Errorf("data/data.bin = %q, want it overwritten", b)
	}
	if _, err := s.Stop(ctx, coord); err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name  string
		file  api.ServiceFile
		field string
	}{
		{"symlink out of the tree", api.ServiceFile{Path: "x", From: "conf/escape"}, "files[0].from"},
		{"missing in the tree", api.ServiceFile{Path: "x", From: "conf/none"}, "files[0].from"},
		{"directory", api.ServiceFile{Path: "x", From: "conf"}, "files[0].from"},
		{"404", api.ServiceFile{Path: "x", URL: srv.URL + "/missing"}, "files[0].url"},
		{"too big", api.ServiceFile{Path: "x", URL: srv.URL + "/big"}, "files[0].url"},
	}
	s2, _ := h.supervisor(func(c *Config) { c.StateDir = filepath.Join(t.TempDir(), "state2"); c.MaxDownloadBytes = 1024 })
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			spec := h.spec("b.files.u.c")
			spec.Files = []api.ServiceFile{tc.file}
			_, err := s2.Start(ctx, spec)
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Start = %v, want a field error on %s", err, tc.field)
			}
			if _, err := s2.Get("b.files.u.c"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get after failed Start = %v, want not found", err)
			}
			if _, err := os.Lstat(filepath.Join(h.prefix, "runtime/c/u/files/b/x")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("file x was written: %v", err)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Errorf("secret outside the tree changed: %q", b)
	}
}

// TestFileTargetSymlink: a symlink the service leaves in its runtime dir
// does not make the agent write outside it.
func TestFileTargetSymlink(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	os.WriteFile(filepath.Join(h.tree, "f"), []byte("new"), 0o644)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("original"), 0o644)
	rt := filepath.Join(h.prefix, "runtime", "c", "u", "sym", "a")
	os.MkdirAll(rt, 0o755)
	os.Symlink(outside, filepath.Join(rt, "conf"))

	spec := h.spec("a.sym.u.c")
	spec.Files = []api.ServiceFile{{Path: "conf/victim", From: "f", Overwrite: true}}
	if _, err := s.Start(context.Background(), spec); err == nil {
		t.Errorf("Start wrote through a symlink out of the runtime dir")
	}
	if b, _ := os.ReadFile(victim); string(b) != "original" {
		t.Errorf("file outside the runtime dir = %q, want it untouched", b)
	}
}

func TestKilledServiceRestarts(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	const coord = "a.kill.u.c"
	v := startAnswering(t, s, h.spec(coord))
	syscall.Kill(v.PID, syscall.SIGKILL)
	got := waitRestarts(t, s, coord, 1, "a restart")
	if got.PID == v.PID || got.Port != v.Port || got.LastExit != "signal: killed" || got.LastExitAt == nil {
		t.Errorf("after kill: %+v; want a new pid, the same port %d, last exit signal: killed", got, v.Port)
	}
	if r := waitAnswer(t, got.Port); r.PID != got.PID {
		t.Errorf("answering pid %d, want %d", r.PID, got.PID)
	}
}

func TestQuickDeathsFail(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	const coord = "a.crash.u.c"
	spec := h.spec(coord)
	spec.Env = map[string]string{"SVC_EXIT": "3"}
	spec.Restart = api.RestartPolicy{MaxRestarts: 3, MinPeriod: api.Duration(10 * time.Second), Delay: api.Duration(10 * time.Millisecond)}
	mustStart(t, s, spec)
	v := waitState(t, s, coord, api.ServiceFailed)
	if want := "died 3 times within 10s of starting; last: exit status 3"; v.Reason != want {
		t.Errorf("reason = %q, want %q", v.Reason, want)
	}
	if v.Restarts != 2 || v.PID != 0 || v.Port != 0 {
		t.Errorf("failed service = %+v, want 2 restarts, no pid, no port", v)
	}
	if n := h.ports.count("service:" + coord); n != 0 {
		t.Errorf("failed service holds %d ports", n)
	}
	if n := strings.Count(logOf(t, s, coord), "svc started"); n != 3 {
		t.Errorf("started %d times, want 3", n)
	}
	// Restart gives it a fresh count.
	if _, err := s.Restart(context.Background(), coord); err != nil {
		t.Fatalf("Restart = %v", err)
	}
	waitFor(t, 10*time.Second, "failed again after 3 more starts", func() error {
		v, _ := s.Get(coord)
		if v.State != api.ServiceFailed || v.Restarts != 5 {
			return fmt.Errorf("state %s restarts %d", v.State, v.Restarts)
		}
		return nil
	})
	if n := strings.Count(logOf(t, s, coord), "svc started"); n != 6 {
		t.Errorf("started %d times, want 6", n)
	}
}

func TestRestartPolicies(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	tests := []struct {
		name, policy, code string
		want               string // state after the first exit
	}{
		{"never after success", api.RestartNever, "0", api.ServiceExited},
		{"never after failure", api.RestartNever, "3", api.ServiceExited},
		{"on-failure after success", api.RestartOnFailure, "0", api.ServiceExited},
		{"on-failure after failure", api.RestartOnFailure, "3", api.ServiceFailed},
		{"always after success", api.RestartAlways, "0", api.ServiceFailed},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			coord := fmt.Sprintf("p%d.policy.u.c", i)
			spec := h.spec(coord)
			spec.Env = map[string]string{"SVC_EXIT": tc.code}
			spec.Restart = api.RestartPolicy{Policy: tc.policy, MaxRestarts: 2, MinPeriod: api.Duration(time.Minute), Delay: api.Duration(10 * time.Millisecond)}
			mustStart(t, s, spec)
			v := waitState(t, s, coord, tc.want)
			wantRestarts := 0
			if tc.want == api.ServiceFailed {
				wantRestarts = 1
			}
			if v.Restarts != wantRestarts || v.LastExit != "exit status "+tc.code {
				t.Errorf("%+v: want %d restarts, last exit status %s", v, wantRestarts, tc.code)
			}
		})
	}
}

func TestLongRunResetsQuickDeaths(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	const coord = "a.long.u.c"
	spec := h.spec(coord)
	spec.Restart = api.RestartPolicy{MaxRestarts: 2, MinPeriod: api.Duration(100 * time.Millisecond), Delay: api.Duration(10 * time.Millisecond)}
	v := mustStart(t, s, spec)
	for i := 1; i <= 3; i++ {
		waitAnswer(t, v.Port)
		time.Sleep(150 * time.Millisecond) // outlive MinPeriod, so the death is not quick
		cur, _ := s.Get(coord)
		syscall.Kill(cur.PID, syscall.SIGKILL)
		v = waitRestarts(t, s, coord, i, fmt.Sprintf("restart %d", i))
	}
}

func TestStop(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()

	t.Run("term", func(t *testing.T) {
		const coord = "a.stop.u.c"
		v := startAnswering(t, s, h.spec(coord))
		got, err := s.Stop(ctx, coord)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.ServiceStopped || got.PID != 0 || got.Port != 0 || got.LastExit != "signal: terminated" || got.Reason != "stopped on request" {
			t.Errorf("Stop = %+v, want stopped by SIGTERM", got)
		}
		gone(t, v.PID)
		if h.ports.Holds("service:"+coord, v.Port) {
			t.Errorf("stopped service still holds port %d", v.Port)
		}
		if again, err := s.Stop(ctx, coord); err != nil || again.State != api.ServiceStopped {
			t.Errorf("second Stop = %+v, %v; want stopped", again, err)
		}
		rec, _ := readRecord(recordPath(h.stateDir, coord))
		if rec.State != api.ServiceStopped {
			t.Errorf("record state = %s, want stopped", rec.State)
		}
	})
	t.Run("kill after grace", func(t *testing.T) {
		const coord = "a.stubborn.u.c"
		spec := h.spec(coord)
		spec.Env = map[string]string{"SVC_IGNORE_TERM": "1"}
		spec.StopGrace = api.Duration(300 * time.Millisecond)
		v := startAnswering(t, s, spec)
		start := time.Now()
		got, err := s.Stop(ctx, coord)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("Stop took %v, want at least the 300ms grace", took)
		}
		if got.State != api.ServiceStopped || got.LastExit != "signal: killed" {
			t.Errorf("Stop = %+v, want stopped by SIGKILL", got)
		}
		gone(t, v.PID)
	})
	t.Run("group", func(t *testing.T) {
		// A shell that ignores TERM, with a child that does too: the
		// whole group goes.
		const coord = "a.group.u.c"
		spec := h.spec(coord)
		spec.Command = []string{"/bin/sh", "-c", `trap "" TERM; sleep 300 & echo child=$!; wait`}
		spec.StopGrace = api.Duration(200 * time.Millisecond)
		spec.Port = -1
		v := mustStart(t, s, spec)
		var child int
		waitFor(t, 5*time.Second, "the child's pid in the log", func() error {
			_, err := fmt.Sscanf(strings.TrimSpace(logOf(t, s, coord)), "child=%d", &child)
			return err
		})
		if _, err := s.Stop(ctx, coord); err != nil {
			t.Fatal(err)
		}
		gone(t, v.PID)
		gone(t, child)
	})
	t.Run("cancels a pending restart", func(t *testing.T) {
		const coord = "a.pending.u.c"
		spec := h.spec(coord)
		spec.Env = map[string]string{"SVC_EXIT": "1"}
		spec.Restart.Delay = api.Duration(time.Hour)
		mustStart(t, s, spec)
		waitState(t, s, coord, api.ServiceRestarting)
		got, err := s.Stop(ctx, coord)
		if err != nil || got.State != api.ServiceStopped {
			t.Fatalf("Stop = %+v, %v; want stopped", got, err)
		}
	})
}

func TestDrain(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()

	t.Run("signal", func(t *testing.T) {
		const coord = "a.drainsig.u.c"
		spec := h.spec(coord)
		spec.Env = map[string]string{"SVC_DRAIN_EXIT": "1"}
		spec.Drain = api.DrainSpec{Signal: "USR1", Timeout: api.Duration(10 * time.Second)}
		startAnswering(t, s, spec)
		start := time.Now()
		got, err := s.Drain(ctx, coord)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Drain took %v; the service exits 100ms after the signal", took)
		}
		if got.State != api.ServiceStopped || got.LastExit != "exit status 0" || got.Reason != "drained" {
			t.Errorf("Drain = %+v, want stopped, exit status 0, drained", got)
		}
		if l := logOf(t, s, coord); !strings.Contains(l, "svc draining") {
			t.Errorf("log %q does not show the drain", l)
		}
	})
	t.Run("command", func(t *testing.T) {
		const coord = "a.draincmd.u.c"
		spec := h.spec(coord)
		spec.Env = map[string]string{"SVC_EXIT_ON_FILE": "drained-by-command"}
		spec.Drain = api.DrainSpec{
			Command: []string{"/bin/sh", "-c", `echo "drain $NODEMGR_COORDINATE port $PORT" > drained-by-command`},
			Timeout: api.Duration(10 * time.Second),
		}
		v := startAnswering(t, s, spec)
		got, err := s.Drain(ctx, coord)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.ServiceStopped || got.LastExit != "exit status 0" || got.Reason != "drained" {
			t.Errorf("Drain = %+v, want stopped, exit status 0, drained", got)
		}
		b, _ := os.ReadFile(filepath.Join(v.RuntimeDir, "drained-by-command"))
		if want := fmt.Sprintf("drain %s port %d\n", coord, v.Port); string(b) != want {
			t.Errorf("drain command wrote %q, want %q", b, want)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		const coord = "a.drainslow.u.c"
		spec := h.spec(coord)
		spec.Drain = api.DrainSpec{Signal: "SIGHUP", Timeout: api.Duration(200 * time.Millisecond)}
		spec.Command = []string{"/bin/sh", "-c", `trap "echo hup" HUP; echo ready; while :; do sleep 0.05; done`}
		spec.Port = -1
		mustStart(t, s, spec)
		waitFor(t, 5*time.Second, "the trap to be set", func() error {
			if !strings.Contains(logOf(t, s, coord), "ready") {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		got, err := s.Drain(ctx, coord)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.ServiceStopped || !strings.Contains(got.Reason, "did not exit within 200ms") {
			t.Errorf("Drain = %+v, want stopped after the timeout", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		const coord = "a.drainnone.u.c"
		v := mustStart(t, s, h.spec(coord))
		got, err := s.Drain(ctx, coord)
		if err != nil || got.State != api.ServiceStopped || got.LastExit != "signal: terminated" {
			t.Errorf("Drain = %+v, %v; want stopped by SIGTERM", got, err)
		}
		gone(t, v.PID)
	})
}

func TestRestartOp(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()
	const coord = "a.restart.u.c"
	v := startAnswering(t, s, h.spec(coord))
	r, err := s.Restart(ctx, coord)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != api.ServiceRunning || r.PID == v.PID || r.Restarts != 1 || r.Port != v.Port {
		t.Errorf("Restart = %+v, want running, new pid, 1 restart, same port %d", r, v.Port)
	}
	gone(t, v.PID)
	waitAnswer(t, r.Port)

	if _, err := s.Stop(ctx, coord); err != nil {
		t.Fatal(err)
	}
	r2, err := s.Restart(ctx, coord)
	if err != nil || r2.State != api.ServiceRunning || r2.Restarts != 2 {
		t.Errorf("Restart of stopped = %+v, %v; want running with 2 restarts", r2, err)
	}

	// A specific port is kept across a restart, though the allocator
	// quarantines released ports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fixed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	spec := h.spec("b.restart.u.c")
	spec.Port = fixed
	f := mustStart(t, s, spec)
	waitAnswer(t, fixed)
	f2, err := s.Restart(ctx, "b.restart.u.c")
	if err != nil || f2.Port != fixed || f2.PID == f.PID {
		t.Fatalf("Restart = %+v, %v; want a new process on port %d", f2, err, fixed)
	}
	if r := waitAnswer(t, fixed); r.PID != f2.PID {
		t.Errorf("pid %d answers on port %d, want %d", r.PID, fixed, f2.PID)
	}
}

func TestRemove(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	ctx := context.Background()
	const coord = "a.rm.u.c"
	v := mustStart(t, s, h.spec(coord))

	err := s.Remove(coord, true)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Remove of running = %v, want conflict", err)
	}
	if err := errContains(err, "stop it first", "nodemgr service stop NODE "+coord); err != nil {
		t.Error(err)
	}
	if _, err := s.Stop(ctx, coord); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(coord, false); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	if _, err := s.Get(coord); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Remove = %v, want not found", err)
	}
	if _, err := os.Stat(recordPath(h.stateDir, coord)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after Remove: %v, want none", err)
	}
	if _, err := os.Stat(v.RuntimeDir); err != nil {
		t.Errorf("runtime dir gone without purge: %v", err)
	}
	if err := s.Remove(coord, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove = %v, want not found", err)
	}

	// Start again, stop, remove with purge.
	mustStart(t, s, h.spec(coord))
	s.Stop(ctx, coord)
	if err := s.Remove(coord, true); err != nil {
		t.Fatalf("Remove(purge) = %v", err)
	}
	if _, err := os.Stat(v.RuntimeDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime dir after purge: %v, want none", err)
	}
}

func TestUsedBy(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	mustStart(t, s, h.spec("b.used.u.c"))
	mustStart(t, s, h.spec("a.used.u.c"))
	mustStart(t, s, h.spec("c.used.u.c"))
	if _, err := s.Stop(context.Background(), "c.used.u.c"); err != nil {
		t.Fatal(err)
	}
	// A stopped service is restarted from the artifact: it uses it too.
	if got, want := s.UsedBy(artID), []string{"a.used.u.c", "b.used.u.c", "c.used.u.c"}; !slices.Equal(got, want) {
		t.Errorf("UsedBy(%s) = %q, want %q", artID, got, want)
	}
	if got := s.UsedBy("com.example:other:1.0"); len(got) != 0 {
		t.Errorf("UsedBy(other) = %q, want none", got)
	}
}

func TestLogRotation(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor(func(c *Config) { c.LogUnit = 4096 })
	const coord = "a.logs.u.c"
	spec := h.spec(coord)
	spec.Env = map[string]string{"SVC_SPAM": "1"}
	spec.Logs = api.LogSpec{MaxSizeMB: 4, Keep: 2} // 16 KiB
	v := mustStart(t, s, spec)
	log := logFile(v.RuntimeDir)
	waitFor(t, 20*time.Second, "two rotations", func() error {
		if _, err := os.Stat(log + ".2"); err != nil {
			return err
		}
		return nil
	})
	// A few more rounds, then look: never more than Keep old files.
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(log + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3 exists (%v); Keep is 2", log, err)
	}
	for _, p := range []string{log + ".1", log + ".2"} {
		fi, err := os.Stat(p)
		if err != nil || fi.Size() < 16*1024 {
			t.Errorf("rotated %s: %v, size %d; want more than the 16 KiB cap", p, err, fi.Size())
		}
	}
	// The service writes on into the truncated file, and Logs reads it.
	// Rotation goes on meanwhile, so a read may land just after a
	// truncation: poll.
	waitFor(t, 5*time.Second, "new lines in the current log, through Logs", func() error {
		b, err := s.Logs(coord, 0)
		switch {
		case err != nil:
			return err
		case len(b) > 1<<20:
			return fmt.Errorf("Logs returned %d bytes, more than its 1 MiB cap", len(b))
		case !strings.Contains(string(b), "xxxx"):
			return fmt.Errorf("Logs = %d bytes without the service's lines", len(b))
		}
		return nil
	})
}
