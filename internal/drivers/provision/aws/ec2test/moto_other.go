//go:build !linux

package ec2test

import "syscall"

// sysProcAttr: outside Linux, StopMoto is what ends moto.
func sysProcAttr() *syscall.SysProcAttr { return nil }
