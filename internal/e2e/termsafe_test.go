package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/api"
)

// TestHumanOutputEscapesControlCharacters: a label set by a writer with a
// terminal escape (clear the screen, paint red) is shown as text by node
// show and node ls, never sent to the terminal; --json escapes it too.
func TestHumanOutputEscapesControlCharacters(t *testing.T) {
	s := startServer(t)
	startOnline(t, s, "esc-node")
	evil := "\u001b[2J\u001b[31mFAKE\rok"
	if _, err := s.client().PatchNode(context.Background(), "esc-node", api.NodePatch{SetLabels: map[string]string{"note": evil}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"node", "show", "esc-node"}, {"node", "ls"}, {"node", "show", "esc-node", "--json"}} {
		out, errOut, code := s.run(t, args...)
		if code != 0 {
			t.Fatalf("nodemgr %s = exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("nodemgr %s printed a raw control character:\n%q", strings.Join(args, " "), out)
		}
		if args[len(args)-1] != "--json" && args[1] == "show" && !strings.Contains(out, `\x1b[2J\x1b[31mFAKE\rok`) {
			t.Errorf("nodemgr %s does not show the label escaped:\n%q", strings.Join(args, " "), out)
		}
	}
}
