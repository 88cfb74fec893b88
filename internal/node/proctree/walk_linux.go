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
//
// The tree changes while it is read: a process whose parent exits moves
// from the part not yet visited to this process's children, already
// listed. So the roots are read again until a pass finds no new one.
func (g *Group) walkMembers() []int {
	w := walk{mark: g.mark, seen: map[int]bool{}}
	if g.name != "" {
		// A Persistent group's processes are anyone's children: every
		// process is a root, and one pass sees each marked one.
		w.roots(allPIDs())
		return w.out
	}
	self := os.Getpid()
	for {
		n := len(w.seen)
		w.roots(children(self))
		if len(w.seen) == n {
			return w.out
		}
	}
}

type walk struct {
	mark string
	seen map[int]bool
	out  []int
}

func (w *walk) roots(pids []int) {
	for _, pid := range pids {
		w.root(pid)
	}
}

func (w *walk) root(pid int) {
	if w.seen[pid] {
		return
	}
	switch marked, known := markOf(pid, w.mark); {
	case marked:
		w.visit(pid)
	case !known:
		// A dying orphan has lost its environment but may still hold
		// children the kernel has not yet moved here: they are roots
		// too, a moment early.
		w.roots(children(pid))
	}
}

// visit takes pid and all its descendants, marked or not.
func (w *walk) visit(pid int) {
	if w.seen[pid] {
		return
	}
	w.seen[pid] = true
	if alive(pid) {
		w.out = append(w.out, pid)
	}
	for _, c := range children(pid) {
		w.visit(c)
	}
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

// markOf reads pid's environment: marked says it carries the group's
// mark, known that there was an environment to read. A process in the
// middle of exec shows none for a moment, so a live one is read again; an
// exiting one has lost it for good.
func markOf(pid int, mark string) (marked, known bool) {
	want := []byte(EnvGroup + "=" + mark)
	for try := 0; ; try++ {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err == nil && len(b) > 0 {
			for kv := range bytes.SplitSeq(b, []byte{0}) {
				if bytes.Equal(kv, want) {
					return true, true
				}
			}
			return false, true
		}
		if err != nil || try == 20 || !alive(pid) {
			return false, false
		}
		time.Sleep(100 * time.Microsecond)
	}
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
