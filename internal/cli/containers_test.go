package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nodemgr/nodemgr/api"
)

// container ls names nodes by name (by ID where only the agent answered),
// and cuts a long reason to fit its column with an ellipsis; container
// show gives the reason whole.
func TestContainerTables(t *testing.T) {
	now := time.Now()
	long := "exit code 1: " + strings.Repeat("the engine said something very long about it ", 8)
	cs := []api.Container{
		{Job: api.ContainerJob{ID: "c1", Name: "web", Image: "busybox"}, Node: "n-0123", NodeName: "edge-1",
			Status: api.ContainerRunning, CreatedAt: now},
		{Job: api.ContainerJob{ID: "c2", Name: "batch", Image: "busybox"}, Node: "n-4567",
			Status: api.ContainerFailed, Reason: long, CreatedAt: now},
	}
	var out bytes.Buffer
	e := &env{stdout: &out}
	if err := printContainers(e, cs, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("printContainers printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	tests := []struct {
		name      string
		line      string
		want      []string
		wantNot   []string
		maxLength int
	}{
		{"node by name", lines[1], []string{"edge-1"}, []string{"n-0123"}, 0},
		{"node by id without a name", lines[2], []string{"n-4567", "failed (exit code 1: the engine", "…"}, []string{long}, 160},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.want {
				if !strings.Contains(tc.line, s) {
					t.Errorf("row %q lacks %q", tc.line, s)
				}
			}
			for _, s := range tc.wantNot {
				if strings.Contains(tc.line, s) {
					t.Errorf("row %q has %q", tc.line, s)
				}
			}
			if n := utf8.RuneCountInString(tc.line); tc.maxLength > 0 && n > tc.maxLength {
				t.Errorf("row is %d characters, want at most %d: %q", n, tc.maxLength, tc.line)
			}
		})
	}

	out.Reset()
	printContainer(e, cs[1])
	if !strings.Contains(out.String(), long) {
		t.Errorf("container show cut the reason:\n%s", out.String())
	}
	out.Reset()
	printContainer(e, cs[0])
	if !strings.Contains(out.String(), "edge-1 (n-0123)") {
		t.Errorf("container show node: want %q in\n%s", "edge-1 (n-0123)", out.String())
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven ch…"},
		{"ünïcödé-ünïcödé", 8, "ünïcödé…"},
	}
	for _, tc := range tests {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// Tables that show sizes in MiB say MiB in their headers.
func TestResourceHeadersSayMiB(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out}
	printResources(e, api.NodeResources{Allocations: []api.Allocation{{ID: "container:x", Kind: "container", Name: "x"}}})
	got := out.String()
	if strings.Contains(got, " MB") || strings.Count(got, "MEMORY MiB") != 2 || !strings.Contains(got, "DISK MiB") {
		t.Errorf("printResources headers:\n%s\nwant MEMORY MiB (twice) and DISK MiB, no MB", got)
	}
}
