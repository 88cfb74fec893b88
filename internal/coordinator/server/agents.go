package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/auth"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/base/proto"
	"github.com/nodemgr/nodemgr/internal/base/validate"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
	"github.com/nodemgr/nodemgr/internal/coordinator/orchestrate"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// maxFrame caps one WebSocket message from an agent.
const maxFrame = 1 << 20

func validState(s string) bool {
	switch s {
	case api.AgentIdle, api.AgentPreparing, api.AgentExecuting, api.AgentCleanup, api.AgentShuttingDown, api.AgentDraining:
		return true
	}
	return false
}

func validateRegister(req api.RegisterRequest) error {
	if req.MachineID == "" || len(req.MachineID) > 128 {
		return errdefs.Field("machine_id", "must be 1-128 characters")
	}
	if !filepath.IsAbs(req.DataDir) || len(req.DataDir) > 4096 {
		return errdefs.Field("data_dir", "must be an absolute path, got %q", req.DataDir)
	}
	if err := validate.Name("name", req.Name); err != nil {
		return err
	}
	if err := validate.Tags("tags", req.Tags); err != nil {
		return err
	}
	if err := validate.Labels("labels", req.Labels); err != nil {
		return err
	}
	if err := validate.Groups("groups", req.Groups); err != nil {
		return err
	}
	return validateHardware("hardware", req.Hardware)
}

func validateHardware(field string, hw api.Hardware) error {
	if hw.Cores < 0 || hw.Cores > 1<<16 {
		return errdefs.Field(field+".cores", "must be between 0 and 65536, got %d", hw.Cores)
	}
	if len(hw.GPUs) > 1024 {
		return errdefs.Field(field+".gpus", "at most 1024 GPUs, got %d", len(hw.GPUs))
	}
	return nil
}

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
	if err := validateRegister(req); err != nil {
		return err
	}
	if kind == api.TokenJoin && t.DeploymentID != "" {
		if err := s.checkBootstrapMachine(ctx, t, req, r.RemoteAddr); err != nil {
			return err
		}
	}
	var n store.Node
	switch {
	case kind == api.TokenNode:
		n, err = s.rejoinNode(ctx, t.NodeID, req)
	case t.NodeID != "":
		n, err = s.rejoinWithToken(ctx, t, req)
	default:
		n, err = s.joinNode(ctx, t, req)
	}
	if err != nil {
		return err
	}
	resp, err := s.issueCredential(ctx, n.ID)
	if err != nil {
		return err
	}
	s.log.Info("node registered", "node", n.ID, "name", n.Name, "machine_id", n.MachineID, "data_dir", n.DataDir, "with", kind)
	httpapi.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// joinNode creates a node with a join token. A node already registered for
// the machine and data dir is a conflict: the token cannot adopt it.
func (s *Server) joinNode(ctx context.Context, jt store.Token, req api.RegisterRequest) (store.Node, error) {
	// A join token scoped to groups admits nodes into those groups only.
	if len(jt.Groups) > 0 {
		for i, g := range req.Groups {
			if !slices.Contains(jt.Groups, g) {
				return store.Node{}, errdefs.Field(fmt.Sprintf("groups[%d]", i), "the join token does not admit nodes into group %q; ask for a join token of that group", g)
			}
		}
	}
	now := time.Now().UTC()
	groups := slices.Clone(req.Groups)
	for _, g := range jt.Groups {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	// The use is spent with the node's creation, in one transaction: a
	// refused registration (a conflict) leaves the token as it was.
	n, err := s.store.JoinNode(ctx, jt.ID, now, store.Node{
		ID: auth.NewID("n-"), Name: req.Name, MachineID: req.MachineID, DataDir: req.DataDir,
		Tags: req.Tags, Labels: req.Labels, Groups: groups, Hardware: req.Hardware,
		Status: api.StatusOffline, StatusReason: "registered; waiting for the agent to connect",
		AgentState: api.AgentIdle, AgentVersion: req.AgentVersion, RegisteredAt: now, UpdatedAt: now,
	})
	if errors.Is(err, errdefs.ErrConflict) {
		return store.Node{}, errdefs.Conflict("a node is already registered for machine %s and data dir %s, and a join token cannot take it over: "+
			"the agent re-joins with its own credential (its state file in the data dir), or an admin creates a re-join token bound to that node "+
			"(nodemgr join-token create --node NODE), or removes the node (nodemgr node rm NODE)", req.MachineID, req.DataDir)
	}
	if errors.Is(err, errdefs.ErrPermission) {
		return store.Node{}, fmt.Errorf("join token %s: %w", jt.ID, err) // spent or expired
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("register node: %w", err)
	}
	if jt.DeploymentID != "" {
		// The orchestrator made this token for one machine: its node is
		// that deployment's.
		if err := s.store.LinkDeploymentNode(ctx, jt.DeploymentID, n.ID); err != nil {
			return store.Node{}, fmt.Errorf("register node: %w", err)
		}
		s.hub.WakeOrchestrator()
	}
	return n, nil
}

// checkBootstrapMachine refuses a pool machine's join token from any
// machine but that one: before it made the token, the orchestrator read
// through its executor the machine id the machine's agent registers with
// (store.Deployment.MachineID). It runs before the token's use is counted,
// so an impostor leaves it to the machine's own agent. The answer names
// neither id, or whoever holds a leaked token would learn which to claim;
// the pool machine's events say what came from where.
func (s *Server) checkBootstrapMachine(ctx context.Context, jt store.Token, req api.RegisterRequest, from string) error {
	d, err := s.store.GetDeployment(ctx, jt.DeploymentID)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("join token %s was made for a pool machine that is gone; register with a join token of your own (nodemgr join-token create): %w",
			jt.ID, errdefs.ErrPermission)
	}
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	if d.MachineID == "" || d.MachineID == req.MachineID {
		return nil
	}
	pool, machine := d.Labels[orchestrate.LabelPool], d.Labels[orchestrate.LabelMachine]
	s.log.Warn("bootstrap token used from another machine", "token", jt.ID, "deployment", d.ID, "pool", pool, "machine", machine,
		"from", from, "machine_id", req.MachineID, "want_machine_id", d.MachineID)
	if pool != "" {
		msg := fmt.Sprintf("refused a registration with machine %s's bootstrap token from %s: its agent's machine id %q is not the machine's (%s); "+
			"the token may have leaked, and stays unused for the machine's own agent", machine, from, req.MachineID, d.MachineID)
		s.poolEvent(ctx, pool, machine, "refused", msg)
	}
	return fmt.Errorf("join token %s was made for one pool machine, and this agent does not run on it (its machine id differs): "+
		"a pool's bootstrap token registers only its own machine; register another machine with a join token of its own (nodemgr join-token create): %w",
		jt.ID, errdefs.ErrPermission)
}

// rejoinWithToken re-joins the node an admin bound the join token to.
func (s *Server) rejoinWithToken(ctx context.Context, jt store.Token, req api.RegisterRequest) (store.Node, error) {
	// Check the machine before spending a use: a wrong one changes nothing.
	n, err := s.store.GetNode(ctx, jt.NodeID)
	if err != nil {
		return store.Node{}, fmt.Errorf("re-join token %s: node %s: %w", jt.ID, jt.NodeID, err)
	}
	if err := sameMachine(n, req); err != nil {
		return store.Node{}, err
	}
	if _, err := s.store.UseJoinToken(ctx, jt.ID, time.Now().UTC()); err != nil {
		return store.Node{}, fmt.Errorf("join token %s: %w", jt.ID, err)
	}
	return s.rejoinNode(ctx, jt.NodeID, req)
}

// sameMachine checks that a re-join comes from the node's own machine and
// data dir.
func sameMachine(n store.Node, req api.RegisterRequest) error {
	if n.MachineID == req.MachineID && n.DataDir == req.DataDir {
		return nil
	}
	return fmt.Errorf("this credential belongs to node %s on machine %s, data dir %s, not to machine %s, data dir %s; "+
		"register this agent with a join token instead: %w", n.ID, n.MachineID, n.DataDir, req.MachineID, req.DataDir, errdefs.ErrPermission)
}

// rejoinNode lets an agent take back its own node: same machine and data
// dir, fresh name, hardware and version; tags and labels merged; groups kept.
func (s *Server) rejoinNode(ctx context.Context, nodeID string, req api.RegisterRequest) (store.Node, error) {
	n, err := s.store.UpdateNode(ctx, nodeID, func(n *store.Node) error {
		if err := sameMachine(*n, req); err != nil {
			return err
		}
		n.Name, n.Hardware, n.AgentVersion = req.Name, req.Hardware, req.AgentVersion
		for _, tag := range req.Tags {
			if !slices.Contains(n.Tags, tag) {
				n.Tags = append(n.Tags, tag)
			}
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		maps.Copy(n.Labels, req.Labels)
		return nil
	})
	if errdefs.IsNotFound(err) {
		return store.Node{}, fmt.Errorf("node %s was removed; register with a join token: %w", nodeID, errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("re-join node %s: %w", nodeID, err)
	}
	return n, nil
}

// issueCredential replaces the node's credential with a fresh one.
func (s *Server) issueCredential(ctx context.Context, nodeID string) (api.RegisterResponse, error) {
	secret, hash := auth.NewSecret(api.TokenNode)
	now := time.Now().UTC()
	t := store.Token{ID: auth.NewID("t-"), Kind: api.TokenNode, NodeID: nodeID, Hash: hash,
		CreatedAt: now, ExpiresAt: now.Add(s.cfg.CredentialTTL)}
	if err := s.store.ReplaceNodeCredential(ctx, t); err != nil {
		return api.RegisterResponse{}, fmt.Errorf("issue node credential: %w", err)
	}
	return api.RegisterResponse{NodeID: nodeID, Credential: secret, ExpiresAt: t.ExpiresAt}, nil
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
		if !validState(hb.State) {
			return nil, errdefs.Field("state", "unknown agent state %q", hb.State)
		}
		now := time.Now().UTC()
		h.sess.Beat(now, hb.State, hb.SuiteID)
		h.s.hub.RecordBeat(store.Heartbeat{NodeID: h.sess.NodeID, At: now, AgentState: hb.State, SuiteID: hb.SuiteID})
		h.s.usage.record(h.sess.NodeID, now, hb.Usage)
		return api.HeartbeatAck{ServerTime: now}, nil
	case api.MethodGoodbye:
		var g api.Goodbye
		if err := httpapi.DecodeStrict(body, &g); err != nil {
			return nil, err
		}
		h.saidGoodbye.Store(true)
		h.s.hub.ForgetBeat(h.sess.NodeID)
		reason := "agent shut down"
		if g.Reason != "" {
			reason += ": " + g.Reason
		}
		if _, err := h.s.store.SetNodeStatus(ctx, h.sess.NodeID, api.StatusOffline, reason); err != nil {
			return nil, err
		}
		h.s.dispatcher.Reclaim(ctx, h.sess.NodeID, reason)
		return struct{}{}, nil
	case api.MethodRenew:
		return h.s.issueCredential(ctx, h.sess.NodeID)
	case api.MethodPresence:
		return h.presence(body)
	case api.MethodResourcesReport:
		return h.resourcesReport(ctx, body)
	case api.MethodContainersReport:
		return h.containersReport(ctx, body)
	case api.MethodNotices:
		return h.noticesReq(ctx, body)
	case api.MethodSuiteNext:
		return h.suiteNext(ctx)
	case api.MethodSuiteLeave:
		return h.suiteLeave(ctx, body)
	case api.MethodTasksFetch:
		return h.tasksFetch(ctx, body)
	case api.MethodTasksReport:
		return h.tasksReport(ctx, body)
	case api.MethodTasksReturn:
		return h.tasksReturn(ctx, body)
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
	if !validState(hello.State) {
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
	if err := validateHardware("hardware", hello.Hardware); err != nil {
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

// welcome brings the node online for the hello and starts the session's
// pushes.
func (h *agentHandler) welcome(ctx context.Context, hello api.Hello) (api.Welcome, error) {
	now := time.Now().UTC()
	n, err := h.s.store.UpdateNode(ctx, h.sess.NodeID, func(n *store.Node) error {
		if hello.Name != "" {
			n.Name = hello.Name
		}
		n.Hardware = hello.Hardware
		n.AgentVersion = hello.AgentVersion
		n.AgentState = hello.State
		n.CurrentSuite = hello.SuiteID
		n.Status, n.StatusReason = api.StatusOnline, ""
		n.LastHeartbeat = now
		n.Replica = h.s.hub.Instance()
		return nil
	})
	if err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	}
	// Everything up to LastSeq was handled; an ack may have been lost.
	if err := h.s.store.Ack(ctx, n.ID, hello.LastSeq); err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	}
	// Tasks the store says run here but the agent does not hold were lost
	// with a previous agent process: back to the queue.
	h.s.dispatcher.Reclaim(ctx, n.ID, "agent reconnected without them", hello.Holding...)
	// Tasks it holds that were taken from it while it was away (and have
	// not started elsewhere) are its again: no need to run them twice.
	if back, err := h.s.store.ReattachTasks(ctx, n.ID, hello.Holding); err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	} else if back > 0 {
		h.s.log.Info("agent came back holding tasks reclaimed from it; they are its again", "node", n.ID, "tasks", back)
	}
	revoked, err := h.s.revoked(ctx, n.ID, hello.Holding)
	if err != nil {
		return api.Welcome{}, fmt.Errorf("hello: %w", err)
	}
	if len(revoked) > 0 {
		h.s.log.Info("agent came back holding tasks that are no longer its own; told to drop them", "node", n.ID, "tasks", len(revoked))
	}
	h.sess.Keepalive = time.Duration(hello.Keepalive)
	h.sess.Beat(now, hello.State, hello.SuiteID)
	// The notices it has now replace those kept: a machine stopped and
	// started again has none.
	if err := h.s.hub.KeepNotices(ctx, h.sess, hello.Notices); err != nil {
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

// revoked returns the tasks among held (what a reconnecting agent holds)
// that are not running on the node by the store, after the welcome took
// back what it held at the attempt it lost: they were given to another
// node, or ended, while it was away. Its agent must not start them, and
// stops those it runs.
func (s *Server) revoked(ctx context.Context, nodeID string, held []string) ([]string, error) {
	if len(held) == 0 {
		return nil, nil
	}
	running, err := s.store.ListTasks(ctx, store.TaskFilter{NodeID: nodeID, States: []string{api.TaskRunning}})
	if err != nil {
		return nil, fmt.Errorf("list the tasks running on node %s: %w", nodeID, err)
	}
	mine := make(map[string]bool, len(running))
	for _, t := range running {
		mine[t.ID] = true
	}
	var out []string
	for _, id := range held {
		if !mine[id] {
			out = append(out, id)
		}
	}
	return out, nil
}
