package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/enroll"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// maxFrame caps one WebSocket message from an agent.
const maxFrame = 1 << 20

// handleRegister admits an agent. A join token only ever creates a node:
// the key of a node, (machine_id, data_dir), is readable by any local user,
// so it proves nothing. Re-joining an existing node takes that node's own
// credential, or a re-join token an admin bound to it; groups come from the
// join token at first registration only.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	kind := api.TokenJoin
	if auth.KindOf(bearer(r)) == api.TokenNode {
		kind = api.TokenNode
	}
	t, err := s.authenticate(ctx, r, kind)
	if err != nil {
		return err
	}
	var req api.RegisterRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	n, resp, err := s.enroll.Register(ctx, t, kind, req, r.RemoteAddr)
	if err != nil {
		return err
	}
	s.log.Info("node registered", "node", n.ID, "name", n.Name, "machine_id", n.MachineID, "data_dir", n.DataDir, "with", kind)
	httpapi.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// handleConnect upgrades an agent's connection to the protocol WebSocket.
func (s *Server) handleConnect(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, err := s.authenticate(ctx, r, api.TokenNode)
	if err != nil {
		return err
	}
	if _, err := s.store.GetNode(ctx, t.NodeID); errdefs.IsNotFound(err) {
		return fmt.Errorf("node %s was removed; the agent must register again: %w", t.NodeID, errdefs.ErrUnauthenticated)
	} else if err != nil {
		return fmt.Errorf("connect node %s: %w", t.NodeID, err)
	}
	heard := &proto.Heard{}
	heard.Mark()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled,
		OnPingReceived: heard.OnPing})
	if err != nil {
		return nil // Accept has answered the client
	}
	conn := proto.NewWebSocketConn(c, maxFrame)
	sess := hub.NewSession(t.NodeID, conn, heard)
	sess.Addr, _, _ = net.SplitHostPort(r.RemoteAddr)
	ah := &agentHandler{s: s, sess: sess, credential: t}
	sess.Peer = proto.NewPeer(conn, ah, proto.Options{
		Logger: s.log.With("node", t.NodeID),
		OnAck:  func(seq uint64) { go ah.ack(seq) }, // cumulative: order does not matter
		Heard:  heard,
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ah.ctx = ctx
	err = sess.Peer.Run(ctx)
	if s.hub.Remove(sess) && ah.isHelloDone() && !ah.saidGoodbye.Load() {
		// The server saw the connection end: the agent died, or the
		// network between us did. Either way, start the clock now.
		if life := s.lifeCtx(); life.Err() == nil {
			s.hub.ConnectionLost(life, t.NodeID, sess.Heartbeat(), time.Now())
		}
	}
	var pe *proto.ProtocolError
	switch {
	case errors.As(err, &pe):
		s.metrics.protocolErrors.Inc()
		s.log.Warn("agent connection closed: bad frame", "node", t.NodeID, "reason", pe.Reason)
	case err != nil:
		s.log.Info("agent connection ended", "node", t.NodeID, "err", err)
	default:
		s.log.Info("agent disconnected", "node", t.NodeID)
	}
	return nil
}

// agentHandler answers one agent session's requests.
type agentHandler struct {
	s          *Server
	sess       *hub.Session
	credential store.Token
	ctx        context.Context // the session's lifetime
	// helloState goes helloNone → helloBusy → helloDone; claiming it with a
	// compare-and-swap makes a second hello on the connection fail even
	// while the first is still being handled.
	helloState atomic.Int32
	// saidGoodbye: the agent left on purpose; its connection's end is
	// no news.
	saidGoodbye atomic.Bool
}

func (h *agentHandler) HandleNotify(ctx context.Context, seq uint64, method string, body json.RawMessage) error {
	return fmt.Errorf("agents send requests, not notifications (got %q): %w", method, errdefs.ErrInvalid)
}

func (h *agentHandler) ack(seq uint64) {
	if err := h.s.store.Ack(h.ctx, h.sess.NodeID, seq); err != nil && h.ctx.Err() == nil {
		h.s.log.Error("ack notifications", "node", h.sess.NodeID, "seq", seq, "err", err)
	}
}

func (h *agentHandler) HandleRequest(ctx context.Context, method string, body json.RawMessage) (any, error) {
	if method == api.MethodHello {
		return h.hello(ctx, body)
	}
	if !h.isHelloDone() {
		return nil, fmt.Errorf("send %q first: %w", api.MethodHello, errdefs.ErrInvalid)
	}
	switch method {
	case api.MethodHeartbeat:
		var hb api.Heartbeat
		if err := httpapi.DecodeStrict(body, &hb); err != nil {
			return nil, err
		}
		hb.State = api.AgentState(hb.State) // older agents capitalize it
		if !enroll.ValidState(hb.State) {
			return nil, errdefs.Field("state", "unknown agent state %q", hb.State)
		}
		if len(hb.Overlay) > api.MaxHeartbeatLinks {
			return nil, errdefs.Field("overlay", "%d links, above the %d a heartbeat may carry", len(hb.Overlay), api.MaxHeartbeatLinks)
		}
		return api.HeartbeatAck{ServerTime: h.s.hub.Heartbeat(h.sess, hb)}, nil
	case api.MethodGoodbye:
		var g api.Goodbye
		if err := httpapi.DecodeStrict(body, &g); err != nil {
			return nil, err
		}
		h.saidGoodbye.Store(true)
		return struct{}{}, h.s.hub.Goodbye(ctx, h.sess, g.Reason)
	case api.MethodRenew:
		return h.s.enroll.Credential(ctx, h.sess.NodeID)
	case api.MethodPresence:
		return h.presence(body)
	case api.MethodResourcesReport:
		return h.resourcesReport(ctx, body)
	case api.MethodContainersReport:
		return h.containersReport(ctx, body)
	case api.MethodNotices:
		return h.noticesReq(ctx, body)
	case api.MethodSuiteNext:
		return h.suiteNext(ctx, body)
	case api.MethodSuiteLeave:
		return h.suiteLeave(ctx, body)
	case api.MethodTasksFetch:
		return h.tasksFetch(ctx, body)
	case api.MethodTasksReport:
		return h.tasksReport(ctx, body)
	case api.MethodTasksReturn:
		return h.tasksReturn(ctx, body)
	case api.MethodOverlayJoin:
		return h.overlayJoin(ctx, body)
	case api.MethodOverlayRelay:
		return h.overlayRelay(body)
	}
	return nil, errdefs.NotFound("method %q", method)
}

const (
	helloNone int32 = iota
	helloBusy
	helloDone
)

func (h *agentHandler) isHelloDone() bool { return h.helloState.Load() == helloDone }

func (h *agentHandler) hello(ctx context.Context, body json.RawMessage) (any, error) {
	var hello api.Hello
	if err := httpapi.DecodeStrict(body, &hello); err != nil {
		return nil, err
	}
	hello.State = api.AgentState(hello.State) // older agents capitalize it
	if !enroll.ValidState(hello.State) {
		return nil, errdefs.Field("state", "unknown agent state %q", hello.State)
	}
	if hello.LastSeq > proto.MaxSeq {
		return nil, errdefs.Field("last_seq", "%d is above the highest seq %d", hello.LastSeq, uint64(proto.MaxSeq))
	}
	if hello.Name != "" {
		if err := validate.Name("name", hello.Name); err != nil {
			return nil, err
		}
	}
	if err := enroll.ValidateHardware("hardware", hello.Hardware); err != nil {
		return nil, err
	}
	if err := hub.ValidateNotices(hello.Notices); err != nil {
		return nil, err
	}
	if err := hub.CheckKeepalive(time.Duration(hello.Keepalive)); err != nil {
		return nil, err
	}
	if !h.helloState.CompareAndSwap(helloNone, helloBusy) {
		return nil, fmt.Errorf("hello sent twice on one connection: %w", errdefs.ErrInvalid)
	}
	welcome, err := h.welcome(ctx, hello)
	if err != nil {
		h.helloState.Store(helloNone) // the agent may try again
		return nil, err
	}
	return welcome, nil
}

// welcome brings the node online for the hello, settles the tasks it
// holds, and starts the session's pushes.
func (h *agentHandler) welcome(ctx context.Context, hello api.Hello) (api.Welcome, error) {
	n, err := h.s.hub.Hello(ctx, h.sess, hello)
	if err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	}
	revoked, err := h.s.dispatcher.Rejoin(ctx, n.ID, hello.Holding)
	if err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	}
	h.helloState.Store(helloDone)
	h.s.hub.Attach(h.ctx, h.sess, hello.LastSeq)
	h.s.log.Info("agent connected", "node", n.ID, "name", n.Name, "last_seq", hello.LastSeq)
	return api.Welcome{
		NodeID:            n.ID,
		HeartbeatInterval: api.Duration(h.s.cfg.HeartbeatInterval),
		CredentialExpires: h.credential.ExpiresAt,
		ServerVersion:     h.s.cfg.Version,
		ReclaimAfter:      api.Duration(h.s.cfg.ReconnectGrace),
		Revoked:           revoked,
		IdlePoll:          api.Duration(h.s.cfg.IdlePoll),
		TakesHeld:         true,
		TaskLogMax:        max(h.s.cfg.TaskLogMax, 0),
		ParksFetch:        true,
		Overlay:           h.s.overlay.Prefix().String(),
	}, nil
}

// noticesReq answers node.notices: the agent's notices now.
func (h *agentHandler) noticesReq(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.Notices
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	if err := hub.ValidateNotices(req.Notices); err != nil {
		return nil, err
	}
	if err := h.s.hub.KeepNotices(ctx, h.sess, req.Notices); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}
