package agent

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodemgr/nodemgr/api"
)

// TestPrepareProblem runs real prepare hooks and checks what the agent
// would tell the server about each failure.
func TestPrepareProblem(t *testing.T) {
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	tests := []struct {
		name string
		hook api.Hook
		want api.SuiteProblem
	}{
		{
			name: "exit code and output",
			hook: api.Hook{Command: []string{"sh", "-c", "echo checking; echo missing license file >&2; exit 3"}},
			want: api.SuiteProblem{Stage: api.StagePrepare, ExitCode: 3, Reason: "exit status 3", OutputTail: "checking\nmissing license file\n"},
		},
		{
			name: "timeout",
			hook: api.Hook{Command: []string{"sh", "-c", "echo waiting; sleep 10"}, Timeout: api.Duration(200 * time.Millisecond)},
			want: api.SuiteProblem{Stage: api.StagePrepare, ExitCode: -1, Reason: "timed out after 200ms", OutputTail: "waiting\n"},
		},
		{
			name: "resource 404",
			hook: api.Hook{Command: []string{"true"}, Resources: []api.Resource{{URL: missing.URL + "/license", Path: "license"}}},
			want: api.SuiteProblem{Stage: api.StagePrepare, ExitCode: -1, Reason: "download " + missing.URL + "/license: HTTP 404 Not Found"},
		},
		{
			name: "last lines only",
			hook: api.Hook{Command: []string{"sh", "-c", "for i in $(seq 1 100); do echo line $i; done; exit 1"}},
			want: api.SuiteProblem{Stage: api.StagePrepare, ExitCode: 1, Reason: "exit status 1", OutputTail: lines(81, 100)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r := newRunner(&Agent{log: slog.New(slog.DiscardHandler)})
			su := api.Suite{ID: "s-1", SuiteSpec: api.SuiteSpec{Name: "lic", Hooks: api.Hooks{Prepare: &tc.hook}}}
			err := r.prepare(t.Context(), su, dir, nil)
			if err == nil {
				t.Fatalf("prepare(%v) = nil, want an error", tc.hook.Command)
			}
			if diff := cmp.Diff(tc.want, problemOf(api.StagePrepare, err)); diff != "" {
				t.Errorf("problemOf(%v) mismatch (-want +got):\n%s", err, diff)
			}
		})
	}
}

// TestCleanupProblem: a cleanup hook that fails after the suite ran is a
// problem of the cleanup stage, with its exit code and output, for the
// server to show with the suite; one that works is none.
func TestCleanupProblem(t *testing.T) {
	tests := []struct {
		name string
		hook *api.Hook
		want *api.SuiteProblem
	}{
		{
			name: "exit 7",
			hook: &api.Hook{Command: []string{"sh", "-c", "echo scratch busy >&2; exit 7"}},
			want: &api.SuiteProblem{Stage: api.StageCleanup, ExitCode: 7, Reason: "exit status 7", OutputTail: "scratch busy\n"},
		},
		{name: "works", hook: &api.Hook{Command: []string{"true"}}},
		{name: "no hook"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			r := newRunner(&Agent{log: log})
			su := api.Suite{ID: "s-1", SuiteSpec: api.SuiteSpec{Name: "scratch", Hooks: api.Hooks{Cleanup: tc.hook}}}
			got := r.cleanup(t.Context(), su, t.TempDir(), nil, log)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cleanup() problem mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestOutputTail: bounded by lines and bytes, a cut first line dropped.
func TestOutputTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prepare.log")
	long := strings.Repeat("x", 100)
	content := "first\n" + long + "\nsecond\nthird"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		bytes int64
		lines int
		want  string
	}{
		{1 << 10, 20, content},
		{1 << 10, 2, "second\nthird"},
		{20, 20, "second\nthird"}, // the cut line of x's is dropped
		{1 << 10, 0, ""},
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range tests {
		if got := outputTail(f, tc.bytes, tc.lines); got != tc.want {
			t.Errorf("outputTail(%d bytes, %d lines) = %q, want %q", tc.bytes, tc.lines, got, tc.want)
		}
	}
}
