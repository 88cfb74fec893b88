package workerpool

import (
	"bufio"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// A worker's stderr goes through a pipe the pool reads, so that the end of
// a dead worker's stderr can say how it died: a Go worker that faults
// exits 2 and reports the signal there (package gocrash). Each line is
// passed on to the agent's stderr as it comes. The worker gets the pipe's
// write end, an *os.File, so exec.Cmd.Wait does not wait on a copier that
// a worker's child holding the pipe could keep alive.

const (
	// stderrTailMax bounds what is kept of a worker's stderr: the Go
	// runtime's report of a fault comes first in its crash output, and a
	// traceback of one goroutine is a few KiB.
	stderrTailMax = 32 << 10
	// stderrDrainWait bounds how long the end of a worker's process waits
	// for the end of its stderr. The worker and its process group are gone
	// by then; only a child that left the group can still hold the pipe.
	stderrDrainWait = 500 * time.Millisecond
	// maxForwardLine is the longest line passed on whole; a longer one is
	// passed on in pieces.
	maxForwardLine = 64 << 10
)

// stderrTail reads one worker process's stderr.
type stderrTail struct {
	r    *os.File
	out  io.Writer
	done chan struct{} // closed at the end of the pipe

	mu   sync.Mutex
	tail []byte
}

// newStderrTail makes the pipe: w is for the worker, to be closed here
// once it has started.
func newStderrTail(out io.Writer) (t *stderrTail, w *os.File, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return &stderrTail{r: r, out: out, done: make(chan struct{})}, w, nil
}

// run passes the worker's stderr on, line by line, until the pipe ends or
// is closed.
func (t *stderrTail) run() {
	defer close(t.done)
	br := bufio.NewReaderSize(t.r, maxForwardLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			t.out.Write(line)
			t.keep(line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (t *stderrTail) keep(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(b) >= stderrTailMax {
		t.tail = append(t.tail[:0], b[len(b)-stderrTailMax:]...)
		return
	}
	if over := len(t.tail) + len(b) - stderrTailMax; over > 0 {
		t.tail = t.tail[:copy(t.tail, t.tail[over:])]
	}
	t.tail = append(t.tail, b...)
}

// finish waits up to wait for the end of the pipe, closes it (a child of
// the dead worker still writing gets EPIPE rather than holding the pool),
// and returns the tail.
func (t *stderrTail) finish(wait time.Duration) string {
	timer := time.NewTimer(wait)
	select {
	case <-t.done:
	case <-timer.C:
	}
	timer.Stop()
	t.r.Close()
	<-t.done // Close ends a Read in progress on a pipe
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.tail)
}
