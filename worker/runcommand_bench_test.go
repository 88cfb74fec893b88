package worker

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRunCommandTrue compares the command worker's way of running a
// task with a bare exec of the same program, in the same run. cpu/op is
// the CPU of this process and of the commands it ran.
func BenchmarkRunCommandTrue(b *testing.B) {
	b.Run("exec", func(b *testing.B) {
		benchCPU(b, func() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("RunCommand", func(b *testing.B) {
		benchCPU(b, func() {
			if r := RunCommand(context.Background(), Task{Argv: []string{"true"}}); r.ExitCode != 0 || r.Err != nil {
				b.Fatal(r)
			}
		})
	})
}

func benchCPU(b *testing.B, f func()) {
	cpu0 := processCPU()
	for b.Loop() {
		f()
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time of this process and its reaped children.
func processCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		syscall.Getrusage(who, &ru)
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}
