package service

import (
	"os"
	"path/filepath"
	"testing"
)

// readLog gives a tail with the offset to follow from, then what follows,
// and starts over when a rotation truncated the log below that offset.
func TestReadLogFollows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.log")
	step := func(from, n int64, want string, wantEnd int64) {
		t.Helper()
		b, end, err := readLog(filepath.Dir(path), filepath.Base(path), from, n)
		if err != nil || string(b) != want || end != wantEnd {
			t.Errorf("readLog(from %d, n %d) = %q, %d, %v; want %q, %d", from, n, b, end, err, want, wantEnd)
		}
	}
	write := func(s string, flag int) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	step(-1, 10, "", 0) // not written yet
	write("one\ntwo\n", os.O_APPEND)
	step(-1, 4, "two\n", 8)
	step(-1, 0, "one\ntwo\n", 8) // n <= 0: all of it
	step(8, 512, "", 8)          // nothing new
	write("three\n", os.O_APPEND)
	step(8, 512, "three\n", 14)
	step(8, 2, "th", 10)       // at most n
	write("new\n", os.O_TRUNC) // rotated: copied away, truncated
	step(14, 512, "new\n", 4)
}
