package proto

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"encoding/json"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// Handler serves what the remote sends. The server and the agent each bring
// their own.
type Handler interface {
	// HandleRequest answers one request. Requests run concurrently, each in
	// its own goroutine, at most Options.MaxConcurrent at a time; while that
	// many are running the Peer stops reading. A method the handler does not
	// know should be answered with UnknownMethod(method).
	HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error)

	// HandleNotify handles one notification. Notifications are handled one at
	// a time, in the order they arrive, which must be seq order. A seq at or
	// below the last one handled is a replay and is acknowledged again
	// without calling the handler. When HandleNotify returns nil the Peer
	// acknowledges seq (cumulatively). When it returns an error the Peer
	// logs it and does not acknowledge; later seqs are then held back
	// unacknowledged too, since acknowledging them would cover the failed
	// one, until the sender sends the failed seq again (after a reconnect, or
	// sooner) and it succeeds.
	HandleNotify(ctx context.Context, seq uint64, method string, body json.RawMessage) error
}

// Later is a request's answer that is not ready: HandleRequest returns it
// to wait somewhere other than the shared handler goroutines (see
// handlers), and Wait, run on a goroutine of its own, gives the answer.
// The request still counts towards Options.MaxConcurrent until Wait
// returns, and Run waits for it. A tasks.fetch the server holds until
// tasks are ready answers so.
type Later struct {
	Wait func() (any, error)
}

// UnknownMethod is the error a Handler returns for a method it does not
// serve. It is an errdefs.ErrNotFound on both sides of the wire.
func UnknownMethod(method string) error {
	return errdefs.NotFound("unknown method %q", method)
}

// Options tune a Peer. The zero value is usable.
type Options struct {
	Logger *slog.Logger // nil: discard
	// LastSeq is the highest notification seq already handled, restored
	// from disk by the agent; lower or equal seqs are treated as replays.
	LastSeq uint64
	// OnAck is called, from the read loop, when the remote acknowledges all
	// notifications up to seq. The server uses it to forget what it no
	// longer needs to replay. It should not block.
	OnAck func(seq uint64)
	// MaxConcurrent bounds the requests handled at once (default 64).
	MaxConcurrent int
	// Keepalive, when positive, pings the remote that often; a ping not
	// answered within KeepaliveDeadline periods closes the connection.
	// The agent sets it, to leave a frozen server for another replica.
	Keepalive time.Duration
	// Heard, when set, is marked for every frame read.
	Heard *Heard
}

// DefaultMaxConcurrent is the request concurrency when Options leaves it 0.
const DefaultMaxConcurrent = 64

// Peer is one end of a session: it calls the remote, notifies it, and serves
// what the remote sends, all over one Conn. Run must be running for calls to
// get answers.
type Peer struct {
	conn      Conn
	h         Handler
	log       *slog.Logger
	onAck     func(seq uint64)
	sem       chan struct{} // one slot per running request handler
	lastSeq   atomic.Uint64
	nextID    atomic.Uint64
	started   atomic.Bool
	closing   atomic.Bool // Close was called: the coming read error is expected
	keepalive time.Duration
	heard     *Heard
	contact   atomic.Int64          // unix nanos: see Contact
	silent    atomic.Pointer[error] // why keepaliveLoop closed the connection

	mu      sync.Mutex
	pending map[uint64]chan api.Frame // calls waiting for a response, by id
	stopErr error                     // set once the peer has stopped; fails new calls
	done    chan struct{}             // closed when the peer stops

	nmu     sync.Mutex
	nqueue  []api.Frame   // notifications read and not yet handled
	nsignal chan struct{} // nqueue grew
	nstart  sync.Once     // starts the notification loop
}

// NewPeer returns a Peer that speaks over c and serves the remote with h. A
// nil h answers every request with UnknownMethod and acknowledges nothing.
func NewPeer(c Conn, h Handler, o Options) *Peer {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if h == nil {
		h = noHandler{}
	}
	p := &Peer{
		conn:      c,
		h:         h,
		log:       o.Logger,
		onAck:     o.OnAck,
		keepalive: o.Keepalive,
		heard:     o.Heard,
		sem:       make(chan struct{}, o.MaxConcurrent),
		pending:   make(map[uint64]chan api.Frame),
		done:      make(chan struct{}),
		nsignal:   make(chan struct{}, 1),
	}
	p.lastSeq.Store(o.LastSeq)
	return p
}

// Run reads and serves frames until the connection ends or ctx is done. It
// returns nil when ctx is done (after closing the connection with
// CloseGoingAway), when Close was called, or when the remote closed the
// connection normally. For a frame that breaks the protocol it closes the
// connection with CloseProtocolError and the reason, and returns the
// *ProtocolError. When Run returns, its handlers have returned and every
// pending and later Call fails with an errdefs.ErrUnavailable error.
//
// Closing waits for the remote to answer the close (a few seconds at most on
// a WebSocket), so the remote learns why.
func (p *Peer) Run(ctx context.Context) error {
	if p.started.Swap(true) {
		return errors.New("proto: Peer.Run called twice")
	}
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup // the handlers and the notification loop

	// When ctx ends, say goodbye; the close ends the read loop. The read
	// loop itself gets a ctx that is never cancelled: a WebSocket closes
	// abruptly when a read is cancelled. It runs on this goroutine: one
	// goroutine less per connection, which a server holds by the
	// thousand.
	closed := make(chan struct{})
	stopClose := context.AfterFunc(ctx, func() {
		defer close(closed)
		if !p.closing.Swap(true) {
			_ = p.conn.Close(CloseGoingAway, "shutting down")
		}
	})
	if p.keepalive > 0 {
		wg.Go(func() { p.keepaliveLoop(hctx, p.keepalive) })
	}
	err := p.runErr(p.readLoop(context.WithoutCancel(ctx), hctx, &wg))
	if silent := p.silent.Load(); silent != nil && ctx.Err() == nil {
		err = *silent
	}
	if !stopClose() {
		<-closed // the goodbye is under way: let it finish
	}
	if ctx.Err() != nil {
		err = nil // the read loop gave up because ctx is done
	}

	p.stop(err)
	cancel()
	wg.Wait()
	var pe *ProtocolError
	if !errors.As(err, &pe) && !p.closing.Swap(true) {
		// Mostly the connection is gone already and this only frees what
		// it holds.
		if ctx.Err() != nil {
			_ = p.conn.Close(CloseGoingAway, "shutting down")
		} else {
			_ = p.conn.Close(CloseInternalError, "")
		}
	}
	return err
}

// runErr turns the error that ended the read loop into Run's result.
func (p *Peer) runErr(err error) error {
	var pe *ProtocolError
	var ce *CloseError
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &ce) && ce.normal():
		return nil
	case p.closing.Load():
		return nil
	case ce != nil:
		return err
	}
	return fmt.Errorf("read frame: %w", err)
}

func (p *Peer) readLoop(rctx, hctx context.Context, wg *sync.WaitGroup) error {
	for {
		f, err := p.conn.Read(rctx)
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) && !p.closing.Load() {
				p.log.Warn("closing connection: remote broke the protocol", "reason", pe.Reason)
				_ = p.conn.Close(pe.closeCode(), pe.Reason)
			}
			return err
		}
		if p.heard != nil {
			p.heard.Mark()
		}
		switch f.Type {
		case api.FrameRequest:
			select {
			case p.sem <- struct{}{}:
			case <-hctx.Done():
				return hctx.Err()
			}
			wg.Add(1)
			done := func() { <-p.sem; wg.Done() }
			job := func() {
				if later := p.serve(hctx, f); later != nil {
					go func() {
						defer done()
						res, err := later()
						p.respond(hctx, f, res, err)
					}()
					return
				}
				done()
			}
			if !handlers().try(job) {
				go job()
			}
		case api.FrameResponse:
			p.mu.Lock()
			ch, ok := p.pending[f.ID]
			delete(p.pending, f.ID)
			p.mu.Unlock()
			if !ok {
				// Most likely the answer to a call given up on.
				p.log.Debug("response to no pending call", "id", f.ID)
				continue
			}
			ch <- f
		case api.FrameNotify:
			// The loop starts with the first notification: a server's
			// peers mostly get none, and there are thousands of them.
			p.nstart.Do(func() { wg.Go(func() { p.notifyLoop(hctx) }) })
			p.nmu.Lock()
			p.nqueue = append(p.nqueue, f)
			p.nmu.Unlock()
			select {
			case p.nsignal <- struct{}{}:
			default:
			}
		case api.FrameAck:
			if p.onAck == nil {
				p.log.Debug("ack with no OnAck", "seq", f.Seq)
				continue
			}
			p.onAck(f.Seq)
		}
	}
}

// handlers are a few goroutines, shared by every peer of the process, that
// serve requests one after another; a request that finds none idle gets a
// goroutine of its own. A handler that lives on keeps the stack it grew
// (the store's calls run deep) instead of growing a fresh one from the
// minimum for every request: that copying was 5-6% of a busy server's CPU.
// They wait on a channel, not a timer, so idle peers cost nothing; they
// start with the first request, not in every program that links proto.
var handlers = sync.OnceValue(func() *handlerPool { return startHandlerPool(2 * runtime.GOMAXPROCS(0)) })

type handlerPool struct{ jobs chan func() }

func startHandlerPool(n int) *handlerPool {
	hp := &handlerPool{jobs: make(chan func())}
	for range n {
		go func() {
			for job := range hp.jobs {
				job()
			}
		}()
	}
	return hp
}

// try hands job to an idle handler, if one is waiting.
func (hp *handlerPool) try(job func()) bool {
	select {
	case hp.jobs <- job:
		return true
	default:
		return false
	}
}

// serve answers one request, or returns what answers it later (Later).
func (p *Peer) serve(ctx context.Context, req api.Frame) (later func() (any, error)) {
	res, err := p.h.HandleRequest(ctx, req.Method, req.Body)
	if l, ok := res.(Later); ok && err == nil {
		return l.Wait
	}
	p.respond(ctx, req, res, err)
	return nil
}

// respond sends the answer to req.
func (p *Peer) respond(ctx context.Context, req api.Frame, res any, err error) {
	resp := api.Frame{V: api.ProtocolVersion, Type: api.FrameResponse, ID: req.ID}
	if err == nil && res != nil {
		resp.Body, err = marshal(res)
		if err != nil {
			err = fmt.Errorf("encode %s response: %w", req.Method, err)
		}
	}
	if err != nil {
		resp.Body = nil
		e := errdefs.ToAPI(err)
		resp.Error = &e
	}
	if err := p.conn.Write(ctx, resp); err != nil {
		p.log.Debug("send response", "method", req.Method, "id", req.ID, "err", err)
	}
}

// notifyLoop handles notifications one at a time, in the order read.
func (p *Peer) notifyLoop(ctx context.Context) {
	var failed uint64 // the seq whose handler failed; later ones wait for it
	for {
		select {
		case <-p.nsignal:
		case <-ctx.Done():
			return
		}
		p.nmu.Lock()
		q := p.nqueue
		p.nqueue = nil
		p.nmu.Unlock()
		for _, f := range q {
			if ctx.Err() != nil {
				return // the rest is replayed after a reconnect
			}
			failed = p.handleNotify(ctx, f, failed)
		}
	}
}

// handleNotify handles or skips one notification and returns the seq of the
// failure that holds later ones back, or 0.
func (p *Peer) handleNotify(ctx context.Context, f api.Frame, failed uint64) uint64 {
	switch {
	case f.Seq <= p.lastSeq.Load():
		p.ack(ctx, f.Seq)
		return failed
	case failed != 0 && f.Seq > failed:
		p.log.Warn("notification held back behind a failed one", "seq", f.Seq, "method", f.Method, "failed_seq", failed)
		return failed
	}
	if err := p.h.HandleNotify(ctx, f.Seq, f.Method, f.Body); err != nil {
		if ctx.Err() == nil {
			p.log.Error("handle notification", "seq", f.Seq, "method", f.Method, "err", err)
		}
		if failed == 0 || f.Seq < failed {
			failed = f.Seq
		}
		return failed
	}
	p.lastSeq.Store(f.Seq)
	p.ack(ctx, f.Seq)
	if f.Seq >= failed {
		failed = 0
	}
	return failed
}

func (p *Peer) ack(ctx context.Context, seq uint64) {
	err := p.conn.Write(ctx, api.Frame{V: api.ProtocolVersion, Type: api.FrameAck, Seq: seq})
	if err != nil {
		p.log.Debug("send ack", "seq", seq, "err", err)
	}
}

// stop fails every pending call and every later one. cause says why.
func (p *Peer) stop(cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopErr != nil {
		return
	}
	if cause == nil {
		p.stopErr = fmt.Errorf("connection closed: %w", errdefs.ErrUnavailable)
	} else {
		p.stopErr = fmt.Errorf("connection lost: %w", unavailable{cause})
	}
	clear(p.pending)
	close(p.done)
}

func (p *Peer) stopped() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopErr
}

// Call sends a request and waits for its response, which it decodes into
// resp (unless resp is nil). An error the remote handler returned comes back
// as an errdefs.RemoteError and keeps its class: errors.Is(err,
// errdefs.ErrNotFound) works. When the peer stops first, Call fails with an
// errdefs.ErrUnavailable error. When ctx is done first, Call returns
// ctx.Err() and a late response is dropped.
func (p *Peer) Call(ctx context.Context, method string, req, resp any) error {
	f := api.Frame{V: api.ProtocolVersion, Type: api.FrameRequest, Method: method}
	if method == "" {
		return fmt.Errorf("call: empty method: %w", errdefs.ErrInvalid)
	}
	if req != nil {
		b, err := marshal(req)
		if err != nil {
			return fmt.Errorf("call %s: encode request: %w", method, err)
		}
		f.Body = b
	}
	f.ID = p.nextID.Add(1)
	ch := make(chan api.Frame, 1)
	p.mu.Lock()
	if err := p.stopErr; err != nil {
		p.mu.Unlock()
		return fmt.Errorf("call %s: %w", method, err)
	}
	p.pending[f.ID] = ch
	p.mu.Unlock()

	if err := p.conn.Write(ctx, f); err != nil {
		p.forget(f.ID)
		if ctx.Err() != nil {
			return fmt.Errorf("call %s: %w", method, ctx.Err())
		}
		return fmt.Errorf("call %s: send: %w", method, unavailable{err})
	}

	var r api.Frame
	select {
	case r = <-ch:
	case <-ctx.Done():
		p.forget(f.ID)
		return fmt.Errorf("call %s: %w", method, ctx.Err())
	case <-p.done:
		select {
		case r = <-ch: // answered just before the end
		default:
			return fmt.Errorf("call %s: %w", method, p.stopped())
		}
	}
	if r.Error != nil {
		return fmt.Errorf("call %s: %w", method, errdefs.FromAPI(*r.Error))
	}
	if resp != nil && len(r.Body) > 0 {
		if err := unmarshal(r.Body, resp); err != nil {
			return fmt.Errorf("call %s: decode response: %w", method, err)
		}
	}
	return nil
}

func (p *Peer) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// Notify sends notification seq. Seqs start at 1 and must rise on a
// connection; the remote acknowledges them through Options.OnAck.
func (p *Peer) Notify(ctx context.Context, seq uint64, method string, body json.RawMessage) error {
	if seq == 0 || method == "" {
		return fmt.Errorf("notify %q seq %d: need a method and a seq above 0: %w", method, seq, errdefs.ErrInvalid)
	}
	if err := p.stopped(); err != nil {
		return fmt.Errorf("notify %s seq %d: %w", method, seq, err)
	}
	f := api.Frame{V: api.ProtocolVersion, Type: api.FrameNotify, Seq: seq, Method: method, Body: body}
	if err := p.conn.Write(ctx, f); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("notify %s seq %d: %w", method, seq, ctx.Err())
		}
		return fmt.Errorf("notify %s seq %d: %w", method, seq, unavailable{err})
	}
	return nil
}

// LastSeq returns the highest notification seq handled, starting from
// Options.LastSeq. The agent persists it to resume after a restart.
func (p *Peer) LastSeq() uint64 { return p.lastSeq.Load() }

// Close closes the connection normally, telling the remote reason. Run then
// returns nil, and calls fail with an errdefs.ErrUnavailable error.
func (p *Peer) Close(reason string) error {
	p.closing.Store(true)
	p.stop(nil)
	return p.conn.Close(CloseNormal, reason)
}

// unavailable marks a transport failure as errdefs.ErrUnavailable while
// keeping the cause.
type unavailable struct{ err error }

func (e unavailable) Error() string   { return e.err.Error() }
func (e unavailable) Unwrap() []error { return []error{e.err, errdefs.ErrUnavailable} }

type noHandler struct{}

func (noHandler) HandleRequest(_ context.Context, method string, _ json.RawMessage) (any, error) {
	return nil, UnknownMethod(method)
}

func (noHandler) HandleNotify(_ context.Context, _ uint64, method string, _ json.RawMessage) error {
	return UnknownMethod(method)
}
