//go:build unix

package rsync

import (
	"os/exec"
	"syscall"
)

// ownGroup makes rsync lead a process group of its own, and makes
// cancelling it kill the whole group: rsync and the ssh it started.
func ownGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
}
