package service

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/workload"
	"golang.org/x/sys/unix"
)

func supported() error { return nil }

// detach gives a service a session (and so a process group) of its own: a
// signal meant for the agent, such as Ctrl-C at its terminal, does not reach
// it, the agent can signal the whole group, and the service outlives the
// agent. No Pdeathsig, on purpose.
func detach(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }

// signalGroup sends sig to the process group led by pid (a service leads
// its group, see detach). While any member lives, the kernel does not hand
// the group's id out as a new pid, so this never reaches a stranger's group.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

func signalPID(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// signalByName maps a drain signal name (see signalName) to the signal.
func signalByName(name string) (syscall.Signal, error) {
	if s := unix.SignalNum(workload.SignalName(name)); s != 0 {
		return s, nil
	}
	return 0, fmt.Errorf("unknown signal %q", name)
}

// procStat is what the supervisor needs from /proc/PID/stat.
type procStat struct {
	state     byte   // field 3: R, S, D, Z, ...
	pgrp      int    // field 5
	startTime uint64 // field 22, clock ticks after boot
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(data)
}

// parseProcStat parses /proc/PID/stat. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so the fields are
// counted from the last ')'.
func parseProcStat(data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	f := bytes.Fields(data[i+1:]) // f[0] is field 3
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat: %w", err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat: %w", err)
	}
	return procStat{state: f[0][0], pgrp: pgrp, startTime: start}, nil
}

// procStartTime returns the start time of process pid.
func procStartTime(pid int) (uint64, error) {
	st, err := readProcStat(pid)
	return st.startTime, err
}

// alive reports whether pid is still the process that started at start and
// has not exited (a zombie has exited, it only waits to be reaped).
func alive(pid int, start uint64) bool {
	st, err := readProcStat(pid)
	return err == nil && st.state != 'Z' && st.startTime == start
}

// waitExit blocks until the process pid that started at start has exited,
// and reports true; or until quit is closed, and reports false. It is for
// processes that are not our children (adopted after an agent restart), so
// wait(2) cannot be used. A pidfd becomes readable the moment the process
// exits; where pidfd_open is not available (Linux before 5.3, some
// sandboxes) /proc is polled every pollEvery instead.
func waitExit(pid int, start uint64, quit <-chan struct{}, pollEvery time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return true
		}
		return pollExit(pid, start, quit, pollEvery)
	}
	defer unix.Close(fd)
	// The pid may have been recycled between the check that adopted it
	// and pidfd_open; checking after opening settles which process the
	// pidfd refers to.
	if !alive(pid, start) {
		return true
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		// The timeout only bounds how long quit goes unnoticed.
		n, err := unix.Poll(fds, 250)
		if n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return pollExit(pid, start, quit, pollEvery)
		}
		select {
		case <-quit:
			return false
		default:
		}
	}
}

func pollExit(pid int, start uint64, quit <-chan struct{}, every time.Duration) bool {
	t := time.NewTicker(every)
	defer t.Stop()
	for alive(pid, start) {
		select {
		case <-quit:
			return false
		case <-t.C:
		}
	}
	return true
}

// groupRSS returns the resident memory, in bytes, of each of the process
// groups pgids: VmRSS from /proc/PID/status summed over every process in
// the group, so a service that is a wrapper script around the real program
// is measured whole. Pages shared between members are counted once per
// member, as VmRSS does.
func groupRSS(pgids []int) map[int]uint64 {
	want := make(map[int]bool, len(pgids))
	for _, g := range pgids {
		want[g] = true
	}
	out := make(map[int]uint64, len(pgids))
	if len(want) == 0 {
		return out
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || !want[st.pgrp] {
			continue
		}
		out[st.pgrp] += vmRSS(pid)
	}
	return out
}

// vmRSS returns VmRSS of pid in bytes, 0 if it cannot be read (a kernel
// thread, or a process that just exited).
func vmRSS(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest) // "1234", "kB"
		if len(f) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}
