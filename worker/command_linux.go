package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/node/proctree"
	"github.com/nodemgr/nodemgr/internal/node/workerproto"
)

// A command task is started with fork+exec and watched through one epoll
// instance of our own: its two output pipes and a pidfd that turns
// readable when it exits. The task's goroutine waits in epoll_wait for the
// three at once and reads into a reused buffer: no copying goroutines, no
// buffers to collect. (Waiting through Go's poller instead woke the
// runtime's threads at every task and cost more CPU.) It needs Linux 5.3
// or later for pidfds, as the service supervisor does.

// Event tags: which descriptor an epoll event is about.
const (
	tagStdout = iota
	tagStderr
	tagExit
)

// taskCred, when set, is the user every task starts as (RunCommandWorker
// told so by the pool): set once before the first task, read after.
var taskCred *syscall.Credential

// runTasksAs makes tasks start as the user an EnvRunAs value names.
func runTasksAs(v string) error {
	uid, gid, groups, err := workerproto.ParseRunAs(v)
	if err != nil {
		return err
	}
	taskCred = &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}
	return nil
}

// runCommand runs t; see RunCommand.
func runCommand(ctx context.Context, t Task, env []string) Result {
	failed := func(err error) Result {
		return Result{ExitCode: -1, Err: fmt.Errorf("start %s: %w", t.Argv[0], err)}
	}
	w, err := takeWatch()
	if err != nil {
		return failed(err)
	}
	defer w.put()
	if w.group == nil && !treesOff {
		if w.group, err = newGroup(); err != nil {
			return failed(err)
		}
	}
	path, cached, err := programs.lookup(t.Argv[0])
	if err != nil {
		return failed(err)
	}
	run, err := w.start(path, t, env)
	if err != nil && cached && errors.Is(err, syscall.ENOENT) { // gone since: look again
		programs.forget(t.Argv[0])
		if path, _, err = programs.lookup(t.Argv[0]); err == nil {
			run, err = w.start(path, t, env)
		}
	}
	if err != nil {
		return failed(err)
	}
	grace := t.KillGrace
	if grace <= 0 {
		grace = api.DefaultKillGrace
	}
	run.log, run.logBy = fullLogs.logWriter(t.ID, t.Attempt), time.Now().Add(logOpenAfter)
	stopTerm := context.AfterFunc(ctx, func() { run.terminate(grace) })
	ws := run.wait(stopTerm)
	run.finish()
	run.log.Close()
	res := Result{ExitCode: -1, Stdout: run.out[tagStdout].String(), Stderr: run.out[tagStderr].String()}
	switch {
	case run.waitErr != nil:
		res.Err = fmt.Errorf("%s: cannot tell how it ended: %w", t.Argv[0], run.waitErr)
		return res
	case ws.Signaled():
		res.Signal = unix.SignalName(ws.Signal())
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	}
	if ctx.Err() != nil {
		res.Err = context.Cause(ctx)
	}
	return res
}

// watch is the epoll instance a task is watched with, and what goes with
// it; watches are reused, one per task running at once.
type watch struct {
	epfd    int
	devNull int // the tasks' standard input
	buf     []byte
	events  [4]unix.EpollEvent
	// gen tells this task's events from any a previous task's
	// descriptors left behind (a descriptor stays registered while a
	// process forked meanwhile still holds a copy of it).
	gen int32
	// group holds the task's processes, all of them; it is emptied at
	// the end of each task and reused for the next.
	group *proctree.Group
}

// trees is this process's manager of task process groups, made at the
// first task: a cgroup per running task where the machine has cgroups,
// else a walk of the process tree (package proctree).
var trees struct {
	sync.Mutex
	m            *proctree.Manager
	ownsChildren bool // set by RunCommandWorker: every child is a task's
}

func newGroup() (*proctree.Group, error) {
	trees.Lock()
	defer trees.Unlock()
	if trees.m == nil {
		mode, err := proctree.ModeFromEnv()
		if err != nil {
			return nil, err
		}
		if trees.m, err = proctree.New(proctree.Options{Mode: mode, OwnsChildren: trees.ownsChildren}); err != nil {
			return nil, err
		}
	}
	g, err := trees.m.NewGroup()
	if err != nil {
		return nil, fmt.Errorf("make a group for the task's processes: %w", err)
	}
	return g, nil
}

// treesOff runs tasks without a group, as before groups were: the
// benchmark's baseline.
var treesOff bool

// ownChildren says that every child of this process is a task's (or an
// orphan of one), for the command worker: proctree may reap them.
func ownChildren() {
	trees.Lock()
	trees.ownsChildren = true
	trees.Unlock()
}

// closeTrees kills what the groups still hold and removes their cgroups.
func closeTrees() error {
	trees.Lock()
	defer trees.Unlock()
	if trees.m == nil {
		return nil
	}
	err := trees.m.Close()
	trees.m = nil
	watches.Lock()
	for _, w := range watches.free {
		w.group = nil
	}
	watches.Unlock()
	return err
}

var watches struct {
	sync.Mutex
	free []*watch
}

func takeWatch() (*watch, error) {
	watches.Lock()
	if n := len(watches.free); n > 0 {
		w := watches.free[n-1]
		watches.free = watches.free[:n-1]
		watches.Unlock()
		return w, nil
	}
	watches.Unlock()
	return newWatch()
}

func (w *watch) put() {
	watches.Lock()
	watches.free = append(watches.free, w)
	watches.Unlock()
}

func newWatch() (*watch, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	null, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(epfd)
		return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
	}
	return &watch{epfd: epfd, devNull: null, buf: make([]byte, 16<<10)}, nil
}

// running is one started command.
type running struct {
	w     *watch
	pid   int
	pidfd int
	pipes [2]int // read ends of stdout and stderr; -1 once closed
	out   [2]tailBuffer
	log   *tasklog.Writer // the attempt's full output; nil: not kept
	// logBy: when output still held in memory goes to the log's file.
	logBy time.Time

	mu       sync.Mutex
	reaped   bool
	finished bool        // the task is over: its group may hold the next one
	killT    *time.Timer // SIGKILL for all, a grace after SIGTERM
	waitErr  error       // the exit status could not be collected
}

// start starts the command with its output on two pipes, in a process
// group of its own that is killed if the worker dies.
func (w *watch) start(path string, t Task, env []string) (*running, error) {
	w.gen++
	r := &running{w: w, pidfd: -1, pipes: [2]int{-1, -1}}
	writeEnds := [2]int{-1, -1}
	for i := range r.pipes {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			r.closeFDs()
			closeAll(writeEnds[:i])
			return nil, os.NewSyscallError("pipe2", err)
		}
		r.pipes[i], writeEnds[i] = p[0], p[1]
	}
	pidfd := -1
	attr := &syscall.ProcAttr{
		Dir: t.Workdir, Env: env,
		Files: []uintptr{uintptr(w.devNull), uintptr(writeEnds[0]), uintptr(writeEnds[1])},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd, Credential: taskCred},
	}
	fork := func(attr *syscall.ProcAttr) (int, error) { return syscall.ForkExec(path, t.Argv, attr) }
	var pid int
	var err error
	if w.group != nil {
		pid, err = w.group.Start(attr, fork)
	} else {
		pid, err = fork(attr)
	}
	closeAll(writeEnds[:])
	if err != nil {
		r.closeFDs()
		return nil, startError(t.Workdir, err)
	}
	r.pid, r.pidfd = pid, pidfd
	for tag, fd := range []int{r.pipes[0], r.pipes[1], pidfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(tag), Pad: w.gen}
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			// Cannot watch it: take it down rather than leave it unwatched.
			r.reap()
			r.closeFDs()
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	return r, nil
}

// startError explains a failed fork+exec; a missing working directory
// looks like a missing program otherwise.
func startError(dir string, err error) error {
	if dir != "" && errors.Is(err, syscall.ENOENT) {
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("workdir: %w", serr)
		}
	}
	return err
}

// wait collects the command's output until it exits, then reaps it, kills
// what it left running (its whole tree, see reap), and drains its output
// for at most outputDrainWait. stopTerm ends the context's hold on the
// tree first.
func (r *running) wait(stopTerm func() bool) syscall.WaitStatus {
	var ws syscall.WaitStatus
	exited := false
	var drainBy time.Time
	for !exited || r.pipes[0] >= 0 || r.pipes[1] >= 0 {
		timeout := -1
		if exited {
			left := time.Until(drainBy)
			if left <= 0 {
				break
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		timeout = r.logTimeout(timeout)
		n, err := unix.EpollWait(r.w.epfd, r.w.events[:], timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // cannot watch it any more: take it down
			if !exited {
				stopTerm()
				ws, exited = r.reap(), true
			}
			break
		}
		for _, ev := range r.w.events[:n] {
			if ev.Pad != r.w.gen {
				continue
			}
			if tag := int(ev.Fd); tag == tagExit {
				if exited {
					continue
				}
				stopTerm()
				ws, exited = r.reap(), true
				drainBy = time.Now().Add(outputDrainWait)
				// A pidfd stays readable: stop watching it.
				unix.EpollCtl(r.w.epfd, unix.EPOLL_CTL_DEL, r.pidfd, nil)
			} else {
				r.read(tag)
			}
		}
	}
	r.closeFDs()
	return ws
}

// logTimeout shortens an epoll timeout (ms, -1: none) to when output
// held in memory is due in the log's file, making the file if it is due.
func (r *running) logTimeout(timeout int) int {
	if !r.log.Pending() {
		return timeout
	}
	left := time.Until(r.logBy)
	if left <= 0 {
		r.log.Open()
		return timeout
	}
	ms := int((left + time.Millisecond - 1) / time.Millisecond)
	if timeout < 0 || ms < timeout {
		return ms
	}
	return timeout
}

// read takes what one pipe has; level-triggered, so one read per event
// never blocks, and what is left is reported again.
func (r *running) read(tag int) {
	fd := r.pipes[tag]
	if fd < 0 {
		return
	}
	n, err := unix.Read(fd, r.w.buf)
	if n > 0 {
		r.out[tag].Write(r.w.buf[:n])
		r.log.Write(tasklog.Stream(tag+1), r.w.buf[:n])
		return
	}
	if err == unix.EINTR || err == unix.EAGAIN {
		return
	}
	unix.Close(fd) // end of output (or an error: nothing more to get)
	r.pipes[tag] = -1
}

// terminate asks the task's processes to stop, all of them: SIGTERM now
// (its process group, and its tree for those that left the group), and
// SIGKILL for the tree after grace. The command's process group is only
// signalled until it is reaped: its id could then belong to someone else.
func (r *running) terminate(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished || r.reaped || r.killT != nil {
		return // reaped: reap killed the rest already
	}
	unix.Kill(-r.pid, unix.SIGTERM)
	if r.w.group != nil {
		r.w.group.Signal(unix.SIGTERM)
	}
	r.killT = time.AfterFunc(grace, r.killAll)
}

// killAll kills the task's whole tree, at the end of its grace.
func (r *running) killAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished || r.reaped {
		return
	}
	unix.Kill(-r.pid, unix.SIGKILL)
	if r.w.group != nil {
		r.killTreeLocked()
	}
}

// killTreeLocked kills every process of the task's tree and waits until
// they are gone. A group that cannot be emptied is not used again.
func (r *running) killTreeLocked() {
	if err := r.w.group.Kill(); err != nil {
		g := r.w.group
		r.w.group = nil
		go g.Close()
	}
}

// reap kills what the exited command left in its group (while its zombie
// still holds the group id), collects its status, and then kills what it
// left anywhere in its tree: a process that left the group (setsid) would
// otherwise outlive the task holding its output pipes.
func (r *running) reap() syscall.WaitStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws syscall.WaitStatus
	if r.reaped {
		return ws
	}
	unix.Kill(-r.pid, unix.SIGKILL)
	for {
		_, err := syscall.Wait4(r.pid, &ws, 0, nil)
		if err != syscall.EINTR {
			r.waitErr = err // ECHILD: reaped by someone else (SIGCHLD ignored)
			break
		}
	}
	r.reaped = true
	if r.w.group != nil {
		r.killTreeLocked()
	}
	return ws
}

// finish ends the task's hold on its group: a grace timer still pending
// must not kill the next task's processes.
func (r *running) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = true
	if r.killT != nil {
		r.killT.Stop()
	}
}

func (r *running) closeFDs() {
	for i, fd := range r.pipes {
		if fd >= 0 {
			unix.Close(fd)
			r.pipes[i] = -1
		}
	}
	if r.pidfd >= 0 {
		unix.Close(r.pidfd)
		r.pidfd = -1
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}
