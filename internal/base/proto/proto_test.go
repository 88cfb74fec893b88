package proto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// deadline bounds every wait in these tests; nothing should come near it.
const deadline = 10 * time.Second

// A network hands out connected Conns over one transport.
type network interface {
	// pair returns the two ends of one connection.
	pair(t testing.TB) (Conn, Conn)
	// rawPair returns one end as a Conn and the other as a raw end that can
	// send messages that are not valid frames.
	rawPair(t testing.TB) (Conn, rawEnd)
}

type rawEnd struct {
	Conn
	// send sends b as one text (or binary) message.
	send func(ctx context.Context, binary bool, b []byte) error
}

type transport struct {
	name string
	open func(t testing.TB) network
}

var transports = []transport{
	{"pipe", func(testing.TB) network { return pipeNet{} }},
	{"websocket", func(t testing.TB) network { return newWSNet(t, 0) }},
}

type pipeNet struct{}

func (pipeNet) pair(t testing.TB) (Conn, Conn) {
	a, b := Pipe()
	t.Cleanup(func() { a.Close(CloseNormal, "") })
	return a, b
}

func (pipeNet) rawPair(t testing.TB) (Conn, rawEnd) {
	a, b := Pipe()
	t.Cleanup(func() { a.Close(CloseNormal, "") })
	raw := b.(*pipeConn)
	return a, rawEnd{Conn: raw, send: func(ctx context.Context, binary bool, b []byte) error {
		if binary {
			return errors.ErrUnsupported // a pipe has no message types
		}
		return raw.writeRaw(ctx, b)
	}}
}

// wsNet is one httptest server; every pair is a new WebSocket to it.
type wsNet struct {
	url       string
	readLimit int64
	accepted  chan *websocket.Conn
}

func newWSNet(t testing.TB, readLimit int64) *wsNet {
	n := &wsNet{readLimit: readLimit, accepted: make(chan *websocket.Conn)}
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		select {
		case n.accepted <- c:
		case <-done:
			c.CloseNow()
			return
		}
		// Keep the handler, and so the connection, alive for the test.
		<-done
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	n.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return n
}

func (n *wsNet) dial(t testing.TB) (server, client *websocket.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	client, _, err := websocket.Dial(ctx, n.url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	select {
	case server = <-n.accepted:
	case <-ctx.Done():
		t.Fatalf("no connection accepted")
	}
	t.Cleanup(func() { client.CloseNow(); server.CloseNow() })
	return server, client
}

func (n *wsNet) pair(t testing.TB) (Conn, Conn) {
	s, c := n.dial(t)
	return NewWebSocketConn(s, n.readLimit), NewWebSocketConn(c, n.readLimit)
}

func (n *wsNet) rawPair(t testing.TB) (Conn, rawEnd) {
	s, c := n.dial(t)
	return NewWebSocketConn(s, n.readLimit), rawEnd{Conn: NewWebSocketConn(c, 0), send: func(ctx context.Context, binary bool, b []byte) error {
		typ := websocket.MessageText
		if binary {
			typ = websocket.MessageBinary
		}
		return c.Write(ctx, typ, b)
	}}
}

// running is a Peer whose Run is under way.
type running struct {
	*Peer
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start runs a Peer on c until the test ends.
func start(t testing.TB, c Conn, h Handler, o Options) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Peer: NewPeer(c, h, o), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		r.wait(t)
	})
	return r
}

// wait returns what Run returned.
func (r *running) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(deadline):
		t.Fatalf("Run did not return")
		return nil
	}
}

// handler is a Handler made of funcs; a nil func knows no methods.
type handler struct {
	req    func(ctx context.Context, method string, body json.RawMessage) (any, error)
	notify func(ctx context.Context, seq uint64, method string, body json.RawMessage) error
}

func (h *handler) HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error) {
	if h.req == nil {
		return nil, UnknownMethod(method)
	}
	return h.req(ctx, method, body)
}

func (h *handler) HandleNotify(ctx context.Context, seq uint64, method string, body json.RawMessage) error {
	if h.notify == nil {
		return UnknownMethod(method)
	}
	return h.notify(ctx, seq, method, body)
}

// echo answers "echo" with its body.
var echo = &handler{req: func(_ context.Context, method string, body json.RawMessage) (any, error) {
	if method != "echo" {
		return nil, UnknownMethod(method)
	}
	return body, nil
}}

func forEachTransport(t *testing.T, f func(t *testing.T, n network)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.open(t)) })
	}
}

func TestCallMultiplexing(t *testing.T) {
	const calls = 50
	tests := []struct {
		name string
		// gated: every handler waits until all have started, then the
		// test releases them last to first, so responses come back in
		// reverse. Otherwise handlers sleep less the later they were
		// called.
		gated bool
	}{
		{name: "reverse order", gated: true},
		{name: "sleeps"},
	}
	forEachTransport(t, func(t *testing.T, n network) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				var (
					started = make(chan int, calls)
					release [calls]chan struct{}
				)
				for i := range release {
					release[i] = make(chan struct{})
				}
				h := &handler{req: func(ctx context.Context, _ string, body json.RawMessage) (any, error) {
					var i int
					if err := json.Unmarshal(body, &i); err != nil {
						return nil, err
					}
					if !tc.gated {
						time.Sleep(time.Duration(calls-i) * time.Millisecond)
						return i * 10, nil
					}
					started <- i
					select {
					case <-release[i]:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					return i * 10, nil
				}}
				a, b := n.pair(t)
				client := start(t, a, nil, Options{})
				start(t, b, h, Options{})

				type result struct {
					got int
					err error
				}
				var results [calls]chan result
				for i := range calls {
					results[i] = make(chan result, 1)
					go func() {
						var got int
						err := client.Call(context.Background(), "work", i, &got)
						results[i] <- result{got, err}
					}()
				}
				if tc.gated {
					for range calls {
						select {
						case <-started:
						case <-time.After(deadline):
							t.Fatalf("handlers did not all start; requests are not served concurrently")
						}
					}
				}
				for i := calls - 1; i >= 0; i-- {
					if tc.gated {
						close(release[i])
					}
					select {
					case r := <-results[i]:
						if r.err != nil || r.got != i*10 {
							t.Errorf("Call(work, %d) = %d, %v, want %d, nil", i, r.got, r.err, i*10)
						}
					case <-time.After(deadline):
						t.Fatalf("Call(work, %d) did not return", i)
					}
				}
			})
		}
	})
}

func TestMaxConcurrent(t *testing.T) {
	const limit, calls = 2, 6
	forEachTransport(t, func(t *testing.T, n network) {
		var (
			mu        sync.Mutex
			inflight  int
			most      int
			started   = make(chan struct{}, calls)
			releaseCh = make(chan struct{})
		)
		h := &handler{req: func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
			mu.Lock()
			inflight++
			most = max(most, inflight)
			mu.Unlock()
			started <- struct{}{}
			<-releaseCh
			mu.Lock()
			inflight--
			mu.Unlock()
			return nil, nil
		}}
		a, b := n.pair(t)
		client := start(t, a, nil, Options{})
		start(t, b, h, Options{MaxConcurrent: limit})

		errs := make(chan error, calls)
		for range calls {
			go func() { errs <- client.Call(context.Background(), "work", nil, nil) }()
		}
		for range limit {
			<-started
		}
		select {
		case <-started:
			t.Fatalf("a request beyond MaxConcurrent=%d started", limit)
		case <-time.After(50 * time.Millisecond):
		}
		close(releaseCh)
		for range calls {
			if err := <-errs; err != nil {
				t.Errorf("Call(work) = %v", err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if most != limit {
			t.Errorf("at most %d handlers ran at once, want %d", most, limit)
		}
	})
}

func TestRemoteErrors(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		err     error // what the remote handler returns
		want    error // the class the caller sees; nil: none
		wantMsg string
	}{
		{name: "not found", err: errdefs.NotFound("node %s", "n1"), want: errdefs.ErrNotFound, wantMsg: "node n1"},
		{name: "conflict", err: errdefs.Conflict("task claimed"), want: errdefs.ErrConflict, wantMsg: "task claimed"},
		{name: "field", err: errdefs.Field("labels.zone", "empty"), want: errdefs.ErrInvalid, wantMsg: "labels.zone"},
		{name: "unavailable", err: fmt.Errorf("store: %w", errdefs.ErrUnavailable), want: errdefs.ErrUnavailable},
		{name: "permission", err: fmt.Errorf("renew: %w", errdefs.ErrPermission), want: errdefs.ErrPermission},
		{name: "unauthenticated", err: fmt.Errorf("hello: %w", errdefs.ErrUnauthenticated), want: errdefs.ErrUnauthenticated},
		{name: "internal", err: errors.New("disk on fire"), wantMsg: "disk on fire"},
		{name: "unknown method", method: "no.such.method", want: errdefs.ErrNotFound, wantMsg: "no.such.method"},
	}
	forEachTransport(t, func(t *testing.T, n network) {
		h := &handler{req: func(_ context.Context, method string, body json.RawMessage) (any, error) {
			if method != "fail" {
				return nil, UnknownMethod(method)
			}
			var name string
			json.Unmarshal(body, &name)
			for _, tc := range tests {
				if tc.name == name {
					return nil, tc.err
				}
			}
			return nil, nil
		}}
		a, b := n.pair(t)
		client := start(t, a, nil, Options{})
		start(t, b, h, Options{})
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				method := tc.method
				if method == "" {
					method = "fail"
				}
				err := client.Call(context.Background(), method, tc.name, nil)
				var re *errdefs.RemoteError
				if !errors.As(err, &re) {
					t.Fatalf("Call(%s, %q) = %v, want a RemoteError", method, tc.name, err)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("Call(%s, %q) = %v, want class %v", method, tc.name, err, tc.want)
				}
				if tc.want == nil && errdefs.Code(err) != "internal" {
					t.Errorf("Call(%s, %q) code = %q, want internal", method, tc.name, errdefs.Code(err))
				}
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("Call(%s, %q) = %q, want it to mention %q", method, tc.name, err, tc.wantMsg)
				}
			})
		}
	})
}

func TestCallCancelled(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n network) {
		started, release := make(chan struct{}), make(chan struct{})
		h := &handler{req: func(_ context.Context, method string, body json.RawMessage) (any, error) {
			if method == "echo" {
				return body, nil
			}
			close(started)
			<-release
			return "late", nil
		}}
		a, b := n.pair(t)
		client := start(t, a, nil, Options{})
		start(t, b, h, Options{})

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- client.Call(ctx, "slow", nil, nil) }()
		<-started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Call(slow) = %v, want context.Canceled", err)
		}
		close(release) // the late answer must be dropped quietly

		var got string
		if err := client.Call(context.Background(), "echo", "again", &got); err != nil || got != "again" {
			t.Errorf("Call(echo) after a cancelled call = %q, %v, want %q, nil", got, err, "again")
		}
	})
}

func TestCallAfterStop(t *testing.T) {
	tests := []struct {
		name string
		stop func(t *testing.T, client, server *running)
	}{
		{"local run cancelled", func(t *testing.T, client, _ *running) {
			client.cancel()
			if err := client.wait(t); err != nil {
				t.Errorf("Run after cancel = %v, want nil", err)
			}
		}},
		{"local close", func(t *testing.T, client, _ *running) {
			if err := client.Close("bye"); err != nil {
				t.Errorf("Close = %v", err)
			}
			if err := client.wait(t); err != nil {
				t.Errorf("Run after Close = %v, want nil", err)
			}
		}},
		{"remote close", func(t *testing.T, client, server *running) {
			server.Close("bye")
			if err := client.wait(t); err != nil {
				t.Errorf("Run after remote Close = %v, want nil", err)
			}
		}},
	}
	forEachTransport(t, func(t *testing.T, n network) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				started := make(chan struct{})
				h := &handler{req: func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
					close(started)
					<-ctx.Done()
					return nil, ctx.Err()
				}}
				a, b := n.pair(t)
				client := start(t, a, nil, Options{})
				server := start(t, b, h, Options{})

				pending := make(chan error, 1)
				go func() { pending <- client.Call(context.Background(), "hang", nil, nil) }()
				<-started
				tc.stop(t, client, server)

				if err := <-pending; !errors.Is(err, errdefs.ErrUnavailable) {
					t.Errorf("pending Call = %v, want ErrUnavailable", err)
				}
				if err := client.Call(context.Background(), "echo", nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
					t.Errorf("Call after stop = %v, want ErrUnavailable", err)
				}
				if err := client.Notify(context.Background(), 1, "x", nil); !errors.Is(err, errdefs.ErrUnavailable) {
					t.Errorf("Notify after stop = %v, want ErrUnavailable", err)
				}
			})
		}
	})
}

func TestNotifications(t *testing.T) {
	tests := []struct {
		name        string
		lastSeq     uint64          // the receiver's Options.LastSeq
		send        []uint64        // seqs sent, in order; the last must succeed
		fail        map[uint64]bool // seqs whose first handling fails
		wantHandled []uint64        // seqs the handler sees, in order
		wantAcks    []uint64
		wantLastSeq uint64
	}{
		{
			name:        "in order",
			send:        []uint64{1, 2, 3, 4, 5},
			wantHandled: []uint64{1, 2, 3, 4, 5},
			wantAcks:    []uint64{1, 2, 3, 4, 5},
			wantLastSeq: 5,
		},
		{
			name:        "replay after reconnect",
			lastSeq:     5,
			send:        []uint64{4, 5, 6},
			wantHandled: []uint64{6},
			wantAcks:    []uint64{4, 5, 6},
			wantLastSeq: 6,
		},
		{
			// 2 fails: it is not acked, and 3 is held back so that no ack
			// covers 2, until 2 comes again and succeeds.
			name:        "handler error",
			send:        []uint64{1, 2, 3, 2, 3},
			fail:        map[uint64]bool{2: true},
			wantHandled: []uint64{1, 2, 2, 3},
			wantAcks:    []uint64{1, 2, 3},
			wantLastSeq: 3,
		},
		{
			name:        "gaps in seqs",
			lastSeq:     10,
			send:        []uint64{12, 15, 15, 20},
			wantHandled: []uint64{12, 15, 20},
			wantAcks:    []uint64{12, 15, 15, 20},
			wantLastSeq: 20,
		},
	}
	forEachTransport(t, func(t *testing.T, n network) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				var (
					mu      sync.Mutex
					handled []uint64
					acks    []uint64
					failed  = map[uint64]bool{}
					last    = tc.send[len(tc.send)-1]
					allDone = make(chan struct{})
				)
				h := &handler{notify: func(_ context.Context, seq uint64, method string, body json.RawMessage) error {
					if method != api.NotifyUpdate || string(body) != fmt.Sprintf(`{"n":%d}`, seq) {
						t.Errorf("HandleNotify(%d, %s, %s): wrong method or body", seq, method, body)
					}
					mu.Lock()
					defer mu.Unlock()
					handled = append(handled, seq)
					if tc.fail[seq] && !failed[seq] {
						failed[seq] = true
						return fmt.Errorf("apply update %d: disk full", seq)
					}
					return nil
				}}
				onAck := func(seq uint64) {
					mu.Lock()
					defer mu.Unlock()
					acks = append(acks, seq)
					if seq == last && len(acks) == len(tc.wantAcks) {
						close(allDone)
					}
				}
				a, b := n.pair(t)
				server := start(t, a, nil, Options{OnAck: onAck})
				agent := start(t, b, h, Options{LastSeq: tc.lastSeq})

				for _, seq := range tc.send {
					body := json.RawMessage(fmt.Sprintf(`{"n":%d}`, seq))
					if err := server.Notify(context.Background(), seq, api.NotifyUpdate, body); err != nil {
						t.Fatalf("Notify(%d) = %v", seq, err)
					}
				}
				select {
				case <-allDone:
				case <-time.After(deadline):
					mu.Lock()
					t.Fatalf("acks = %v after %v, want %v", acks, deadline, tc.wantAcks)
				}
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tc.wantHandled, handled); diff != "" {
					t.Errorf("handled seqs (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantAcks, acks); diff != "" {
					t.Errorf("acked seqs (-want +got):\n%s", diff)
				}
				if got := agent.LastSeq(); got != tc.wantLastSeq {
					t.Errorf("LastSeq() = %d, want %d", got, tc.wantLastSeq)
				}
			})
		}
	})
}

// A notification handler may call back over the same peer: notifications
// must not hold up the read loop.
func TestNotifyHandlerCalls(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n network) {
		a, b := n.pair(t)
		acked := make(chan uint64, 1)
		server := start(t, a, echo, Options{OnAck: func(seq uint64) { acked <- seq }})
		var agent *running
		h := &handler{notify: func(ctx context.Context, seq uint64, _ string, _ json.RawMessage) error {
			var got string
			return agent.Call(ctx, "echo", "from handler", &got)
		}}
		agent = start(t, b, h, Options{})
		if err := server.Notify(context.Background(), 1, "x", nil); err != nil {
			t.Fatalf("Notify = %v", err)
		}
		select {
		case seq := <-acked:
			if seq != 1 {
				t.Errorf("ack %d, want 1", seq)
			}
		case <-time.After(deadline):
			t.Fatalf("notification whose handler calls back was never acked")
		}
	})
}

func TestBadFrames(t *testing.T) {
	tests := []struct {
		name       string
		binary     bool
		msg        string
		wantReason string
		wantCode   CloseCode // 0: CloseProtocolError
	}{
		{name: "malformed json", msg: `{"v":1,"type":`, wantReason: "malformed frame"},
		{name: "not an object", msg: `[1,2]`, wantReason: "malformed frame"},
		{name: "wrong version", msg: `{"v":2,"type":"req","id":1,"method":"echo"}`, wantReason: "version 2"},
		{name: "no version", msg: `{"type":"req","id":1,"method":"echo"}`, wantReason: "version 0"},
		{name: "unknown type", msg: `{"v":1,"type":"shout"}`, wantReason: `unknown frame type "shout"`},
		{name: "request without method", msg: `{"v":1,"type":"req","id":1}`, wantReason: "without method"},
		{name: "request id 0", msg: `{"v":1,"type":"req","method":"echo"}`, wantReason: "without id"},
		{name: "notify without seq", msg: `{"v":1,"type":"notify","method":"x"}`, wantReason: "without seq"},
		// Seqs are kept as signed 64-bit integers: 2^63 is not a store error
		// on this side but a protocol error (the audit saw an ERROR logged).
		{name: "ack seq 2^63", msg: `{"v":1,"type":"ack","seq":9223372036854775808}`, wantReason: "above the highest seq"},
		{name: "ack seq 2^64-1", msg: `{"v":1,"type":"ack","seq":18446744073709551615}`, wantReason: "above the highest seq"},
		{name: "notify seq 2^63", msg: `{"v":1,"type":"notify","seq":9223372036854775808,"method":"x"}`, wantReason: "above the highest seq"},
		{name: "binary message", binary: true, msg: `{"v":1,"type":"ack","seq":1}`, wantReason: "binary", wantCode: CloseUnsupportedData},
		// RFC 6455 section 8.1: a text message must be UTF-8.
		{name: "invalid utf-8 in a string", msg: `{"v":1,"type":"req","id":1,"method":"echo","body":"` + "\xff" + `"}`, wantReason: "UTF-8", wantCode: CloseInvalidPayload},
		{name: "invalid utf-8 after the object", msg: `{"v":1,"type":"ack","seq":1}` + "\xc3", wantReason: "UTF-8", wantCode: CloseInvalidPayload},
		{name: "encoded surrogate", msg: `{"v":1,"type":"req","id":1,"method":"` + "\xed\xa0\x80" + `"}`, wantReason: "UTF-8", wantCode: CloseInvalidPayload},
	}
	forEachTransport(t, func(t *testing.T, n network) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c, raw := n.rawPair(t)
				p := start(t, c, echo, Options{})
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				if err := raw.send(ctx, tc.binary, []byte(tc.msg)); errors.Is(err, errors.ErrUnsupported) {
					t.Skip("transport has no binary messages")
				} else if err != nil {
					t.Fatalf("send: %v", err)
				}

				// The remote learns why.
				wantCode := tc.wantCode
				if wantCode == 0 {
					wantCode = CloseProtocolError
				}
				_, err := raw.Read(ctx)
				var ce *CloseError
				if !errors.As(err, &ce) || ce.Code != wantCode || !strings.Contains(ce.Reason, tc.wantReason) {
					t.Errorf("remote Read = %v, want close %d mentioning %q", err, wantCode, tc.wantReason)
				}
				err = p.wait(t)
				var pe *ProtocolError
				if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.wantReason) {
					t.Errorf("Run = %v, want a ProtocolError mentioning %q", err, tc.wantReason)
				}
			})
		}
	})
}

// The remote Peer's Run reports why the other side hung up on it.
func TestRemoteProtocolErrorReported(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n network) {
		a, b := n.pair(t)
		strict := start(t, a, nil, Options{})
		sloppy := start(t, b, nil, Options{})
		// Write behind the Peer's back: a frame of a future version.
		if err := b.Write(context.Background(), api.Frame{V: 2, Type: api.FrameAck, Seq: 1}); err != nil {
			t.Fatalf("Write = %v", err)
		}
		var pe *ProtocolError
		if err := strict.wait(t); !errors.As(err, &pe) {
			t.Errorf("strict Run = %v, want a ProtocolError", err)
		}
		var ce *CloseError
		if err := sloppy.wait(t); !errors.As(err, &ce) || ce.Code != CloseProtocolError || !strings.Contains(ce.Reason, "version 2") {
			t.Errorf("sloppy Run = %v, want a CloseError with code %d naming the version", err, CloseProtocolError)
		}
	})
}

func TestOversizedMessage(t *testing.T) {
	n := newWSNet(t, 64)
	c, raw := n.rawPair(t)
	p := start(t, c, echo, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	big := fmt.Sprintf(`{"v":1,"type":"req","id":1,"method":"echo","body":"%s"}`, strings.Repeat("x", 200))
	if err := raw.send(ctx, false, []byte(big)); err != nil {
		t.Fatalf("send: %v", err)
	}
	_, err := raw.Read(ctx)
	var ce *CloseError
	if !errors.As(err, &ce) || ce.Code != CloseMessageTooBig {
		t.Errorf("remote Read = %v, want close %d", err, CloseMessageTooBig)
	}
	if err := p.wait(t); err == nil {
		t.Errorf("Run = nil after an oversized message, want an error")
	}
}

func TestBadConnectionIsolated(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n network) {
		a, b := n.pair(t)
		client := start(t, a, nil, Options{})
		healthy := start(t, b, echo, Options{})

		c, raw := n.rawPair(t)
		bad := start(t, c, echo, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := raw.send(ctx, false, []byte("garbage")); err != nil {
			t.Fatalf("send: %v", err)
		}
		raw.Read(ctx) // completes the close handshake
		var pe *ProtocolError
		if err := bad.wait(t); !errors.As(err, &pe) {
			t.Fatalf("bad Run = %v, want a ProtocolError", err)
		}

		for i := range 10 {
			var got int
			if err := client.Call(ctx, "echo", i, &got); err != nil || got != i {
				t.Errorf("Call(echo, %d) on the healthy connection = %d, %v", i, got, err)
			}
		}
		select {
		case <-healthy.done:
			t.Errorf("healthy Run returned %v", healthy.err)
		default:
		}
	})
}

func TestRunTwice(t *testing.T) {
	a, _ := Pipe()
	p := NewPeer(a, nil, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Errorf("Run(cancelled ctx) = %v, want nil", err)
	}
	if err := p.Run(ctx); err == nil {
		t.Errorf("second Run = nil, want an error")
	}
}

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		msg     string
		want    api.Frame
		wantErr string
	}{
		{msg: `{"v":1,"type":"req","id":7,"method":"hello","body":{"a":1}}`,
			want: api.Frame{V: 1, Type: "req", ID: 7, Method: "hello", Body: json.RawMessage(`{"a":1}`)}},
		{msg: `{"v":1,"type":"resp","id":7,"error":{"code":"not_found","message":"x"}}`,
			want: api.Frame{V: 1, Type: "resp", ID: 7, Error: &api.Error{Code: "not_found", Message: "x"}}},
		{msg: `{"v":1,"type":"notify","seq":3,"method":"node.update","future":true}`,
			want: api.Frame{V: 1, Type: "notify", Seq: 3, Method: "node.update"}},
		{msg: `{"v":1,"type":"ack","seq":3}`, want: api.Frame{V: 1, Type: "ack", Seq: 3}},
		{msg: `{"v":1,"type":"ack","seq":9223372036854775807}`, want: api.Frame{V: 1, Type: "ack", Seq: 1<<63 - 1}},
		{msg: `{"v":1,"type":"ack","seq":9223372036854775808}`, wantErr: "ack frame with seq 9223372036854775808, above the highest seq 9223372036854775807"},
		{msg: `{"v":1,"type":"resp"}`, wantErr: "resp frame without id"},
		{msg: `{"v":1,"type":"ack"}`, wantErr: "ack frame without seq"},
		{msg: `{"v":1,"type":"notify","seq":1}`, wantErr: "notify frame without method"},
		{msg: `{"v":"1","type":"ack","seq":1}`, wantErr: "malformed frame"},
		{msg: ``, wantErr: "malformed frame"},
	}
	for _, tc := range tests {
		got, err := decodeFrame([]byte(tc.msg))
		if tc.wantErr != "" {
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.wantErr) {
				t.Errorf("decodeFrame(%q) = %v, want a ProtocolError mentioning %q", tc.msg, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("decodeFrame(%q) = %v", tc.msg, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("decodeFrame(%q) (-want +got):\n%s", tc.msg, diff)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"toolong", 3, "too"},
		{"héllo", 2, "h"}, // é is two bytes; do not split it
		{"héllo", 3, "hé"},
	}
	for _, tc := range tests {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func BenchmarkCallPipe(b *testing.B)      { benchmarkCall(b, pipeNet{}) }
func BenchmarkCallWebSocket(b *testing.B) { benchmarkCall(b, newWSNet(b, 0)) }

// benchmarkCall measures round-trip calls: one call per op.
func benchmarkCall(b *testing.B, n network) {
	body := map[string]any{"state": "ready", "seq": 42}
	b.Run("serial", func(b *testing.B) {
		x, y := n.pair(b)
		client := start(b, x, nil, Options{})
		start(b, y, echo, Options{})
		b.ReportAllocs()
		for b.Loop() {
			var got map[string]any
			if err := client.Call(context.Background(), "echo", body, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		x, y := n.pair(b)
		client := start(b, x, nil, Options{})
		start(b, y, echo, Options{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var got map[string]any
				if err := client.Call(context.Background(), "echo", body, &got); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestLaterAnswers: a request answered with Later gets Wait's answer, or
// its error, and counts towards MaxConcurrent until Wait returns.
func TestLaterAnswers(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n network) {
		release, parked := make(chan struct{}), make(chan struct{})
		h := &handler{req: func(ctx context.Context, method string, body json.RawMessage) (any, error) {
			switch method {
			case "late":
				close(parked)
				return Later{Wait: func() (any, error) {
					select {
					case <-release:
						return "answered late", nil
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}}, nil
			case "late-error":
				return Later{Wait: func() (any, error) { return nil, errdefs.Conflict("taken meanwhile") }}, nil
			}
			return body, nil
		}}
		a, b := n.pair(t)
		client := start(t, a, nil, Options{})
		start(t, b, h, Options{MaxConcurrent: 1})

		var lateErr error
		var late string
		lateDone := make(chan struct{})
		go func() { defer close(lateDone); lateErr = client.Call(context.Background(), "late", nil, &late) }()
		<-parked
		// The late request holds the only slot: another waits for it.
		echoed := make(chan error, 1)
		go func() { echoed <- client.Call(context.Background(), "echo", "x", nil) }()
		select {
		case err := <-echoed:
			t.Fatalf("a second request ran while the late one held MaxConcurrent=1: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		<-lateDone
		if lateErr != nil || late != "answered late" {
			t.Fatalf("late call = %q, %v; want the answer Wait gave", late, lateErr)
		}
		if err := <-echoed; err != nil {
			t.Fatalf("echo after the late answer: %v", err)
		}
		err := client.Call(context.Background(), "late-error", nil, nil)
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "taken meanwhile") {
			t.Fatalf("late-error call = %v, want Wait's conflict", err)
		}
	})
}
