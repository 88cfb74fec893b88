package proto

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
)

// Conn carries frames between two peers.
type Conn interface {
	// Read returns the next frame. It returns a *ProtocolError for a message
	// that is not JSON, a frame of another version or of an unknown type, or
	// one missing what its type needs (a request's id and method, a
	// notification's seq...), and a *CloseError once the remote has closed
	// the connection. Only one Read may run at a time.
	Read(ctx context.Context) (api.Frame, error)
	// Write sends one frame. It is safe for concurrent use.
	Write(ctx context.Context, f api.Frame) error
	// Close ends the connection, telling the remote code and reason.
	Close(code CloseCode, reason string) error
	// CloseNow ends the connection at once, without waiting for the remote
	// to answer the close: for a remote that answers nothing any more.
	CloseNow() error
	// Ping asks the remote for a sign of life and waits for it (a
	// WebSocket ping and its pong): the remote's reading answers it, so a
	// frozen remote does not, while its kernel keeps the connection open.
	// It needs a Read running meanwhile.
	Ping(ctx context.Context) error
}

// DefaultReadLimit bounds one incoming message when NewWebSocketConn is given
// no limit.
const DefaultReadLimit = 1 << 20

// maxCloseReason is the room a WebSocket close frame leaves for the reason.
const maxCloseReason = 123

// writeTimeout bounds one WebSocket write. A write that takes longer means
// the remote stopped reading; the connection is then closed.
const writeTimeout = 15 * time.Second

// NewWebSocketConn carries frames as JSON text messages on c. A message larger
// than readLimit bytes (DefaultReadLimit if readLimit <= 0) fails Read and
// closes the connection with CloseMessageTooBig.
//
// Write checks ctx before it starts, but a write under way is not cut short
// by ctx: c closes itself when a write is cancelled (half a message cannot be
// taken back), and a caller giving up on one Call must not take every other
// call on the connection down with it. Instead each write is bounded by
// writeTimeout. Close unblocks writes at once.
func NewWebSocketConn(c *websocket.Conn, readLimit int64) Conn {
	if readLimit <= 0 {
		readLimit = DefaultReadLimit
	}
	c.SetReadLimit(readLimit)
	return &wsConn{c: c}
}

type wsConn struct{ c *websocket.Conn }

func (w *wsConn) Read(ctx context.Context) (api.Frame, error) {
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return api.Frame{}, &CloseError{Code: CloseCode(ce.Code), Reason: ce.Reason}
		}
		return api.Frame{}, fmt.Errorf("read message: %w", err)
	}
	if typ != websocket.MessageText {
		return api.Frame{}, &ProtocolError{Reason: "binary message, want JSON text", Code: CloseUnsupportedData}
	}
	return decodeFrame(b)
}

func (w *wsConn) Write(ctx context.Context, f api.Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := encodeFrame(f)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if err := w.c.Write(wctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}

func (w *wsConn) Ping(ctx context.Context) error { return w.c.Ping(ctx) }

func (w *wsConn) CloseNow() error { return w.c.CloseNow() }

func (w *wsConn) Close(code CloseCode, reason string) error {
	return w.c.Close(websocket.StatusCode(code), truncate(reason, maxCloseReason))
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
