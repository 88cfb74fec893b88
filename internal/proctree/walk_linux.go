package proctree

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func setChildSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// walkMembers finds the group's live processes: this process's children
// that carry the group's mark (the task's process, and orphans that were
// reparented here), and all their descendants, marked or not.
func (g *Group) walkMembers() []int {
	seen := map[int]bool{}
	var out []int
	var visit func(pid int)
	visit = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if alive(pid) {
			out = append(out, pid)
		}
		for _, c := range children(pid) {
			visit(c)
		}
	}
	roots := children(os.Getpid())
	if g.name != "" {
		roots = allPIDs() // a Persistent group's processes are anyone's children
	}
	for _, c := range roots {
		if hasMark(c, g.mark) {
			visit(c)
		}
	}
	return out
}

// allPIDs lists every process in /proc.
func allPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killWalk kills the group's processes until none is left, then reaps the
// ones that were this process's children (but not the task's own process:
// its caller reaps that) and, if the manager owns every child, the
// zombies nothing else will reap.
func (g *Group) killWalk() error {
	self := os.Getpid()
	mine := map[int]bool{}
	err := waitUntil(func() (bool, error) {
		pids := g.walkMembers()
		for _, pid := range pids {
			if parent(pid) == self {
				mine[pid] = true
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return len(pids) == 0, nil
	}, "the group's processes to die")
	leader := g.leaderPID()
	for pid := range mine {
		if pid != leader {
			reap(pid)
		}
	}
	if g.m.opts.OwnsChildren {
		for _, c := range children(self) {
			if !alive(c) && !g.m.isLeader(c) {
				reap(c)
			}
		}
	}
	return err
}

// reap collects a dead child's status, waiting a moment for one killed
// just now.
func reap(pid int) {
	for range 100 {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if got != 0 || err != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// children lists pid's children, from every one of its threads.
func children(pid int) []int {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "children"))
		if err != nil {
			continue
		}
		for f := range bytes.FieldsSeq(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// hasMark says whether pid's environment marks it as one of the group's.
// A zombie has no environment left: it is not counted.
func hasMark(pid int, mark string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	want := []byte(EnvGroup + "=" + mark)
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// stat returns the fields of /proc/PID/stat after the command name: state
// first, then the parent's pid.
func stat(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	fields := bytes.Fields(b[i+1:])
	out := make([]string, 0, 2)
	for _, f := range fields[:min(2, len(fields))] {
		out = append(out, string(f))
	}
	return out
}

// alive says whether pid runs: a zombie does not.
func alive(pid int) bool {
	st := stat(pid)
	return len(st) > 0 && st[0] != "Z" && st[0] != "X"
}

func parent(pid int) int {
	st := stat(pid)
	if len(st) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(st[1])
	return ppid
}
