//go:build !linux

package workerpool

import (
	"errors"
	"fmt"
	"os/exec"
)

func checkCores(cores []int) error {
	if len(cores) == 0 {
		return nil
	}
	return fmt.Errorf("cpu_binding: %w on this platform", errors.ErrUnsupported)
}

func startPinned(cmd *exec.Cmd, cores []int) error {
	if len(cores) > 0 {
		return fmt.Errorf("pin worker to cores: %w", errors.ErrUnsupported)
	}
	return cmd.Start()
}
