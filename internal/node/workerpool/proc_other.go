//go:build !unix

package workerpool

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"

	"github.com/nodemgr/nodemgr/internal/node/runas"
)

func ownGroup(cmd *exec.Cmd) {}

// canRunAs: no users to switch to here (New refuses a RunAs).
const canRunAs = false

func startAs(*exec.Cmd, runas.User) {}

func terminate(p *os.Process) error { return errors.ErrUnsupported }

func killGroup(p *os.Process) { p.Kill() }

func exitInfo(st *os.ProcessState) (code int, signal string) {
	if st == nil {
		return -1, ""
	}
	return st.ExitCode(), ""
}

// ownedByMe: ownership is not checked here (no uids).
func ownedByMe(fs.FileInfo) bool { return true }
