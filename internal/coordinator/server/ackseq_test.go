package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
)

// TestAckSeqOutOfRange is the audit's ack seq ≥ 2^63 on the agent
// WebSocket, which logged an ERROR from the store: seqs are signed 64-bit
// integers there, so such an ack closes the connection with a protocol
// error, and a hello claiming such a last seq is refused naming last_seq.
func TestAckSeqOutOfRange(t *testing.T) {
	ts := newTestServer(t)
	_, cred := ts.nodeNamed(t, "n1")
	dial := func(t *testing.T) (*websocket.Conn, context.Context) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		t.Cleanup(cancel)
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.http.URL, "http")+"/v1/agent/connect",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c, ctx
	}
	send := func(t *testing.T, ctx context.Context, c *websocket.Conn, frame string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}

	for _, seq := range []string{"9223372036854775808", "18446744073709551615"} {
		t.Run("ack "+seq, func(t *testing.T) {
			c, ctx := dial(t)
			send(t, ctx, c, `{"v":1,"type":"ack","seq":`+seq+`}`)
			for {
				_, _, err := c.Read(ctx)
				if err == nil {
					continue
				}
				if websocket.CloseStatus(err) != websocket.StatusProtocolError {
					t.Errorf("after ack seq %s: read = %v, want the server to close with a protocol error", seq, err)
				}
				if !strings.Contains(err.Error(), "above the highest seq") {
					t.Errorf("after ack seq %s: close reason %v does not say why", seq, err)
				}
				return
			}
		})
	}

	t.Run("hello last_seq 2^63", func(t *testing.T) {
		c, ctx := dial(t)
		send(t, ctx, c, `{"v":1,"type":"req","id":1,"method":"`+api.MethodHello+`","body":{"name":"n1","state":"Idle","hardware":{"cores":1},"last_seq":9223372036854775808}}`)
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			var f api.Frame
			json.Unmarshal(b, &f)
			if f.Type != api.FrameResponse {
				continue
			}
			if f.Error == nil || f.Error.Code != "invalid" || !strings.Contains(f.Error.Message, "last_seq") {
				t.Errorf("hello with last_seq 2^63 = %+v, want invalid naming last_seq", f.Error)
			}
			return
		}
	})
}
