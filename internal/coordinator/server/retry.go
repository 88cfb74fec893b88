package server

import (
	"context"
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
	"github.com/nodemgr/nodemgr/internal/coordinator/store"
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

// retryPolicy applies the task's retry policy over its suite's: it gives
// the task up at a final exit code, after max_attempts failures, or (with
// no max_attempts) by abortPolicy; or else holds its next attempt back by
// the backoff (RetryBackoff unless the policy sets one), doubled for each
// failure before this one, at most RetryBackoffMax: a task that fails at
// once must not spin.
func (s *Server) retryPolicy(suite, task *api.RetryPolicy, failures []api.TaskFailure) (bool, time.Duration) {
	p := mergeRetry(suite, task)
	last := failures[len(failures)-1]
	switch {
	case last.Signal == "" && last.ExitCode >= 0 && slices.Contains(p.FinalExitCodes, last.ExitCode):
		return true, 0
	case p.MaxAttempts > 0 && len(failures) >= p.MaxAttempts:
		return true, 0
	case p.MaxAttempts == 0 && abortPolicy(failures):
		return true, 0
	}
	base := s.cfg.RetryBackoff
	if p.Backoff > 0 {
		base = time.Duration(p.Backoff)
	}
	return false, retryWait(len(failures), base, max(base, s.cfg.RetryBackoffMax))
}

// mergeRetry is the suite's policy with the task's fields laid over it.
func mergeRetry(suite, task *api.RetryPolicy) api.RetryPolicy {
	var p api.RetryPolicy
	for _, q := range []*api.RetryPolicy{suite, task} {
		if q == nil {
			continue
		}
		if q.MaxAttempts != 0 {
			p.MaxAttempts = q.MaxAttempts
		}
		if q.FinalExitCodes != nil {
			p.FinalExitCodes = q.FinalExitCodes
		}
		if q.Backoff != 0 {
			p.Backoff = q.Backoff
		}
	}
	return p
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
