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
	stopKill := context.AfterFunc(ctx, run.killGroup)
	ws := run.wait(stopKill)
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

	mu      sync.Mutex
	reaped  bool
	waitErr error // the exit status could not be collected
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
	pid, err := syscall.ForkExec(path, t.Argv, &syscall.ProcAttr{
		Dir: t.Workdir, Env: env,
		Files: []uintptr{uintptr(w.devNull), uintptr(writeEnds[0]), uintptr(writeEnds[1])},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	})
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
			r.killGroup()
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
// what it left running in its group, and drains its output for at most
// outputDrainWait (only a process that left the group can still hold the
// pipes then). stopKill ends the context's hold on the group first.
func (r *running) wait(stopKill func() bool) syscall.WaitStatus {
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
		n, err := unix.EpollWait(r.w.epfd, r.w.events[:], timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // cannot watch it any more: take it down
			if !exited {
				stopKill()
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
				stopKill()
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
		return
	}
	if err == unix.EINTR || err == unix.EAGAIN {
		return
	}
	unix.Close(fd) // end of output (or an error: nothing more to get)
	r.pipes[tag] = -1
}

// killGroup kills the command's process group, unless the command is
// reaped already: its group id could then belong to someone else.
func (r *running) killGroup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reaped {
		unix.Kill(-r.pid, unix.SIGKILL)
	}
}

// reap kills what the exited command left in its group (while its zombie
// still holds the group id) and collects its status.
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
	return ws
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
