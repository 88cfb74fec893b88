package worker

import (
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// startTask starts cmd as the leader of a new process group, which dies
// with the worker if the worker is killed outright.
func startTask(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd.Start()
}

// killTaskGroup kills a task's process group.
func killTaskGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }

// exitInfo says how a process ended: its exit code, or -1 and the name of
// the signal that killed it.
func exitInfo(st *os.ProcessState) (code int, signal string) {
	if st == nil {
		return -1, ""
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, unix.SignalName(ws.Signal())
	}
	return st.ExitCode(), ""
}
