package worker

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/tasklog"
	"github.com/nodemgr/nodemgr/internal/node/proctree"
)

// BenchmarkRunCommandTrue compares the command worker's way of running a
// task with a bare exec of the same program, in the same run: RunCommand
// as it runs tasks here (its process tree tracked as proctree's Auto mode
// chooses), RunCommand/none without a tree (as before trees were), and
// RunCommand/MODE in each of proctree's modes this machine has. cpu/op is
// the CPU of this process and of the commands it ran.
func BenchmarkRunCommandTrue(b *testing.B) {
	b.Run("exec", func(b *testing.B) {
		benchCPU(b, func() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		})
	})
	runTrue := func(b *testing.B) {
		benchCPU(b, func() {
			if r := RunCommand(context.Background(), Task{Argv: []string{"true"}}); r.ExitCode != 0 || r.Err != nil {
				b.Fatal(r)
			}
		})
	}
	b.Run("RunCommand", runTrue)
	// Walk last: it makes this process a child subreaper for good.
	for _, mode := range []proctree.Mode{"none", proctree.Cgroup2, proctree.Cgroup1, proctree.Walk} {
		b.Run("RunCommand/"+string(mode), func(b *testing.B) {
			useTrees(b, mode)
			runTrue(b)
		})
	}
}

// useTrees makes RunCommand track tasks in mode ("none": not at all) until
// the benchmark ends.
func useTrees(b *testing.B, mode proctree.Mode) {
	closeTrees()
	b.Cleanup(func() {
		closeTrees()
		treesOff = false
	})
	if mode == "none" {
		treesOff = true
		return
	}
	m, err := proctree.New(proctree.Options{Mode: mode})
	if err != nil {
		b.Skipf("no %s here: %v", mode, err)
	}
	trees.Lock()
	trees.m = m
	trees.Unlock()
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

// BenchmarkRunCommandOutput is what keeping a task's whole output costs:
// the same command with full logs off (tails only) and on, in the same
// run, for a task that prints a line and one that prints 10 MB.
func BenchmarkRunCommandOutput(b *testing.B) {
	for _, tc := range []struct{ name, script string }{
		{"line", "echo built x.o"},
		{"10MB", "head -c 10000000 /dev/zero | tr '\\0' 'x' | fold -w 99"},
	} {
		for _, logs := range []bool{false, true} {
			name := tc.name + "/tails"
			if logs {
				name = tc.name + "/whole"
			}
			b.Run(name, func(b *testing.B) {
				dir := b.TempDir()
				old := fullLogs
				if logs {
					fullLogs = logSettings{dir: dir, max: tasklog.DefaultMax}
				}
				b.Cleanup(func() { fullLogs = old })
				n := 0
				benchCPU(b, func() {
					n++
					r := RunCommand(context.Background(), Task{ID: "t" + strconv.Itoa(n), Attempt: 1, Argv: []string{"sh", "-c", tc.script}})
					if r.ExitCode != 0 || r.Err != nil {
						b.Fatal(r)
					}
					os.Remove(tasklog.Path(dir, "t"+strconv.Itoa(n), 1))
				})
			})
		}
	}
}
