package proto

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nodemgr/nodemgr/internal/base/tick"
)

// Heard is when a connection last heard from its remote: a frame, or a
// WebSocket ping. A server holds one per agent connection to find agents
// that went silent (frozen, or cut off) while their connection stays open.
type Heard struct{ at atomic.Int64 }

// Mark records that the remote was heard from now.
func (h *Heard) Mark() { h.at.Store(time.Now().UnixNano()) }

// Time returns when the remote was last heard from; zero if never.
func (h *Heard) Time() time.Time {
	n := h.at.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// OnPing fits websocket.AcceptOptions.OnPingReceived: a ping is a sign of
// life too, and it is answered.
func (h *Heard) OnPing(context.Context, []byte) bool {
	h.Mark()
	return true
}

// KeepaliveDeadline is how long a keepalive ping may wait for its answer,
// in keepalive periods: about two, as for heartbeats.
const KeepaliveDeadline = 2

// keepaliveLoop pings the remote every period until ctx ends. A ping not
// answered within KeepaliveDeadline periods means the remote is frozen or
// cut off: the connection is closed, and Run returns an error saying so.
// An answered ping moves Contact to when it was sent.
func (p *Peer) keepaliveLoop(ctx context.Context, period time.Duration) {
	// stop ends the loop once the connection is closed: no ping after.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	tick.Every(ctx, period, func() {
		if !p.ping(ctx, KeepaliveDeadline*period) {
			stop()
		}
	})
}

// ping pings the remote and reports whether the connection stays open: a
// ping not answered within deadline closes it.
func (p *Peer) ping(ctx context.Context, deadline time.Duration) bool {
	sent := time.Now()
	pctx, cancel := context.WithTimeout(ctx, deadline)
	err := p.conn.Ping(pctx)
	cancel()
	switch {
	case err == nil:
		p.contact.Store(sent.UnixNano())
		return true
	case ctx.Err() != nil:
		return false
	}
	silent := fmt.Errorf("the remote did not answer a ping within %s (frozen or cut off): %w", deadline, unavailable{err})
	p.silent.Store(&silent)
	p.log.Warn("closing connection: the remote stopped answering", "deadline", deadline)
	// A remote that answers no ping would not answer a close either: do
	// not wait for it.
	if !p.closing.Swap(true) {
		_ = p.conn.CloseNow()
	}
	return false
}

// Contact returns when the last ping that the remote answered was sent:
// the remote was alive then, and has heard from this side since. Zero
// until a ping was answered; only a Peer with Options.Keepalive pings.
func (p *Peer) Contact() time.Time {
	n := p.contact.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
