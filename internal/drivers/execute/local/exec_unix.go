//go:build unix

package local

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup makes the command lead a process group of its own, and makes
// cancelling it kill the whole group, not just the leader.
func ownGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
}

// exitCode is the exit status, or 128+n for a process killed by signal n.
func exitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// exitedOnItsOwn tells an exit from a kill: a command that Cancel
// killed died of SIGKILL.
func exitedOnItsOwn(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL
}
