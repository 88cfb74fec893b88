//go:build !unix

package local

import (
	"os"
	"os/exec"
)

// ownGroup leaves the command as it is: process groups are a Unix thing,
// so cancelling kills only the command itself.
func ownGroup(c *exec.Cmd) {}

// exitCode is the exit status.
func exitCode(st *os.ProcessState) int { return st.ExitCode() }

// exitedOnItsOwn cannot tell a kill from an exit here; a command cut off
// by ctx counts as cut off.
func exitedOnItsOwn(st *os.ProcessState) bool { return false }
