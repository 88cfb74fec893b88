package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodemgr/nodemgr/internal/base/tasklog"
)

// BenchmarkGzipTaskLog is what storing a 10 MB log costs the agent beyond
// its upload: compressing it (a build's log, a frame per line).
func BenchmarkGzipTaskLog(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "t.1.log")
	var frames []byte
	for i := 0; len(frames) < 10_000_000; i++ {
		line := fmt.Sprintf("cc -O2 -c src/mod%d.c -o obj/mod%d.o: warning: unused variable 'v%d' [-Wunused-variable]\n", i, i*7, i*13)
		frames = tasklog.AppendFrame(frames, tasklog.Stream(1+i%2), []byte(line))
	}
	if err := os.WriteFile(src, frames, 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frames)))
	for b.Loop() {
		if err := gzipFile(src, filepath.Join(dir, "t.1.log.gz")); err != nil {
			b.Fatal(err)
		}
	}
}
