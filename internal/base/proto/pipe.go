package proto

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/nodemgr/nodemgr/api"
)

// Pipe returns two connected in-memory Conns, for tests. Frames travel
// encoded, as they would on a WebSocket, so both ends see exactly what the
// wire would carry, and the reading end checks them the same way. A Write
// returns once the other end has read the frame (or the pipe is closed or ctx
// is done). Closing either end closes both; the other end's Read then returns
// a *CloseError with the code and reason given.
func Pipe() (Conn, Conn) {
	s := &pipeState{done: make(chan struct{})}
	ab := make(chan []byte)
	ba := make(chan []byte)
	return &pipeConn{s: s, in: ba, out: ab, side: 0}, &pipeConn{s: s, in: ab, out: ba, side: 1}
}

type pipeState struct {
	once   sync.Once
	done   chan struct{}
	closer int // which side closed; valid once done is closed
	code   CloseCode
	reason string
}

type pipeConn struct {
	s    *pipeState
	in   <-chan []byte
	out  chan<- []byte
	side int
}

func (p *pipeConn) Read(ctx context.Context) (api.Frame, error) {
	for {
		select {
		case b := <-p.in:
			if b == nil {
				continue // a ping: reading it was the answer
			}
			return decodeFrame(b)
		case <-p.s.done:
			return api.Frame{}, p.closedErr()
		case <-ctx.Done():
			return api.Frame{}, ctx.Err()
		}
	}
}

// Ping returns once the other end has read a ping: a pipe's writes wait
// for the reader, as a WebSocket's pong waits for the remote's reading.
func (p *pipeConn) Ping(ctx context.Context) error { return p.writeRaw(ctx, nil) }

func (p *pipeConn) Write(ctx context.Context, f api.Frame) error {
	b, err := encodeFrame(f)
	if err != nil {
		return err
	}
	return p.writeRaw(ctx, b)
}

// writeRaw sends b as one message, valid frame or not (tests use it to send
// garbage).
func (p *pipeConn) writeRaw(ctx context.Context, b []byte) error {
	select {
	case <-p.s.done:
		return fmt.Errorf("write message: %w", net.ErrClosed)
	default:
	}
	select {
	case p.out <- b:
		return nil
	case <-p.s.done:
		return fmt.Errorf("write message: %w", net.ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CloseNow closes the pipe as Close does: a pipe never waits.
func (p *pipeConn) CloseNow() error { return p.Close(CloseGoingAway, "") }

func (p *pipeConn) Close(code CloseCode, reason string) error {
	p.s.once.Do(func() {
		p.s.closer, p.s.code, p.s.reason = p.side, code, reason
		close(p.s.done)
	})
	return nil
}

func (p *pipeConn) closedErr() error {
	if p.s.closer == p.side {
		return fmt.Errorf("read message: %w", net.ErrClosed)
	}
	return &CloseError{Code: p.s.code, Reason: p.s.reason}
}
