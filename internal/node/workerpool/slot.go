package workerpool

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/backoff"
	"github.com/nodemgr/nodemgr/internal/base/procenv"
	"github.com/nodemgr/nodemgr/internal/node/gocrash"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// slot is one worker position: an ID and cores kept across the processes
// that fill it in turn. Its fields are guarded by Pool.mu.
type slot struct {
	id   int
	cpus []int

	gen   int    // spawn generation, so stale events can be told apart
	token string // this generation's hello token
	proc  *os.Process
	// stderr reads this generation's stderr.
	stderr *stderrTail
	conn   *workerproto.Conn // set by hello
	// connDone is closed when the reader of conn has read it to the end:
	// a worker's last frames (a report written just before it exits) are
	// then in.
	connDone chan struct{}
	helloed  bool        // this generation said hello
	releases bool        // its worker answers Release (its hello said so)
	retired  bool        // told Done: its exit is expected
	dropped  bool        // killed for a protocol error
	fetchAt  time.Time   // when its unanswered fetch arrived; zero: none
	fetchN   int         // how many tasks that fetch takes
	job      *job        // the task it runs: the first it holds, unreported
	queued   []*job      // tasks it holds behind job, in the order it runs them
	termT    *time.Timer // SIGKILL after SIGTERM
	silent   int         // consecutive exits before hello
	lastErr  error       // why the last hello failed, for the fatal error
	noShow   bool        // killed for not connecting in time
}

// job is a task a worker holds.
type job struct {
	task    api.Task
	start   time.Time
	timeout *time.Timer
	killT   *time.Timer // SIGKILL if the worker does not abandon the task
	// verdict, once the pool has decided how the attempt ends ("timeout",
	// "cancelled"), is the reason it is reported failed with, whatever the
	// worker says.
	verdict string
	// releasing: the worker was asked to give it back (Release), if it
	// has not started it.
	releasing bool
}

var errStopping = errors.New("worker pool is stopping")

// holding returns the job of taskID that s holds, running or waiting.
func (s *slot) holding(taskID string) *job {
	if s.job != nil && s.job.task.ID == taskID {
		return s.job
	}
	for _, j := range s.queued {
		if j.task.ID == taskID {
			return j
		}
	}
	return nil
}

// spawn starts a new process in s.
func (p *Pool) spawn(s *slot) (*exec.Cmd, error) {
	p.mu.Lock()
	if p.stop != stopNone {
		p.mu.Unlock()
		return nil, errStopping
	}
	s.gen++
	s.token = randHex(16)
	s.helloed, s.retired, s.dropped, s.noShow = false, false, false, false
	gen, token := s.gen, s.token
	p.mu.Unlock()

	cmd := exec.Command(p.cfg.Command[0], p.cfg.Command[1:]...)
	cmd.Dir = p.cfg.Dir
	cmd.Env = append(append(procenv.Clean(), p.cfg.Env...),
		workerproto.EnvSocket+"="+p.sock,
		workerproto.EnvWorkerID+"="+strconv.Itoa(s.id),
		workerproto.EnvToken+"="+token,
		workerproto.EnvWorkerCount+"="+strconv.Itoa(p.cfg.Workers),
		workerproto.EnvSuiteID+"="+p.cfg.SuiteID,
		workerproto.EnvSuiteName+"="+p.cfg.SuiteName,
		workerproto.EnvNodeID+"="+p.cfg.NodeID,
		workerproto.EnvProcs+"="+strconv.Itoa(p.procs(s)),
	)
	// Stdout straight to the agent's stderr, stderr through a pipe the
	// pool reads (stderr.go): *os.Files both, handed to the child as they
	// are, so Wait never waits on a pipe a worker's child still holds.
	errTail, errW, err := newStderrTail(os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("start worker %d: stderr pipe: %w", s.id, err)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, errW
	ownGroup(cmd)
	if u := p.cfg.RunAs; u != nil {
		if p.cfg.CommandWorker {
			cmd.Env = append(cmd.Env, workerproto.EnvRunAs+"="+workerproto.FormatRunAs(u.UID, u.GID, u.Groups))
		} else {
			startAs(cmd, *u)
		}
	}
	err = startPinned(cmd, s.cpus)
	errW.Close() // the worker has its own copy now
	if err != nil {
		errTail.r.Close()
		return nil, fmt.Errorf("start worker %d (%s): %w", s.id, p.cfg.Command[0], err)
	}
	go errTail.run()

	p.mu.Lock()
	defer p.mu.Unlock()
	s.proc, s.stderr = cmd.Process, errTail
	p.log.Debug("worker started", "worker", s.id, "pid", s.proc.Pid, "cpus", formatCPUs(s.cpus))
	if p.stop != stopNone { // stopping began while it started
		p.terminateLocked(s, p.cfg.KillGrace)
	}
	time.AfterFunc(p.connectTimeout, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if s.gen == gen && s.proc != nil && !s.helloed && !s.retired {
			p.log.Error("worker did not connect; killing it", "worker", s.id, "pid", s.proc.Pid, "after", p.connectTimeout)
			s.noShow = true
			killGroup(s.proc)
		}
	})
	return cmd, nil
}

// procs is s's worker's share of the cores it may run on: the cores it is
// pinned to, split among the workers pinned to the same ones (Shared, or
// no binding: all of them share the machine). A Go runtime sized to that
// share leaves the others' cores alone instead of spinning threads on
// them; on a 2-core machine that lifted nodemgr bench dispatch by about
// a sixth.
func (p *Pool) procs(s *slot) int {
	cpus := len(s.cpus)
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	sharing := 0
	for _, o := range p.slots {
		if slices.Equal(o.cpus, s.cpus) {
			sharing++
		}
	}
	return max(1, cpus/max(1, sharing))
}

// slotLoop waits for s's process to end, reports what it held, and starts
// the next one, until the pool stops.
func (p *Pool) slotLoop(s *slot, cmd *exec.Cmd) {
	defer p.slotWG.Done()
	bo := backoff.Backoff{Min: respawnMin, Max: respawnMax}
	for {
		started := time.Now()
		cmd.Wait() // the exit status is in ProcessState; other errors cannot happen with *os.File output
		if !p.exited(s, cmd) {
			return
		}
		var delay time.Duration
		if time.Since(started) < healthyLife {
			delay = bo.Next() // dying young: don't spin
		} else {
			bo.Reset()
		}
		for {
			if delay > 0 {
				select {
				case <-time.After(delay):
				case <-p.stopCh:
					return
				}
			}
			var err error
			if cmd, err = p.spawn(s); err == nil {
				break
			}
			if errors.Is(err, errStopping) {
				return
			}
			p.mu.Lock()
			p.log.Error("restart worker", "worker", s.id, "err", err)
			s.lastErr = err
			p.silentDeathLocked(s)
			p.mu.Unlock()
			delay = bo.Next()
		}
		p.mu.Lock()
		p.respawns++
		p.mu.Unlock()
	}
}

// exited handles the end of s's process and says whether to start another.
func (p *Pool) exited(s *slot, cmd *exec.Cmd) bool {
	code, sig := exitInfo(cmd.ProcessState)
	killGroup(cmd.Process) // anything it left behind in its group

	// What it wrote before it exited counts: a report must not be taken
	// for a death while holding the task.
	p.mu.Lock()
	done, errTail := s.connDone, s.stderr
	p.mu.Unlock()
	if done != nil {
		t := time.NewTimer(connDrainWait)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	stderr := ""
	if errTail != nil {
		stderr = errTail.finish(stderrDrainWait)
	}
	// A Go worker that faults exits 2 with the runtime's report on stderr.
	goSig := gocrash.Signal(code, stderr)

	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.signal(p.kick)
	s.proc, s.stderr = nil, nil
	// The pool sent SIGTERM itself (terminateLocked) or is stopping; any
	// other SIGTERM came from elsewhere.
	termSent := s.termT != nil || p.stop != stopNone
	if s.termT != nil {
		s.termT.Stop()
		s.termT = nil
	}
	p.forgetConnLocked(s)
	status := "exit status " + strconv.Itoa(code)
	if sig != "" {
		status = sig
	}
	expected := s.retired || s.dropped || p.stop != stopNone
	if !s.helloed && !expected {
		s.lastErr = fmt.Errorf("exited with %s before connecting", status)
		if s.noShow {
			s.lastErr = fmt.Errorf("did not connect within %v", p.connectTimeout)
		}
		p.silentDeathLocked(s)
	}

	if j := s.job; j != nil {
		s.job = nil
		p.releaseLocked(j)
		r := api.TaskReport{TaskID: j.task.ID, Attempt: j.task.Attempt, Outcome: api.OutcomeFailed,
			Result: api.TaskResult{ExitCode: code, Signal: sig, Stderr: stderr, DurationMS: time.Since(j.start).Milliseconds()}}
		switch {
		case j.verdict != "":
			r.Reason = j.verdict
		case p.stop == stopForce:
			r.Outcome, r.Reason = api.OutcomeStopped, "worker stopped: the pool is stopping"
		case (sig == "SIGTERM" || sig == "SIGINT") && termSent:
			r.Outcome, r.Reason = api.OutcomeStopped, "worker stopped ("+sig+")"
		case sig == "SIGTERM" || sig == "SIGINT":
			// Counted: a task that kills its worker so would otherwise be
			// retried forever, with no pause.
			r.Crash, r.Reason = true, "worker killed by "+sig+" (not sent by nodemgr)"
		case sig != "":
			r.Crash, r.Reason = true, "worker crashed ("+sig+")"
		case goSig != "":
			r.Result.Signal = goSig
			r.Crash, r.Reason = true, "worker crashed ("+goSig+", Go runtime, "+status+")"
		default:
			r.Crash, r.Reason = true, "worker exited while running the task ("+status+")"
		}
		p.log.Warn("worker ended holding a task", "worker", s.id, "pid", cmd.Process.Pid, "task", j.task.ID,
			"status", status, "outcome", r.Outcome, "reason", r.Reason)
		p.reportLocked(r)
		p.requeueQueuedLocked(s) // never started: back to the buffer, no attempt spent
	} else if !expected {
		p.log.Warn("worker exited", "worker", s.id, "pid", cmd.Process.Pid, "status", status)
	} else {
		p.log.Debug("worker exited", "worker", s.id, "pid", cmd.Process.Pid, "status", status)
	}

	switch {
	case p.stop != stopNone || p.fatal != nil || s.retired:
		return false
	case p.done && len(p.buf) == 0:
		return false // nothing left for a new one to do
	}
	return true
}

// silentDeathLocked counts an exit before hello; too many in a row mean the
// worker command cannot work, and Run fails.
func (p *Pool) silentDeathLocked(s *slot) {
	s.silent++
	if s.silent >= maxSilentDeaths && p.fatal == nil {
		p.fatal = fmt.Errorf("worker %d failed %d times in a row before connecting (last: %v): check the worker command %q",
			s.id, s.silent, s.lastErr, p.cfg.Command)
		p.signal(p.kick)
	}
}

// forgetConnLocked closes s's connection and any fetch pending on it.
func (p *Pool) forgetConnLocked(s *slot) {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
		s.connDone = nil
	}
	if !s.fetchAt.IsZero() {
		s.fetchAt = time.Time{}
		p.waiting = slices.DeleteFunc(p.waiting, func(w *slot) bool { return w == s })
	}
}

// releaseLocked forgets a job's timers and its place in held.
func (p *Pool) releaseLocked(j *job) {
	if j.timeout != nil {
		j.timeout.Stop()
	}
	if j.killT != nil {
		j.killT.Stop()
	}
	delete(p.held, j.task.ID)
	p.signal(p.kick)
}

// requeueQueuedLocked puts the tasks s holds behind the one it runs back
// at the front of the buffer, in their order: s never started them.
func (p *Pool) requeueQueuedLocked(s *slot) {
	for i := len(s.queued) - 1; i >= 0; i-- {
		j := s.queued[i]
		p.releaseLocked(j)
		p.requeueLocked(j.task)
	}
	s.queued = nil
}

// terminateLocked sends s's process SIGTERM, and SIGKILL after grace, or
// after the grace of the task it runs (plus KillGrace) if that is longer:
// a worker that stops gives its task's processes their grace first.
func (p *Pool) terminateLocked(s *slot, grace time.Duration) {
	if s.proc == nil || s.termT != nil {
		return
	}
	if grace <= 0 {
		grace = p.cfg.KillGrace
	}
	if s.job != nil {
		grace = max(grace, p.abandonWait(s.job))
	}
	proc, gen := s.proc, s.gen
	if err := terminate(proc); err != nil {
		killGroup(proc)
		return
	}
	s.termT = time.AfterFunc(grace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if s.gen == gen && s.proc == proc {
			p.log.Warn("worker did not stop; killing it", "worker", s.id, "pid", proc.Pid, "after", grace)
			killGroup(proc)
		}
	})
}

// dropLocked replaces a worker that broke the protocol: it is killed, and
// the task it held goes back to the front of the buffer, not counted as an
// attempt that failed.
func (p *Pool) dropLocked(s *slot, why error) {
	pid := 0
	if s.proc != nil {
		pid = s.proc.Pid
	}
	p.log.Warn("dropping worker: protocol error", "worker", s.id, "pid", pid, "err", why)
	p.dropped++
	s.dropped = true
	if j := s.job; j != nil {
		s.job = nil
		p.requeueQueuedLocked(s)
		p.releaseLocked(j)
		p.requeueLocked(j.task)
	}
	p.forgetConnLocked(s)
	if s.proc != nil {
		killGroup(s.proc)
	}
	p.dispatchLocked()
}

// abandonLocked settles how a task s holds ends (reason) and asks the
// worker to drop it. If it runs, the worker is killed unless it reports
// within the task's kill grace plus KillGrace; if it waits behind
// another, that clock starts when it would run (promoteLocked).
func (p *Pool) abandonLocked(s *slot, j *job, reason string) {
	j.verdict = reason
	if s.conn != nil {
		s.conn.Write(workerproto.Frame{Op: workerproto.OpCancel,
			Cancel: &workerproto.Cancel{TaskID: j.task.ID, Attempt: j.task.Attempt, Reason: reason}})
	}
	if s.job == j {
		p.killLaterLocked(s, j, reason)
	}
}

// abandonWait is how long a worker asked to give up j has before it is
// killed: the task's own kill grace (its processes get SIGTERM, then
// SIGKILL after it), plus KillGrace for the worker to report.
func (p *Pool) abandonWait(j *job) time.Duration {
	grace := time.Duration(j.task.KillGrace)
	if grace <= 0 {
		grace = api.DefaultKillGrace
	}
	return grace + p.cfg.KillGrace
}

// killLaterLocked kills s's worker if it still runs j after abandonWait.
func (p *Pool) killLaterLocked(s *slot, j *job, reason string) {
	gen := s.gen
	j.killT = time.AfterFunc(p.abandonWait(j), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if s.gen == gen && s.job == j && s.proc != nil {
			p.log.Warn("worker did not abandon its task; killing it", "worker", s.id, "pid", s.proc.Pid,
				"task", j.task.ID, "reason", reason)
			killGroup(s.proc)
		}
	})
}

// expire is a job's timeout.
func (p *Pool) expire(s *slot, j *job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.job == j && j.verdict == "" {
		p.log.Info("task timed out", "worker", s.id, "task", j.task.ID, "timeout", time.Duration(j.task.Timeout))
		p.abandonLocked(s, j, "timeout")
	}
}
