package proto

import (
	"errors"
	"strings"
	"testing"
)

// The JSON decoder must survive any sequence of messages. go-json v0.10.5
// panicked (index out of range) on `{"\` once it had decoded a longer frame
// before: it read past the message into bytes left from the earlier one.
func TestDecodeFrameTruncatedEscapeAfterFrames(t *testing.T) {
	earlier := []string{
		`{"v":1,"type":"req","id":1234567,"method":"tasks.fetch","body":{"suite_id":"s-1","max":32}}`,
		`{"v":1,"type":"ack","seq":3}`,
		`[1,2,3,4,5,6,7,8,9,10]`,
	}
	for _, prev := range earlier {
		for _, msg := range []string{`{"\`, `{"\u`, `{"v":1,"\`, `{"method":"\`} {
			decodeFrame([]byte(prev))
			_, err := decodeFrame([]byte(msg))
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(pe.Reason, "malformed frame") {
				t.Errorf("decodeFrame(%q) after %q = %v, want a malformed frame ProtocolError", msg, prev, err)
			}
		}
	}
}
