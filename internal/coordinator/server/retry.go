package server

import (
	"context"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/dispatch"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
)

// stopSuperseded tells the nodes running re-runs of tasks that a late
// report finished to stop them: the first completion won.
func (s *Server) stopSuperseded(ctx context.Context, runs []store.Superseded) {
	for _, r := range runs {
		body, err := jsonBody(api.TaskRef{TaskID: r.TaskID, Attempt: r.Attempt})
		if err == nil {
			err = s.hub.Notify(ctx, r.NodeID, api.NotifyTaskCancel, body)
		}
		if err != nil {
			s.log.Warn("tell a node to stop a superseded attempt", "task", r.TaskID, "node", r.NodeID, "err", err)
			continue
		}
		s.log.Info("a lost attempt finished first; stopping its re-run", "task", r.TaskID, "node", r.NodeID, "attempt", r.Attempt)
	}
}

// retryPolicy is dispatch.RetryPolicy with the server's backoff, as the
// store applies it to each failed attempt.
func (s *Server) retryPolicy(suite, task *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
	return dispatch.RetryPolicy(suite, task, failures, s.cfg.RetryBackoff, s.cfg.RetryBackoffMax)
}
