package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeFrame feeds decodeFrame what a remote could send. It must never
// panic; it refuses with a *ProtocolError or returns a frame that is valid
// and survives encoding and decoding unchanged.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"type":"req","id":7,"method":"tasks.fetch","body":{"suite_id":"s-1","max":32}}`,
		`{"v":1,"type":"resp","id":7,"body":{"tasks":[{"id":"t-1","argv":["true"],"created_at":"2025-01-02T03:04:05Z"}],"remaining":-1}}`,
		`{"v":1,"type":"resp","id":7,"error":{"code":"not_found","message":"no such suite","field":"suite_id"}}`,
		`{"v":1,"type":"notify","seq":3,"method":"node.update","body":{"tags":["gpu"]}}`,
		`{"v":1,"type":"ack","seq":3}`,
		`{"v":1,"type":"req","id":1,"method":"echo","body":"h\u00e9llo \"q\" \\ \ud83d\ude00"}`,
		` { "v" : 1 , "type" : "ack" , "seq" : 18446744073709551615 } `,
		`{"v":1,"type":"req","id":1,"method":"x","body":null}`,
		`{"V":1,"TYPE":"ack","Seq":1}`,
		`{"v":1,"type":"ack","seq":1,"seq":2}`,
		`{"v":1,"type":"ack","seq":1}` + "\xff",
		`{"v":1,"type":"req","id":1,"method":"` + "\xed\xa0\x80" + `"}`,
		`{"v":1,"type":"ack","seq":-1}`,
		`{"v":1.5,"type":"ack","seq":1}`,
		`{"\`, `{"\u`, `{"v":1,"\`, `[`, `"`, ``, `null`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		fr, err := decodeFrame(msg)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeFrame(%q) = %v, want a *ProtocolError", msg, err)
			}
			return
		}
		if fr.Body != nil && !json.Valid(fr.Body) {
			t.Fatalf("decodeFrame(%q) accepted a body that is not JSON: %q", msg, fr.Body)
		}
		if !utf8.Valid(msg) {
			t.Fatalf("decodeFrame(%q) accepted invalid UTF-8", msg)
		}
		if err := checkFrame(fr); err != nil {
			t.Fatalf("decodeFrame(%q) returned a frame checkFrame refuses: %v", msg, err)
		}
		b, err := encodeFrame(fr)
		if err != nil {
			t.Fatalf("encodeFrame(%+v) = %v", fr, err)
		}
		again, err := decodeFrame(b)
		if err != nil {
			t.Fatalf("decodeFrame(encodeFrame(decodeFrame(%q))) = %v; encoded %q", msg, err, b)
		}
		if diff := cmp.Diff(fr, again, cmp.Transformer("canonical", canonical)); diff != "" {
			t.Fatalf("frame changed on a round trip of %q (-first +again):\n%s", msg, diff)
		}
	})
}

// canonical makes JSON texts that mean the same equal: spacing, escapes
// and key order aside.
func canonical(raw json.RawMessage) string {
	if raw == nil {
		return "absent"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return "invalid JSON: " + string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "unencodable: " + err.Error()
	}
	return string(b)
}
