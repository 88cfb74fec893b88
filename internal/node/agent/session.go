package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/proto"
)

// session is one connection to the server, from the hello to its end: it
// tells the server what the agent does (heartbeats, presence, books,
// container reports, notices) and drains a shutdown while the server
// listens.
type session struct {
	a      *Agent
	ctx    context.Context // ends with the session
	conn   proto.Conn
	peer   *proto.Peer
	runErr chan error // the peer's Run, once it returns

	interval    time.Duration // between heartbeats
	published   time.Time     // UpdatedAt of the presence the server has
	books       booksReport   // what the server has of the books
	noticesSent int           // the notices version the server has
	overlay     bool          // the server has an overlay: heartbeats carry the links
}

// session serves one connection: hello, then the session's loop until the
// connection ends, ctx does, or a shutdown has drained and said goodbye.
func (a *Agent) session(ctx context.Context, conn proto.Conn, peer *proto.Peer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &session{a: a, ctx: ctx, conn: conn, peer: peer, runErr: make(chan error, 1)}
	go func() { s.runErr <- peer.Run(ctx) }()
	welcome, helloSent, err := s.hello()
	if err != nil {
		return err
	}
	a.sessionUp.Store(true)
	a.log.Info("connected", "server", a.server(), "node", welcome.NodeID, "heartbeat", s.interval)
	a.setPeer(peer)
	defer a.setPeer(nil)
	// What it held and the server gave to others while it was away goes
	// first; then the rest may start again.
	if len(welcome.Revoked) > 0 {
		a.log.Warn("the server gave tasks this agent held to other nodes while it was out of touch; dropping them",
			"tasks", len(welcome.Revoked))
		a.runner.revoke(welcome.Revoked)
	}
	a.contact.Store(newContact(peer, helloSent, time.Duration(welcome.ReclaimAfter), a.cfg.Keepalive))
	a.runner.idlePoll.Store(int64(welcome.IdlePoll))
	a.runner.takesHeld.Store(welcome.TakesHeld)
	a.runner.taskLogMax.Store(welcome.TaskLogMax)
	a.runner.parksFetch.Store(welcome.ParksFetch)
	s.overlay = welcome.Overlay != "" && a.cfg.Overlay
	defer a.contact.Store(nil)
	a.runner.resume()
	a.maybeRenew(ctx, peer)
	a.runner.poke()
	s.publish()
	s.publishBooks()
	s.report(true)
	go s.joinOverlay(welcome.Overlay)
	return s.loop()
}

// hello introduces the agent: what it is, does and holds, and the last
// notification it handled. It returns the server's welcome and when the
// hello was sent.
func (s *session) hello() (api.Welcome, time.Time, error) {
	a := s.a
	var welcome api.Welcome
	hctx, hcancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer hcancel()
	state, suite := a.work()
	notices, sent := a.notices.now()
	s.noticesSent = sent
	helloSent := time.Now()
	err := s.peer.Call(hctx, api.MethodHello, api.Hello{
		AgentVersion: a.cfg.Version, Name: a.cfg.Name, Hardware: a.hardware,
		State: state, SuiteID: suite, LastSeq: s.peer.LastSeq(), Holding: a.runner.holding(),
		Keepalive: api.Duration(a.cfg.Keepalive), Notices: notices,
	}, &welcome)
	if err != nil {
		s.conn.Close(proto.CloseGoingAway, "hello failed")
		<-s.runErr
		return welcome, helloSent, fmt.Errorf("hello: %w", err)
	}
	s.interval = time.Duration(welcome.HeartbeatInterval)
	if a.cfg.HeartbeatInterval > 0 {
		s.interval = a.cfg.HeartbeatInterval
	}
	if s.interval <= 0 {
		s.interval = 30 * time.Second
	}
	return welcome, helloSent, nil
}

// loop runs the session until it ends, and says why.
func (s *session) loop() error {
	a := s.a
	var drained chan struct{}
	// Spread agents that connected together over the interval.
	tick := time.NewTimer(time.Duration(rand.Int64N(int64(s.interval))))
	defer tick.Stop()
	for {
		select {
		case err := <-s.runErr:
			if err == nil {
				err = errors.New("server closed the connection")
			}
			return err
		case mode := <-a.shutdown:
			// Drain in the background; heartbeats go on meanwhile.
			a.shutdown <- mode
			if drained == nil {
				drained = make(chan struct{})
				go func() { a.drain(mode); close(drained) }()
			}
		case <-drained:
			mode, _ := a.shutdownRequested()
			a.leave(s.peer, s.conn, mode)
			<-s.runErr
			return nil
		case <-s.ctx.Done():
			s.conn.Close(proto.CloseGoingAway, "agent stopping")
			<-s.runErr
			return nil
		case <-a.wl.changed:
			s.publish()
			s.publishBooks()
		case <-a.wl.reported:
			s.report(false)
			s.publishBooks()
		case <-a.notices.changed:
			a.sendNotices(s.ctx, s.peer, &s.noticesSent)
		case <-a.workChanged:
			// Preparing, Executing, Cleanup, Idle: node ls shows it now.
			tick.Reset(s.interval)
			if err := s.beat(); err != nil {
				return err
			}
		case <-tick.C:
			tick.Reset(s.interval)
			a.maybeRenew(s.ctx, s.peer)
			a.sendNotices(s.ctx, s.peer, &s.noticesSent) // one that failed
			s.publish()                                  // catches what changed without a poke
			s.publishBooks()
			if err := s.beat(); err != nil {
				return err
			}
		}
	}
}

// publish gives the server what the agent publishes of itself, when it
// changed.
func (s *session) publish() {
	p := s.a.wl.currentPresence()
	if p.UpdatedAt.Equal(s.published) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := s.peer.Call(ctx, api.MethodPresence, p, nil); err != nil {
		s.a.log.Warn("publish presence", "err", err)
		return
	}
	s.published = p.UpdatedAt
}

// publishBooks gives the server a copy of the books when they changed,
// so that it can show them while this agent is away.
func (s *session) publishBooks() {
	res, err := s.a.wl.resources()
	if err != nil {
		return // not onboarded yet, or still starting
	}
	key, due := s.books.due(res, time.Now())
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := s.peer.Call(ctx, api.MethodResourcesReport, res, nil); err != nil {
		s.a.log.Debug("report the books", "err", err)
		return
	}
	s.books.sent, s.books.sentAt = key, time.Now()
}

// beat sends a heartbeat with the agent's state; a failed one ends the
// session.
func (s *session) beat() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.interval)
	state, suite := s.a.work()
	hb := api.Heartbeat{State: state, SuiteID: suite, Usage: s.a.machineUsage()}
	if s.overlay {
		hb.Overlay = s.a.overlayLinks()
	}
	err := s.peer.Call(ctx, api.MethodHeartbeat, hb, nil)
	cancel()
	if err != nil && s.ctx.Err() == nil {
		s.conn.Close(proto.CloseGoingAway, "heartbeat failed")
		<-s.runErr
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// report sends the containers' reports: those that changed, or
// everything.
func (s *session) report(everything bool) {
	cs := s.a.wl.takeReports(everything)
	if len(cs) == 0 && !everything {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := s.peer.Call(ctx, api.MethodContainersReport, api.ContainerReport{Containers: cs}, nil); err != nil {
		s.a.log.Warn("report containers", "err", err)
		s.a.wl.requeue(cs)
	}
}
