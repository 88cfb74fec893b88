//go:build !linux

package worker

import (
	"errors"
	"os"
	"os/exec"
)

func startTask(cmd *exec.Cmd) error { return errors.ErrUnsupported }

func killTaskGroup(p *os.Process) {}

func exitInfo(st *os.ProcessState) (code int, signal string) {
	if st == nil {
		return -1, ""
	}
	return st.ExitCode(), ""
}
