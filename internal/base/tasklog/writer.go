package tasklog

import (
	"os"
	"strconv"
)

// DefaultMax is the output kept per attempt when no setting says otherwise.
const DefaultMax = 64 << 20

// Writer writes an attempt's log. It holds the output in memory until
// either stream has outgrown the tail a result keeps, or Open is called
// (the task has run a while and may be followed); until then a task with
// a little output costs no file. Past max bytes of output it writes a
// notice and drops the rest. A Writer is used by one goroutine.
type Writer struct {
	path    string
	max     int64
	tail    int64
	f       *os.File
	pending []byte // frames not written yet (no file yet)
	scratch []byte
	total   [3]int64 // payload bytes seen per stream
	kept    int64    // payload bytes kept
	cut     bool     // the cap was reached
	failed  bool     // the file could not be written: keep nothing more
}

// NewWriter returns a Writer of the log at path (nil for "": no log, which
// every method accepts) that keeps at most max bytes of output and holds
// it in memory while each stream stays within tail bytes.
func NewWriter(path string, max, tail int64) *Writer {
	if path == "" || max <= 0 {
		return nil
	}
	return &Writer{path: path, max: max, tail: tail}
}

// Write adds p, read from stream s.
func (w *Writer) Write(s Stream, p []byte) {
	if w == nil || w.failed || len(p) == 0 {
		return
	}
	if s == Stdout || s == Stderr {
		w.total[s] += int64(len(p))
	}
	if w.cut {
		return
	}
	if left := w.max - w.kept; int64(len(p)) > left {
		w.add(s, p[:left])
		w.add(Stderr, []byte("\n[nodemgr: output beyond "+strconv.FormatInt(w.max, 10)+" bytes was not kept; the result holds the last 64 KiB of each stream]\n"))
		w.cut = true
		w.Open()
		return
	}
	w.add(s, p)
	if w.f == nil && (w.total[Stdout] > w.tail || w.total[Stderr] > w.tail) {
		w.Open()
	}
}

func (w *Writer) add(s Stream, p []byte) {
	if len(p) == 0 {
		return
	}
	if s == Stdout || s == Stderr {
		w.kept += int64(len(p))
	}
	if w.f == nil {
		w.pending = AppendFrame(w.pending, s, p)
		return
	}
	w.scratch = AppendFrame(w.scratch[:0], s, p)
	w.write(w.scratch)
}

func (w *Writer) write(b []byte) {
	if _, err := w.f.Write(b); err != nil {
		w.failed = true
	}
}

// Pending says output waits in memory for a file.
func (w *Writer) Pending() bool { return w != nil && w.f == nil && len(w.pending) > 0 && !w.failed }

// Open makes the file now and writes what is pending, so that the output
// can be followed from here on.
func (w *Writer) Open() {
	if w == nil || w.f != nil || w.failed {
		return
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		w.failed = true
		return
	}
	w.f = f
	if len(w.pending) > 0 {
		w.write(w.pending)
	}
	w.pending = nil
}

// Close ends the log. Output still pending (a short task within the
// tails) is dropped: the result holds all of it.
func (w *Writer) Close() error {
	if w == nil || w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}
