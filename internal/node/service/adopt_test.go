//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestReadoption: services outlive their supervisor, and the next one
// adopts them (same process, not started twice), keeps their port, and
// notices at once when one dies.
func TestReadoption(t *testing.T) {
	h := newHarness(t)
	a, stopA := h.supervisor()
	const coord = "a.adopt.u.c"
	v := startAnswering(t, a, h.spec(coord))
	stopA()

	if r := waitAnswer(t, v.Port); r.PID != v.PID {
		t.Fatalf("after the supervisor stopped, pid %d answers, want %d", r.PID, v.PID)
	}

	h.ports = newMemPorts()                                                  // the allocator lost its state with the agent
	b, _ := h.supervisor(func(c *Config) { c.ProcPollInterval = time.Hour }) // pidfd only
	<-b.ready
	got, err := b.Get(coord)
	if err != nil || got.State != api.ServiceRunning || got.PID != v.PID || got.Restarts != 0 || got.Port != v.Port {
		t.Fatalf("after adoption: %+v, %v; want running, pid %d, port %d, no restarts", got, err, v.PID, v.Port)
	}
	if !got.StartedAt.Equal(*v.StartedAt) {
		t.Errorf("started_at = %v, want the original %v", got.StartedAt, v.StartedAt)
	}
	if !h.ports.Holds("service:"+coord, v.Port) {
		t.Errorf("adopted service's port %d is not held again", v.Port)
	}
	if r := waitAnswer(t, v.Port); r.PID != v.PID {
		t.Errorf("pid %d answers, want %d", r.PID, v.PID)
	}
	if n := strings.Count(logOf(t, b, coord), "svc started"); n != 1 {
		t.Errorf("started %d times, want once", n)
	}

	syscall.Kill(v.PID, syscall.SIGKILL)
	after := waitRestarts(t, b, coord, 1, "the adopted service to be restarted")
	if after.PID == v.PID || after.LastExit != "unknown" {
		t.Errorf("after kill: %+v; want a new pid and last exit unknown", after)
	}
	if r := waitAnswer(t, after.Port); r.PID != after.PID {
		t.Errorf("pid %d answers, want %d", r.PID, after.PID)
	}
}

// TestDiedWhileAway: a service that died while no supervisor ran is
// restarted by the next one.
func TestDiedWhileAway(t *testing.T) {
	h := newHarness(t)
	a, stopA := h.supervisor()
	const coord = "a.away.u.c"
	v := startAnswering(t, a, h.spec(coord))
	stopA()
	syscall.Kill(v.PID, syscall.SIGKILL)
	gone(t, v.PID)

	b, _ := h.supervisor()
	<-b.ready
	got := waitRestarts(t, b, coord, 1, "restart by the new supervisor")
	if got.LastExit != exitedAway || got.PID == v.PID {
		t.Errorf("%+v: want last exit %q and a new pid", got, exitedAway)
	}
	if r := waitAnswer(t, got.Port); r.PID != got.PID {
		t.Errorf("pid %d answers, want %d", r.PID, got.PID)
	}
}

// TestRecycledPID: a record whose pid now belongs to another process is
// not adopted, and that process is left alone.
func TestRecycledPID(t *testing.T) {
	h := newHarness(t)
	stranger := exec.Command("sleep", "300")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	start, err := procStartTime(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	const coord = "a.recycled.u.c"
	now := time.Now()
	os.MkdirAll(h.stateDir, 0o700)
	rec := &record{Spec: h.spec(coord), State: api.ServiceRunning, PID: stranger.Process.Pid, StartTime: start + 1, StartedAt: &now}
	if err := writeRecord(h.stateDir, rec); err != nil {
		t.Fatal(err)
	}

	b, _ := h.supervisor()
	<-b.ready
	got := waitState(t, b, coord, api.ServiceRunning)
	if got.PID == stranger.Process.Pid || got.LastExit != exitedAway {
		t.Errorf("%+v: want a fresh process, last exit %q", got, exitedAway)
	}
	if !alive(stranger.Process.Pid, start) {
		t.Errorf("the stranger with the recycled pid was killed")
	}
}

// TestRestartingRecord: a service that was waiting to restart when the
// agent went down is started by the next supervisor.
func TestRestartingRecord(t *testing.T) {
	h := newHarness(t)
	const coord = "a.waiting.u.c"
	os.MkdirAll(h.stateDir, 0o700)
	rec := &record{Spec: h.spec(coord), State: api.ServiceRestarting, Restarts: 2, QuickDeaths: 1, LastExit: "exit status 1"}
	if err := writeRecord(h.stateDir, rec); err != nil {
		t.Fatal(err)
	}
	b, _ := h.supervisor()
	got := waitState(t, b, coord, api.ServiceRunning)
	if got.Restarts != 3 {
		t.Errorf("restarts = %d, want 3", got.Restarts)
	}
	waitAnswer(t, got.Port)
}

// TestFinishStop: a stop cut short by the agent's death is finished.
func TestFinishStop(t *testing.T) {
	h := newHarness(t)
	a, stopA := h.supervisor()
	const coord = "a.halfstop.u.c"
	v := mustStart(t, a, h.spec(coord))
	stopA()
	rec, err := readRecord(recordPath(h.stateDir, coord))
	if err != nil {
		t.Fatal(err)
	}
	rec.State = api.ServiceStopping
	if err := writeRecord(h.stateDir, rec); err != nil {
		t.Fatal(err)
	}
	b, _ := h.supervisor()
	got := waitState(t, b, coord, api.ServiceStopped)
	gone(t, v.PID)
	if got.PID != 0 || h.ports.Holds("service:"+coord, v.Port) {
		t.Errorf("%+v: want no pid and the port released", got)
	}
}

func TestAfterRun(t *testing.T) {
	h := newHarness(t)
	s, stop := h.supervisor()
	mustStart(t, s, h.spec("a.after.u.c"))
	stop()
	if err := s.Run(context.Background()); err == nil {
		t.Errorf("second Run = nil, want an error")
	}
	_, err := s.Start(context.Background(), h.spec("b.after.u.c"))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Start after Run returned = %v, want unavailable", err)
	}
	if _, err := s.Get("a.after.u.c"); err != nil {
		t.Errorf("Get after Run returned = %v", err)
	}
}

func TestConcurrentStarts(t *testing.T) {
	h := newHarness(t)
	s, _ := h.supervisor()
	const coord = "a.race.u.c"
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Start(context.Background(), h.spec(coord)) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, errdefs.ErrConflict):
			t.Errorf("Start = %v, want success or conflict", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d Starts succeeded, want 1", ok)
	}
	var wg2 sync.WaitGroup
	for range 4 {
		wg2.Go(func() {
			s.List()
			s.Summaries()
			s.UsedBy(artID)
		})
		wg2.Go(func() { s.Restart(context.Background(), coord) })
	}
	wg2.Wait()
	v := waitState(t, s, coord, api.ServiceRunning)
	if v.Restarts != 4 {
		t.Errorf("restarts = %d, want 4", v.Restarts)
	}
}
