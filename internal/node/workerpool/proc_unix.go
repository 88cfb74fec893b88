//go:build unix

package workerpool

import (
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nodemgr/nodemgr/internal/node/runas"
)

// ownGroup puts a worker in a process group of its own: a Ctrl-C at the
// agent's terminal then reaches the agent only, which stops its workers in
// order, and killing the group takes any helper the worker left behind.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// canRunAs: workers may be started as another user here.
const canRunAs = true

// startAs makes cmd start as u (after ownGroup).
func startAs(cmd *exec.Cmd, u runas.User) { cmd.SysProcAttr.Credential = u.Credential() }

// terminate asks a worker to stop.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// killGroup kills a worker and everything in its process group.
func killGroup(p *os.Process) {
	syscall.Kill(-p.Pid, syscall.SIGKILL)
	p.Kill() // in case it left its group
}

// exitInfo says how a process ended: its exit code, or -1 and the name of
// the signal that killed it; -1 and no signal when Wait could not tell
// (nil: the kernel reaped it, as when SIGCHLD is ignored).
func exitInfo(st *os.ProcessState) (code int, signal string) {
	if st == nil {
		return -1, ""
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, unix.SignalName(ws.Signal())
	}
	return st.ExitCode(), ""
}

// ownedByMe reports whether this process's user owns the file.
func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
