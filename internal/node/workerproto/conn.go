package workerproto

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// MaxFrame bounds one frame. A report carries two 64 KiB output tails,
// which JSON escaping can inflate several times over.
const MaxFrame = 4 << 20

// ErrMalformed marks a frame that is not valid: not JSON, too long, or
// without an op. The connection is still readable, but its peer is broken.
var ErrMalformed = errors.New("malformed frame")

// writeTimeout bounds a write. Each side has at most a couple of frames
// outstanding, so a write that blocks this long means the peer stopped
// reading.
const writeTimeout = 5 * time.Second

// Conn reads and writes frames. Read must be called from one goroutine at a
// time; Write is safe for concurrent use.
type Conn struct {
	c   net.Conn
	r   *bufio.Reader
	wmu sync.Mutex
	buf []byte
}

// NewConn wraps c.
func NewConn(c net.Conn) *Conn {
	return &Conn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// Read returns the next frame. A frame that cannot be decoded yields an
// error wrapping ErrMalformed; a connection that ends yields io.EOF, or
// io.ErrUnexpectedEOF when it ends inside a frame (the peer died writing).
func (c *Conn) Read() (Frame, error) {
	line, err := c.readLine()
	if err != nil {
		return Frame{}, err
	}
	return decode(line)
}

// The JSON codec is go-json-experiment's v1 API, as on the agent's
// WebSocket (see internal/base/proto): encoding/json's semantics, several times
// faster, without goccy/go-json's reads past the end of its input, which
// panicked on the line `{"\` and took the agent down.

// decode parses one line.
func decode(line []byte) (Frame, error) {
	var f Frame
	if err := jsonv1.Unmarshal(line, &f); err != nil {
		return Frame{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if f.Op == "" {
		return Frame{}, fmt.Errorf("%w: no op", ErrMalformed)
	}
	return f, nil
}

// encode appends f and its newline to buf.
func encode(buf []byte, f Frame) ([]byte, error) {
	b, err := jsonv1.Marshal(f)
	if err != nil {
		return buf, fmt.Errorf("encode %s frame: %w", f.Op, err)
	}
	return append(append(buf, b...), '\n'), nil
}

func (c *Conn) readLine() ([]byte, error) {
	var long []byte // only for lines longer than the reader's buffer
	for {
		part, err := c.r.ReadSlice('\n')
		switch {
		case err == nil:
			if long == nil {
				return part[:len(part)-1], nil
			}
			long = append(long, part[:len(part)-1]...)
			if len(long) > MaxFrame {
				return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxFrame)
			}
			return long, nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, part...)
			if len(long) > MaxFrame {
				return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxFrame)
			}
		case errors.Is(err, io.EOF) && (len(part) > 0 || len(long) > 0):
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Write sends frames in one write, so a worker's report and its next
// fetch cost the agent one wake-up.
func (c *Conn) Write(fs ...Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.buf = c.buf[:0]
	for _, f := range fs {
		var err error
		if c.buf, err = encode(c.buf, f); err != nil {
			return err
		}
	}
	c.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.c.Write(c.buf); err != nil {
		return fmt.Errorf("write %s frame: %w", fs[0].Op, err)
	}
	return nil
}

// WriteRaw sends bytes as they are. Tests use it to play a broken peer.
func (c *Conn) WriteRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.c.Write(b)
	return err
}

// SetReadDeadline bounds the next reads, as net.Conn's does.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Close closes the connection; a blocked Read returns.
func (c *Conn) Close() error { return c.c.Close() }
