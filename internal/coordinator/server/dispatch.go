package server

import (
	"context"
	"encoding/json"

	"github.com/nodemgr/nodemgr/internal/base/proto"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/base/httpapi"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/hub"
)

// newDispatcher makes the dispatcher over the server's store and hub.
func (s *Server) newDispatcher() *dispatch.Dispatcher {
	cfg := dispatch.Config{SuiteTick: s.cfg.SuiteTick, SuiteCloseAfter: s.cfg.SuiteCloseAfter,
		IdleSuiteGrace: s.cfg.IdleSuiteGrace, RetryBackoff: s.cfg.RetryBackoff, RetryBackoffMax: s.cfg.RetryBackoffMax}
	return dispatch.New(cfg, s.store, dispatchAgents{s.hub}, func() dispatch.Pools {
		if s.orch == nil { // not serving yet
			return nil
		}
		return s.orch
	}, s.log)
}

// dispatchAgents is the hub as the dispatcher sees it.
type dispatchAgents struct{ *hub.Hub }

func (a dispatchAgents) Get(nodeID string) dispatch.Session {
	if sess := a.Hub.Get(nodeID); sess != nil {
		return sess
	}
	return nil // not a typed nil: the dispatcher tests for none
}

func (a dispatchAgents) All() []dispatch.Session {
	all := a.Hub.All()
	out := make([]dispatch.Session, len(all))
	for i, sess := range all {
		out[i] = sess
	}
	return out
}

// Agent requests about suites and tasks: decoded here, answered by the
// dispatcher.

func (h *agentHandler) suiteNext(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.SuiteNextRequest
	if len(body) > 0 && string(body) != "null" {
		if err := httpapi.DecodeStrict(body, &req); err != nil {
			return nil, err
		}
	}
	return h.s.dispatcher.Next(ctx, h.sess, req)
}

func (h *agentHandler) suiteLeave(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.SuiteLeave
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	return struct{}{}, h.s.dispatcher.Leave(ctx, h.sess, req)
}

func (h *agentHandler) tasksFetch(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksFetch
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Held != nil {
		h.s.hub.NoteHeld(h.sess, req.SuiteID, *req.Held)
	}
	out, parked, err := h.s.dispatcher.Fetch(ctx, h.sess, req)
	if parked != nil {
		return proto.Later{Wait: func() (any, error) { return parked() }}, nil
	}
	return out, err
}

func (h *agentHandler) tasksReport(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksReport
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	if req.Held != nil && req.SuiteID != "" {
		h.s.hub.NoteHeld(h.sess, req.SuiteID, *req.Held)
	}
	applied, err := h.s.dispatcher.Report(ctx, h.sess, req)
	if err != nil {
		return nil, err
	}
	return struct {
		Applied int `json:"applied"`
	}{applied}, nil
}

func (h *agentHandler) tasksReturn(ctx context.Context, body json.RawMessage) (any, error) {
	var req api.TasksReturn
	if err := httpapi.DecodeStrict(body, &req); err != nil {
		return nil, err
	}
	n, err := h.s.dispatcher.Return(ctx, h.sess, req)
	if err != nil {
		return nil, err
	}
	return struct {
		Returned int `json:"returned"`
	}{n}, nil
}
