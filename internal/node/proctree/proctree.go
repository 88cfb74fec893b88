// Package proctree keeps track of the processes a task starts, all of
// them, so that they can be stopped together: the task's own process, its
// children, and descendants that left its process group (setsid, a double
// fork) and would survive a process-group kill holding the task's output
// pipes.
//
// A Manager belongs to one process (the command worker) and makes Groups;
// a Group holds one task's processes at a time and is reused for the next
// task once emptied (Kill), so that a task costs no mkdir/rmdir. How a
// group tracks its processes depends on the machine (Mode):
//
//   - Cgroup2: a cgroup v2 directory per group; a task's process is born
//     in it (clone3 CLONE_INTO_CGROUP), its descendants cannot leave it,
//     and cgroup.kill takes them all at once. Needs Linux 5.14.
//   - Cgroup1: a directory per group in a v1 hierarchy (pids, else
//     freezer); the thread that forks a task joins it for the fork, so the
//     task is born in it; killing is a loop over cgroup.procs.
//   - Walk: no cgroup to use. The manager's process becomes a child
//     subreaper, so that orphaned descendants are reparented to it instead
//     of init, and a group is found by walking /proc/PID/task/*/children
//     from the task's process and from the manager's own children that
//     carry the group's mark in their environment (EnvGroup).
//
// New picks the first that works here, in that order, unless a mode is
// forced (Options.Mode, or NODEMGR_PROCTREE=cgroup2|cgroup1|walk).
package proctree

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Mode is how groups track their processes.
type Mode string

const (
	Auto    Mode = ""        // the first of Cgroup2, Cgroup1, Walk that works
	Cgroup2 Mode = "cgroup2" // cgroup v2 with cgroup.kill
	Cgroup1 Mode = "cgroup1" // a cgroup v1 hierarchy
	Walk    Mode = "walk"    // child subreaper and /proc walks
)

// EnvMode forces the mode, for a machine where detection chooses badly
// and for tests.
const EnvMode = "NODEMGR_PROCTREE"

// EnvGroup marks the environment of a group's processes in Walk mode.
const EnvGroup = "NODEMGR_PROCTREE_GROUP"

// killWait bounds how long Kill waits for killed processes to be gone: a
// process in uninterruptible sleep (a hung NFS read) takes its time.
const killWait = 5 * time.Second

// ParseMode reads a mode's name; "" and "auto" are Auto.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Auto, "auto":
		return Auto, nil
	case Cgroup2, Cgroup1, Walk:
		return Mode(s), nil
	}
	return Auto, fmt.Errorf("%s=%q: want cgroup2, cgroup1, walk or auto", EnvMode, s)
}

// Options configure a Manager.
type Options struct {
	Mode Mode // Auto: detect
	// OwnsChildren says every child of this process is the manager's to
	// reap (the command worker's case): in Walk mode, orphans that exited
	// by themselves are then reaped too, even when nothing tells whose
	// they were. Leave it false in a process that starts children of its
	// own (os/exec), or their Wait would lose their status.
	OwnsChildren bool
	// Persistent makes a manager whose groups outlive its process, for
	// supervised services that the next agent adopts: its cgroup
	// directory is nodemgr-<Persistent> (not nodemgr-PID, which a later
	// manager would sweep), its groups are named and found again by name
	// (Open), and Release lets a group go without killing it. In Walk
	// mode such a manager does not become a subreaper (the next one
	// could not be the parent of orphans): a group's processes are those
	// anywhere in /proc whose environment carries the group's mark, and
	// their descendants, so a descendant that clears its environment and
	// leaves the session is lost. Persistent must be a plain file name.
	Persistent string
}

// ModeFromEnv is Options.Mode as EnvMode says.
func ModeFromEnv() (Mode, error) { return ParseMode(os.Getenv(EnvMode)) }

// ErrClosed is returned by a closed Manager or Group.
var ErrClosed = errors.New("proctree: closed")

// Forker starts a process with attr (which the group has added to) and
// returns its pid: syscall.ForkExec, typically.
type Forker func(attr *syscall.ProcAttr) (int, error)
