package workerpool

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// checkCores reports the first core that this process may not run on.
func checkCores(cores []int) error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return fmt.Errorf("read this process's cpu affinity: %w", err)
	}
	var usable []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			usable = append(usable, c)
		}
	}
	for _, c := range cores {
		if c >= len(set)*64 || !set.IsSet(c) {
			return fmt.Errorf("cpu_binding: core %d is not available on this machine (usable cores: %s)", c, formatCPUs(usable))
		}
	}
	return nil
}

// startPinned starts cmd with its CPU affinity already set to cores.
//
// Setting the affinity of the child's pid after Start would pin only the
// thread whose id is that pid: a Go (or any threaded) worker has started
// other threads by then, and they would keep the agent's mask. Instead the
// mask is set on the OS thread that forks, and the child inherits it at
// clone, so every thread of the worker runs on its cores from its first
// instruction, before it can connect, let alone take a task.
func startPinned(cmd *exec.Cmd, cores []int) error {
	if len(cores) == 0 {
		return cmd.Start()
	}
	var set unix.CPUSet
	for _, c := range cores {
		set.Set(c)
	}
	errc := make(chan error, 1)
	// A goroutine of its own, so that if the thread's old mask cannot be
	// put back, the thread can be thrown away: a goroutine that exits while
	// locked to its thread takes the thread with it.
	go func() {
		runtime.LockOSThread()
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("read cpu affinity: %w", err)
			return
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("set cpu affinity to %s: %w", formatCPUs(cores), err)
			return
		}
		err := cmd.Start()
		if unix.SchedSetaffinity(0, &old) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
