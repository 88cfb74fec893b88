package cli

import (
	"fmt"
	"testing"

	"github.com/nodemgr/nodemgr/client"
	"github.com/nodemgr/nodemgr/internal/base/errdefs"
)

// TestDescribe: what `error:` prints says each thing once and keeps the
// words that tell what is wrong.
func TestDescribe(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"field inside the chain", &client.Error{Code: "invalid", Field: "share", Message: "onboard: share: must be 10-90"}, "onboard: share: must be 10-90"},
		{"field not named", &client.Error{Code: "invalid", Field: "count", Message: "must be 1..100"}, "count: must be 1..100"},
		{"field leads", &client.Error{Code: "invalid", Field: "verb", Message: "verb: unknown lifecycle verb"}, "verb: unknown lifecycle verb"},
		{"server repeated a prefix", &client.Error{Code: "conflict", Message: "hibernate x: hibernate x: container is exited"}, "hibernate x: container is exited"},
		{"local not found", fmt.Errorf("get container: %w", errdefs.NotFound("container job %s", "c1")), "get container: container job c1 not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := describe(tc.err); got != tc.want {
				t.Errorf("describe(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
