package server

import (
	"context"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/store"
)

// hardwareSignals are crashes that point at the machine or the code, not
// at resources: a task is given up after two of them.
var hardwareSignals = []string{"SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE"}

// abortPolicy is the seed's rule: give a task up after 2 crashes by
// SIGSEGV/SIGILL/SIGBUS/SIGFPE, or 3 failures of other kinds (SIGKILL, OOM,
// SIGABRT, non-zero exit, timeout, a SIGTERM nodemgr did not send).
// Attempts that nodemgr itself stopped are reported as stopped and never
// reach it.
func abortPolicy(failures []api.TaskFailure) bool {
	hw, other := 0, 0
	for _, f := range failures {
		if slices.Contains(hardwareSignals, f.Signal) {
			hw++
		} else {
			other++
		}
	}
	return hw >= 2 || other >= 3
}

// retryPolicy gives a task up by abortPolicy, or else holds its next
// attempt back RetryBackoff, doubled for each failure before this one, at
// most RetryBackoffMax: a task that fails at once must not spin.
func (s *Server) retryPolicy(failures []api.TaskFailure) (bool, time.Duration) {
	if abortPolicy(failures) {
		return true, 0
	}
	return false, retryWait(len(failures), s.cfg.RetryBackoff, s.cfg.RetryBackoffMax)
}

// retryWait is the pause after the nth failure (n ≥ 1).
func retryWait(n int, base, most time.Duration) time.Duration {
	wait := base
	for i := 1; i < n && wait < most; i++ {
		wait *= 2
	}
	return min(wait, most)
}

// stopSuperseded tells the nodes running re-runs of tasks that a late
// report finished to stop them: the first completion won.
func (s *Server) stopSuperseded(ctx context.Context, runs []store.Superseded) {
	for _, r := range runs {
		body, err := jsonBody(api.TaskRef{TaskID: r.TaskID, Attempt: r.Attempt})
		if err == nil {
			err = s.hub.notify(ctx, r.NodeID, api.NotifyTaskCancel, body)
		}
		if err != nil {
			s.log.Warn("tell a node to stop a superseded attempt", "task", r.TaskID, "node", r.NodeID, "err", err)
			continue
		}
		s.log.Info("a lost attempt finished first; stopping its re-run", "task", r.TaskID, "node", r.NodeID, "attempt", r.Attempt)
	}
}
