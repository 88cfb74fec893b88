package worker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name     string
		r        Result
		cause    error
		stopping bool
		outcome  string
		reason   string
	}{
		{"success", Result{}, nil, false, api.OutcomeSucceeded, ""},
		{"success while stopping", Result{}, context.Canceled, true, api.OutcomeSucceeded, ""},
		{"exit code", Result{ExitCode: 3}, nil, false, api.OutcomeFailed, "exit status 3"},
		{"error", Result{Err: errors.New("no GPU")}, nil, false, api.OutcomeFailed, "no GPU"},
		{"signal", Result{ExitCode: -1, Signal: "SIGSEGV"}, nil, false, api.OutcomeFailed, "killed by SIGSEGV"},
		{"Go runtime fatal signal", Result{ExitCode: 2, Signal: "SIGSEGV"}, nil, false, api.OutcomeFailed, "crashed by SIGSEGV (Go runtime, exit status 2)"},
		// Not sent by nodemgr: the task's context had not ended.
		{"SIGTERM", Result{ExitCode: -1, Signal: "SIGTERM"}, nil, false, api.OutcomeFailed, "killed by SIGTERM (not sent by nodemgr)"},
		{"SIGINT", Result{ExitCode: -1, Signal: "SIGINT"}, nil, false, api.OutcomeFailed, "killed by SIGINT (not sent by nodemgr)"},
		// Sent by nodemgr: the worker stopping, the timeout's or a cancel's SIGTERM.
		{"SIGTERM, worker stopping", Result{ExitCode: -1, Signal: "SIGTERM", Err: context.Canceled}, context.Canceled, true, api.OutcomeStopped, "worker stopped"},
		{"SIGTERM at the timeout", Result{ExitCode: -1, Signal: "SIGTERM", Err: ErrTimeout}, ErrTimeout, false, api.OutcomeFailed, "timeout"},
		{"SIGTERM at a cancel", Result{ExitCode: -1, Signal: "SIGTERM", Err: context.Canceled}, &CancelError{Reason: "cancelled"}, false, api.OutcomeFailed, "cancelled"},
		{"worker stopping", Result{ExitCode: -1, Signal: "SIGKILL"}, context.Canceled, true, api.OutcomeStopped, "worker stopped"},
		{"timeout", Result{ExitCode: -1, Signal: "SIGKILL", Err: ErrTimeout}, ErrTimeout, false, api.OutcomeFailed, "timeout"},
		{"timeout, handler ignores ctx", Result{ExitCode: 1}, ErrTimeout, false, api.OutcomeFailed, "timeout"},
		{"cancelled by the agent", Result{Err: context.Canceled}, &CancelError{Reason: "cancelled"}, false, api.OutcomeFailed, "cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outcome, reason := classify(tc.r, tc.cause, tc.stopping)
			if outcome != tc.outcome || reason != tc.reason {
				t.Errorf("classify(%+v, %v, %v) = %q, %q; want %q, %q", tc.r, tc.cause, tc.stopping, outcome, reason, tc.outcome, tc.reason)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
	}{
		{"empty", nil, ""},
		{"small", []string{"a", "b"}, "ab"},
		{"exactly full", []string{strings.Repeat("x", maxTail)}, strings.Repeat("x", maxTail)},
		{"one big write", []string{"head" + strings.Repeat("x", maxTail)}, strings.Repeat("x", maxTail)},
		{"many writes", []string{"head", strings.Repeat("x", maxTail-2), "yz"}, strings.Repeat("x", maxTail-2) + "yz"},
		{"cut inside a character", []string{"é" + strings.Repeat("x", maxTail-1)}, strings.Repeat("x", maxTail-1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b tailBuffer
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(w))
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String() = %d bytes %.20q..., want %d bytes %.20q...", len(got), got, len(tc.want), tc.want)
			}
			if got := tailString(strings.Join(tc.writes, "")); got != tc.want {
				t.Errorf("tailString = %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
}

func TestTaskEnv(t *testing.T) {
	base := []string{"PATH=/bin", "NODEMGR_WORKER_SOCKET=/s", "NODEMGR_WORKER_TOKEN=secret", "NODEMGR_SUITE_ID=s1"}
	got := taskEnv(base, map[string]string{"B": "2", "A": "1"})
	want := []string{"PATH=/bin", "NODEMGR_SUITE_ID=s1", "A=1", "B=2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("taskEnv mismatch (-want +got):\n%s", diff)
	}
	if base[1] != "NODEMGR_WORKER_SOCKET=/s" {
		t.Error("taskEnv changed its input")
	}
}

func TestRunOutsideAnAgent(t *testing.T) {
	t.Setenv("NODEMGR_WORKER_SOCKET", "")
	err := Run(t.Context(), func(context.Context, Task) Result { return Result{} })
	if err == nil || !strings.Contains(err.Error(), "NODEMGR_WORKER_SOCKET is not set") {
		t.Errorf("Run = %v, want an error saying the socket is not set", err)
	}
}
