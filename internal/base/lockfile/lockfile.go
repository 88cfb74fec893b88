// Package lockfile keeps two daemons from sharing one data directory: two
// agents, or two servers on one SQLite store.
//
// Acquire takes an exclusive advisory lock (flock) on a file such as
// <data-dir>/agent.lock and writes the holder's PID into it. The kernel
// drops the lock when the holder's process exits, however it exits, so a
// crashed daemon never leaves a stale lock behind; the PID is only there to
// tell a person which process to stop.
package lockfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Lock is a held lock file. Release it, or let the process exit.
type Lock struct {
	path string
	f    *os.File
}

// HeldError reports that another process holds the lock. It is an
// errdefs.ErrConflict.
type HeldError struct {
	Path   string // the lock file, in the data dir it guards
	PID    int    // the holder as it recorded itself; 0 if unknown
	Holder string // what the holder is, as Acquire was told
}

func (e *HeldError) Error() string {
	pid := "pid unknown"
	if e.PID > 0 {
		pid = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("another %s (%s) uses data dir %s; stop it or choose another --data-dir",
		e.Holder, pid, filepath.Dir(e.Path))
}

// Is makes errors.Is(err, errdefs.ErrConflict) true.
func (e *HeldError) Is(target error) bool { return target == errdefs.ErrConflict }

// Acquire takes the lock at path, creating the file if needed, and records
// this process's PID in it. holder says what takes such locks ("nodemgr
// agent"), for the message another taker gets. It does not wait: if
// another process holds the lock it returns a *HeldError. Two Acquires of
// one path within a process conflict too.
func Acquire(path, holder string) (*Lock, error) { return acquire(path, holder) }

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// Release gives the lock up. Calling it again does nothing.
//
// The file stays: removing it would let a newcomer lock a fresh file at
// the same path while a third process still holds the unlinked one. It is
// emptied instead, so that no stale PID is left in it.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	terr := f.Truncate(0)
	if err := f.Close(); err != nil { // closing the last descriptor drops the flock
		return fmt.Errorf("release lock %s: %w", l.path, err)
	}
	if terr != nil {
		return fmt.Errorf("release lock %s: clear pid: %w", l.path, terr)
	}
	return nil
}

// readPID returns the PID recorded in f, or 0 if there is none.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
