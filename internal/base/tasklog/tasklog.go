// Package tasklog is the full output of a task attempt: stdout and stderr
// in the order they came, as frames in one file.
//
// A result keeps only the last 64 KiB of each stream. The worker that runs
// a task also writes what it prints to <log dir>/<task>.<attempt>.log
// once the output outgrows those tails or the task has run a while (so
// that a short task with a little output costs no file), the agent serves
// that file to followers while the attempt runs and uploads it, gzipped,
// to the blob store when it ends. The server reads it back from there.
//
// A frame is Docker's multiplexed stream format: an 8-byte header (the
// stream, three zero bytes, the payload's length as a big-endian uint32)
// and the payload. Offsets into a log are those of the file, always at a
// frame's start, so a reader that follows the file while it grows and one
// that reads the stored copy later agree on them.
package tasklog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stream is the stream a frame's payload came from.
type Stream byte

// The streams.
const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "stream " + strconv.Itoa(int(s))
}

// HeaderSize is the size of a frame's header.
const HeaderSize = 8

// maxFrame bounds a frame's payload when reading: a writer never writes
// more than a pipe read (or a cut of a handler's output) in one frame, so
// a larger length is a damaged log.
const maxFrame = 16 << 20

// Path is where the log of a task's attempt lives in dir; "" when the
// task's ID cannot name a file (it never happens with the server's IDs).
func Path(dir, taskID string, attempt int) string {
	if dir == "" || taskID == "" || strings.ContainsAny(taskID, `/\`) || strings.HasPrefix(taskID, ".") {
		return ""
	}
	return filepath.Join(dir, taskID+"."+strconv.Itoa(attempt)+".log")
}

// AppendFrame appends one frame holding p to b.
func AppendFrame(b []byte, s Stream, p []byte) []byte {
	b = append(b, byte(s), 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// ErrDamaged says a log's frames do not parse.
var ErrDamaged = errors.New("task log damaged")

// ReadFrames reads whole frames from r, which is at a frame's start, until
// they hold at least max bytes (headers included) or r ends, and returns
// them as they are. A frame cut short by the end of r (its writer is
// still at it) is left out: the next read starts at it.
func ReadFrames(r io.Reader, max int64) ([]byte, error) {
	var out []byte
	var h [HeaderSize]byte
	for int64(len(out)) < max {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return out, nil
			}
			return out, err
		}
		n := binary.BigEndian.Uint32(h[4:])
		if (h[0] != byte(Stdout) && h[0] != byte(Stderr)) || h[1]|h[2]|h[3] != 0 || n > maxFrame {
			return out, fmt.Errorf("%w: bad frame header at byte %d of the piece", ErrDamaged, len(out))
		}
		start := len(out)
		out = append(out, h[:]...)
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(r, out[start+HeaderSize:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return out[:start], nil
			}
			return out[:start], err
		}
	}
	return out, nil
}

// Frames calls f with each frame's stream and payload in b, which holds
// whole frames (as ReadFrames returns them).
func Frames(b []byte, f func(s Stream, p []byte)) error {
	for len(b) > 0 {
		if len(b) < HeaderSize {
			return fmt.Errorf("%w: a piece ends inside a frame header", ErrDamaged)
		}
		n := int(binary.BigEndian.Uint32(b[4:HeaderSize]))
		if len(b) < HeaderSize+n {
			return fmt.Errorf("%w: a piece ends inside a frame", ErrDamaged)
		}
		f(Stream(b[0]), b[HeaderSize:HeaderSize+n])
		b = b[HeaderSize+n:]
	}
	return nil
}

// Text is the payloads of the frames in b from the streams that want
// takes (nil: all), in order.
func Text(b []byte, want func(Stream) bool) ([]byte, error) {
	out := make([]byte, 0, len(b))
	err := Frames(b, func(s Stream, p []byte) {
		if want == nil || want(s) {
			out = append(out, p...)
		}
	})
	return out, err
}

// Totals counts the payload bytes of each stream in the log at path,
// reading only the headers.
func Totals(path string) (stdout, stderr int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var h [HeaderSize]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return stdout, stderr, nil
			}
			return stdout, stderr, err
		}
		n := int64(binary.BigEndian.Uint32(h[4:]))
		switch Stream(h[0]) {
		case Stdout:
			stdout += n
		case Stderr:
			stderr += n
		}
		if _, err := r.Discard(int(n)); err != nil {
			return stdout, stderr, nil // cut short: its writer died
		}
	}
}
