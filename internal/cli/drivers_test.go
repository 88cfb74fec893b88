package cli

import (
	"strings"
	"testing"

	"github.com/nodemgr/nodemgr/internal/drivers/execute"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// TestHelpListsEveryDriver: the help texts that list providers or
// executors name every one this binary registers (they once said "local,
// docker" while libvirt and aws existed).
func TestHelpListsEveryDriver(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		names []string
	}{
		{[]string{"provision", "--help"}, provision.Names()},
		{[]string{"exec", "--help"}, execute.Names()},
		{[]string{"cp", "--help"}, execute.Names()},
	} {
		code, stdout, stderr := runArgs(t, tc.args...)
		if code != 0 {
			t.Fatalf("nodemgr %s = exit %d: %s", strings.Join(tc.args, " "), code, stderr)
		}
		for _, name := range tc.names {
			if !strings.Contains(stdout, name) {
				t.Errorf("nodemgr %s does not name %s:\n%s", strings.Join(tc.args, " "), name, stdout)
			}
		}
	}
	if code, _, stderr := runArgs(t, "template", "render", "x"); code == 0 || !strings.Contains(stderr, providerList()) {
		t.Errorf("template render without --provider = exit %d, %q; want the providers listed", code, stderr)
	}
}
