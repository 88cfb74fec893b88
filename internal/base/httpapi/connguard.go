package httpapi

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// ConnGuard bounds what clients that have not shown a credential can hold.
// Anyone who reaches the port can open connections; until a request on one
// authenticates, the connection counts against a cap, and one left idle is
// closed after a short while. Past the cap, a new connection first evicts
// the longest-idle unauthenticated one, else it is closed at once. Agents'
// WebSockets and users' keep-alive connections, once authenticated, are
// governed by the server's ordinary idle timeout instead.
type ConnGuard struct {
	max      int
	idleFor  time.Duration
	mu       sync.Mutex
	conns    map[net.Conn]*guardedConn
	unauthed int
}

type guardedConn struct {
	authed    bool
	idleSince time.Time // zero while a request is in flight
}

// NewConnGuard lets max unauthenticated connections be open, each idle
// at most idleFor.
func NewConnGuard(max int, idleFor time.Duration) *ConnGuard {
	return &ConnGuard{max: max, idleFor: idleFor, conns: map[net.Conn]*guardedConn{}}
}

// connKey carries the request's connection in its context.
type connKey struct{}

// ConnContext is the http.Server's ConnContext.
func (g *ConnGuard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ConnState is the http.Server's ConnState.
func (g *ConnGuard) ConnState(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case http.StateNew:
		if g.unauthed >= g.max && !g.evictIdleLocked() {
			c.Close() // StateClosed follows; it was never counted
			return
		}
		// A new connection is idle until its first request comes.
		g.conns[c] = &guardedConn{idleSince: time.Now()}
		g.unauthed++
	case http.StateActive:
		if gc := g.conns[c]; gc != nil {
			gc.idleSince = time.Time{}
		}
	case http.StateIdle:
		if gc := g.conns[c]; gc != nil {
			gc.idleSince = time.Now()
		}
	case http.StateHijacked, http.StateClosed:
		if gc := g.conns[c]; gc != nil {
			if !gc.authed {
				g.unauthed--
			}
			delete(g.conns, c)
		}
	}
}

// evictIdleLocked closes the unauthenticated connection idle the longest.
func (g *ConnGuard) evictIdleLocked() bool {
	var oldest net.Conn
	var since time.Time
	for c, gc := range g.conns {
		if !gc.authed && !gc.idleSince.IsZero() && (oldest == nil || gc.idleSince.Before(since)) {
			oldest, since = c, gc.idleSince
		}
	}
	if oldest == nil {
		return false
	}
	g.forgetLocked(oldest)
	oldest.Close()
	return true
}

func (g *ConnGuard) forgetLocked(c net.Conn) {
	if gc := g.conns[c]; gc != nil && !gc.authed {
		g.unauthed--
	}
	delete(g.conns, c)
}

// Authenticated marks the request's connection as a known client's.
func (g *ConnGuard) Authenticated(ctx context.Context) {
	if g == nil {
		return
	}
	c, _ := ctx.Value(connKey{}).(net.Conn)
	if c == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc := g.conns[c]; gc != nil && !gc.authed {
		gc.authed = true
		g.unauthed--
	}
}

// Reap closes unauthenticated connections idle longer than idleFor, until
// ctx is done.
func (g *ConnGuard) Reap(ctx context.Context) {
	t := time.NewTicker(g.idleFor / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.mu.Lock()
			for c, gc := range g.conns {
				if !gc.authed && !gc.idleSince.IsZero() && now.Sub(gc.idleSince) > g.idleFor {
					g.forgetLocked(c)
					c.Close()
				}
			}
			g.mu.Unlock()
		}
	}
}

// Unauthenticated is the number of unauthenticated connections open.
func (g *ConnGuard) Unauthenticated() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unauthed
}
