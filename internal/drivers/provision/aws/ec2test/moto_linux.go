package ec2test

import "syscall"

// sysProcAttr makes moto die with the test binary, however it ends.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
