package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/client"
)

// followLog prints each new piece once, in order, carries the cursor from
// one read to the next, waits out an unreachable node (saying so once),
// and ends cleanly when interrupted; another error ends it with the error.
func TestFollowLog(t *testing.T) {
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unavailable := &client.Error{Status: http.StatusServiceUnavailable, Message: "node n1 is not connected"}
	steps := []struct {
		piece, next string
		err         error
	}{
		{"b\n", "4", nil},
		{"", "4", nil},
		{"", "", unavailable},
		{"", "", unavailable},
		{"c\nd\n", "8", nil},
	}
	var froms []string
	read := func(_ context.Context, cursor string) ([]byte, string, error) {
		froms = append(froms, cursor)
		if len(froms) > len(steps) {
			cancel() // Ctrl-C
			return nil, "", context.Canceled
		}
		s := steps[len(froms)-1]
		return []byte(s.piece), s.next, s.err
	}
	if err := followLog(ctx, e, "2", read); err != nil {
		t.Fatalf("followLog = %v, want nil once interrupted", err)
	}
	if got := stdout.String(); got != "b\nc\nd\n" {
		t.Errorf("printed %q, want %q", got, "b\nc\nd\n")
	}
	if want := []string{"2", "4", "4", "4", "4", "8"}; !slices.Equal(froms, want) {
		t.Errorf("read from %v, want %v", froms, want)
	}
	if n := strings.Count(stderr.String(), "waiting"); n != 1 {
		t.Errorf("stderr %q: want one note that it waits", stderr.String())
	}

	if err := followLog(context.Background(), e, "", nil); err == nil || !strings.Contains(err.Error(), "upgrade the agent") {
		t.Errorf("followLog with no cursor = %v, want an error that says to upgrade the agent", err)
	}

	gone := &client.Error{Status: http.StatusNotFound, Message: "service 1.web.ops.prod not found"}
	err := followLog(context.Background(), e, "0", func(context.Context, string) ([]byte, string, error) { return nil, "", gone })
	if !errors.Is(err, gone) {
		t.Errorf("followLog after the service went = %v, want its error", err)
	}
}
