package executetest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchTree makes the copy benchmarks' tree at dir/tree and returns its
// path: 200 files of 8 KiB in 10 directories, with modes, times (MTime)
// and two links.
func BenchTree(tb testing.TB, dir string) string {
	tb.Helper()
	root := filepath.Join(dir, "tree")
	body := make([]byte, 8<<10)
	for i := range 200 {
		sub := filepath.Join(root, "data", strconv.Itoa(i%10))
		if err := os.MkdirAll(sub, 0o750); err != nil {
			tb.Fatal(err)
		}
		body[0] = byte(i)
		p := filepath.Join(sub, strconv.Itoa(i))
		if err := os.WriteFile(p, body, 0o640); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chtimes(p, MTime, MTime); err != nil {
			tb.Fatal(err)
		}
	}
	for _, l := range []string{"abs-link", "rel-link"} {
		if err := os.Symlink("/etc/hostname", filepath.Join(root, l)); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// BenchTreeFiles is how many regular files BenchTree makes.
const BenchTreeFiles = 200
