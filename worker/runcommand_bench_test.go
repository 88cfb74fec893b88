package worker

import (
	"context"
	"os/exec"
	"testing"
)

// BenchmarkRunCommandTrue compares the command worker's way of running a
// task with a bare exec of the same program, in the same run.
func BenchmarkRunCommandTrue(b *testing.B) {
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RunCommand", func(b *testing.B) {
		for b.Loop() {
			if r := RunCommand(context.Background(), Task{Argv: []string{"true"}}); r.ExitCode != 0 || r.Err != nil {
				b.Fatal(r)
			}
		}
	})
}
