//go:build !linux

package service

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// The supervisor recognises its services by /proc start times and watches
// adopted ones with pidfds, both Linux only. Elsewhere New fails.

func supported() error {
	return fmt.Errorf("service supervision needs Linux: %w", errors.ErrUnsupported)
}

func detach(cmd *exec.Cmd) {}

func signalGroup(pid int, sig syscall.Signal) error { return errors.ErrUnsupported }

func signalPID(pid int, sig syscall.Signal) error { return errors.ErrUnsupported }

func signalByName(name string) (syscall.Signal, error) { return 0, errors.ErrUnsupported }

func procStartTime(pid int) (uint64, error) { return 0, errors.ErrUnsupported }

func alive(pid int, start uint64) bool { return false }

func waitExit(pid int, start uint64, quit <-chan struct{}, pollEvery time.Duration) bool {
	return true
}

func groupRSS(pgids []int) map[int]uint64 { return nil }
