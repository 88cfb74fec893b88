package dispatch

import (
	"slices"
	"time"

	"github.com/nodemgr/nodemgr/api"
)

// hardwareSignals are crashes that point at the machine or the code, not
// at resources: a task is given up after two of them.
var hardwareSignals = []string{"SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE"}

// AbortPolicy is the seed's rule: give a task up after 2 crashes by
// SIGSEGV/SIGILL/SIGBUS/SIGFPE, or 3 failures of other kinds (SIGKILL, OOM,
// SIGABRT, non-zero exit, timeout, a SIGTERM nodemgr did not send).
// Attempts that nodemgr itself stopped are reported as stopped and never
// reach it.
func AbortPolicy(failures []api.TaskFailure) bool {
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

// RetryPolicy applies the task's retry policy over its suite's: it gives
// the task up at a final exit code, after max_attempts failures, or (with
// no max_attempts) by AbortPolicy; or else holds its next attempt back by
// the backoff (backoff unless the policy sets one), doubled for each
// failure before this one, at most backoffMax: a task that fails at
// once must not spin.
func RetryPolicy(suite, task *api.RetryPolicy, failures []api.TaskFailure, backoff, backoffMax time.Duration) (bool, time.Duration) {
	p := mergeRetry(suite, task)
	last := failures[len(failures)-1]
	switch {
	case last.Signal == "" && last.ExitCode >= 0 && slices.Contains(p.FinalExitCodes, last.ExitCode):
		return true, 0
	case p.MaxAttempts > 0 && len(failures) >= p.MaxAttempts:
		return true, 0
	case p.MaxAttempts == 0 && AbortPolicy(failures):
		return true, 0
	}
	base := backoff
	if p.Backoff > 0 {
		base = time.Duration(p.Backoff)
	}
	return false, retryWait(len(failures), base, max(base, backoffMax))
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
