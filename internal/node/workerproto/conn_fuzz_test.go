package workerproto

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzRead feeds a Conn what a broken or hostile worker could write. Read
// must never panic and fail only as documented; every frame it returns
// must encode to one line that decodes to the same frame.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		`{"op":"hello","hello":{"version":1,"worker_id":3,"token":"tok","pid":42}}` + "\n" +
			`{"op":"fetch","fetch":{"max":8}}` + "\n",
		`{"op":"task","task":{"task":{"id":"t-1","suite_id":"s-1","argv":["echo","hi\nthere"],"env":{"A":"1"},"timeout":"1m30s","state":"running","attempt":1,"failures":[],"created_at":"2025-01-02T03:04:05.000000006Z","updated_at":"2025-01-02T03:04:05Z"},"more":[{"id":"t-2","argv":["true"]}]}}` + "\n",
		`{"op":"task","task":{"done":true}}` + "\n",
		`{"op":"report","report":{"task_id":"t-1","attempt":1,"outcome":"succeeded","result":{"exit_code":0,"stdout":"h\u00e9llo \ud83d\ude00","duration_ms":3,"node_id":"n-1","finished_at":"2025-01-02T03:04:05+02:00"}}}` + "\n",
		`{"op":"report","report":{"task_id":"t-1","outcome":"failed","crash":true,"reason":"SIGSEGV","result":{"exit_code":-1,"signal":"SIGSEGV"}}}` + "\n",
		`{"op":"cancel","cancel":{"task_id":"t-1","reason":"timeout"}}` + "\n",
		`{"op":"fetch"}` + "\n" + `{"\` + "\n" + `{"op":"fetch"}` + "\n",
		`{"op":"fetch","op":"ack"}` + "\n",
		`{"OP":"fetch"}` + "\n",
		`{"op":"report","report":{"result":{"stdout":"` + "\xff\xfe" + `"}}}` + "\n",
		`{"op":"fetch"}`, `{"\`, "\n", "", `{"op":"task","task":{"task":{"timeout":"-5s"}}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := NewConn(&memConn{r: bytes.NewReader(stream)})
		for {
			fr, err := c.Read()
			switch {
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				return
			case errors.Is(err, ErrMalformed):
				continue // the connection stays readable
			case err != nil:
				t.Fatalf("Read = %v, want a frame, ErrMalformed or an EOF", err)
			}
			line, err := encode(nil, fr)
			if err != nil {
				t.Fatalf("encode(%+v) = %v", fr, err)
			}
			if bytes.IndexByte(line, '\n') != len(line)-1 {
				t.Fatalf("encode(%+v) = %q: the frame must be one line", fr, line)
			}
			again, err := decode(line[:len(line)-1])
			if err != nil {
				t.Fatalf("decode(encode(%+v)) = %v; line %q", fr, err, line)
			}
			if diff := cmp.Diff(fr, again, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("frame changed on a round trip through %q (-first +again):\n%s", line, diff)
			}
		}
	})
}

// memConn is a net.Conn that reads from r and discards writes.
type memConn struct {
	net.Conn
	r io.Reader
}

func (m *memConn) Read(b []byte) (int, error)  { return m.r.Read(b) }
func (m *memConn) Write(b []byte) (int, error) { return len(b), nil }
func (m *memConn) Close() error                { return nil }
