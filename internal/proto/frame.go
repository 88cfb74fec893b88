package proto

import (
	"fmt"

	json "github.com/goccy/go-json"

	"github.com/nodemgr/nodemgr/api"
)

// ProtocolError says the remote sent something this side cannot accept: a
// message that is not JSON, another protocol version, an unknown frame type,
// a frame missing a field its type needs.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "protocol error: " + e.Reason }

func protocolErrorf(format string, args ...any) *ProtocolError {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// CloseCode tells the remote why a connection ends. The values are the
// WebSocket status codes (RFC 6455, section 7.4.1), which Pipe mimics.
type CloseCode int

const (
	CloseNormal        CloseCode = 1000 // done on purpose
	CloseGoingAway     CloseCode = 1001 // shutting down
	CloseProtocolError CloseCode = 1002 // the remote broke the protocol; the reason says how
	CloseMessageTooBig CloseCode = 1009
	CloseInternalError CloseCode = 1011
	CloseTryAgainLater CloseCode = 1013
	closeNoStatusRcvd  CloseCode = 1005 // a close frame without a code
)

// CloseError is what Conn.Read returns once the remote has closed the
// connection: the code and reason it gave.
type CloseError struct {
	Code   CloseCode
	Reason string
}

func (e *CloseError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("connection closed by remote (code %d)", e.Code)
	}
	return fmt.Sprintf("connection closed by remote (code %d): %s", e.Code, e.Reason)
}

// normal reports whether the remote closed on purpose rather than because of
// an error.
func (e *CloseError) normal() bool {
	return e.Code == CloseNormal || e.Code == CloseGoingAway || e.Code == closeNoStatusRcvd
}

// decodeFrame parses one message and checks it.
func decodeFrame(b []byte) (api.Frame, error) {
	var f api.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return api.Frame{}, protocolErrorf("malformed frame: %v", err)
	}
	if err := checkFrame(f); err != nil {
		return api.Frame{}, err
	}
	return f, nil
}

// checkFrame enforces what every frame of its type must carry, so the Peer
// can trust what Conn.Read returns.
func checkFrame(f api.Frame) error {
	if f.V != api.ProtocolVersion {
		return protocolErrorf("unsupported protocol version %d, want %d", f.V, api.ProtocolVersion)
	}
	switch f.Type {
	case api.FrameRequest:
		if f.ID == 0 {
			return protocolErrorf("%s frame without id", f.Type)
		}
		if f.Method == "" {
			return protocolErrorf("%s frame without method", f.Type)
		}
	case api.FrameResponse:
		if f.ID == 0 {
			return protocolErrorf("%s frame without id", f.Type)
		}
	case api.FrameNotify:
		if f.Seq == 0 {
			return protocolErrorf("%s frame without seq", f.Type)
		}
		if f.Method == "" {
			return protocolErrorf("%s frame without method", f.Type)
		}
	case api.FrameAck:
		if f.Seq == 0 {
			return protocolErrorf("%s frame without seq", f.Type)
		}
	default:
		return protocolErrorf("unknown frame type %q", f.Type)
	}
	return nil
}
